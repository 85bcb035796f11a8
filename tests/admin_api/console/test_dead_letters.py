"""Dead letters in the console: listed with the reason in words, retried or discarded, several
at once, each alone (both dialects)."""

from __future__ import annotations

from queues import DEAD_LETTER_QUEUE, Message
from queues.reasons import Reason
from tests.admin_api.console.conftest import Console
from tests.admin_api.test_queues import dead_letter


def test_retry_and_discard_several_dead_letters(console: Console) -> None:
    qm = console.api.qm
    qm.define_queue("SCORES", max_depth=1)
    ids = [
        dead_letter(console.api, "SCORES", f"lost {n}".encode(), Reason.MQRC_Q_FULL).hex() for n in range(3)
    ]
    page = console.get("/console/dead-letters").text
    assert page.count('<span class="reason">q full</span>') == 3
    assert page.count('<td class="destination">SCORES at QM1</td>') == 3
    assert "lost 0" in page

    # SCORES takes one: the first retry goes through, the second stays a dead letter.
    retried = console.post("/console/dead-letters/retry", msg_id=ids[:2]).text
    assert "Retried 1 of 2 dead letters" in retried and "MQRC_Q_FULL" in retried
    assert '<p class="note refused" role="alert">' in retried  # one stayed: shown as an error
    assert qm.get("SCORES").body == b"lost 0"
    discarded = console.post("/console/dead-letters/discard", msg_id=ids[1:]).text
    assert '<p class="note" role="status">Discarded 2 of 2 dead letters</p>' in discarded
    assert qm.depth(DEAD_LETTER_QUEUE) == 0
    assert "Discarded 0 of 1" in console.post("/console/dead-letters/discard", msg_id=ids[0]).text


def test_a_message_without_a_header_is_listed_as_such(console: Console) -> None:
    console.api.qm.put(DEAD_LETTER_QUEUE, Message(body=b"no header"))
    assert "<td>no MQDLH</td>" in console.get("/console/dead-letters").text
