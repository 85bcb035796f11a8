"""Dead letters in the console: listed with the reason in words, shown one at a time with the MQDLH
decoded, retried, forwarded to another queue or discarded after a confirmation page, several at
once, each alone; nothing selected does nothing and says so (both dialects)."""

from __future__ import annotations

from queues import DEAD_LETTER_QUEUE, Message
from queues.message import MQFMT_STRING
from queues.reasons import Reason
from tests.admin_api.console.conftest import Console
from tests.admin_api.console.test_messages import note
from tests.admin_api.test_queues import dead_letter


def lost(console: Console, *bodies: str, queue: str = "SCORES") -> list[str]:
    return [dead_letter(console.api, queue, body.encode(), Reason.MQRC_Q_FULL).hex() for body in bodies]


def test_retry_and_discard_several_dead_letters(console: Console) -> None:
    qm = console.api.qm
    qm.define_queue("SCORES", max_depth=1)
    ids = lost(console, "lost 0", "lost 1", "lost 2")
    page = console.get("/console/dead-letters").text
    assert page.count('<span class="reason">q full</span>') == 3
    assert page.count('<td class="destination">SCORES at QM1</td>') == 3
    assert f'<a class="show" href="/console/dead-letters/{ids[0]}"><code>lost 0</code></a>' in page

    # SCORES takes one: the first retry goes through, the second stays a dead letter.
    retried = console.post("/console/dead-letters/retry", msg_id=ids[:2]).text
    assert "Retried 1 of 2 dead letters" in retried and "MQRC_Q_FULL" in retried
    assert '<p class="note refused" role="alert">' in retried  # one stayed: shown as an error
    assert qm.get("SCORES").body == b"lost 0"
    discarded = console.post("/console/dead-letters/discard", msg_id=ids[1:]).text
    assert '<p class="note" role="status">Discarded 2 of 2 dead letters</p>' in discarded
    assert qm.depth(DEAD_LETTER_QUEUE) == 0
    assert "Discarded 0 of 1" in console.post("/console/dead-letters/discard", msg_id=ids[0]).text


def test_discard_asks_first_on_a_page_showing_what_goes(console: Console) -> None:
    qm = console.api.qm
    first, second = lost(console, "lost 0", "lost 1")
    asked = console.get(f"/console/dead-letters/discard?msg_id={first}&msg_id={second}&queue=").text
    assert "<h1>Discard 2 dead letters?</h1>" in asked and "Yes, discard 2 dead letters" in asked
    assert '<dd class="reason">MQRC_Q_FULL (2053)</dd>' in asked and '<pre class="body">lost 1</pre>' in asked
    assert 'action="/console/dead-letters/discard"' in asked
    assert asked.count('<input type="hidden" name="msg_id"') == 2
    assert qm.depth(DEAD_LETTER_QUEUE) == 2  # asking changes nothing
    list_page = console.get("/console/dead-letters").text
    letters = list_page[
        list_page.index('id="dead-letters"') : list_page.index(
            "</form>", list_page.index('id="dead-letters"')
        )
    ]
    assert 'formmethod="get" formnovalidate formaction="/console/dead-letters/discard"' in letters
    assert 'type="hidden" name="csrf"' not in letters  # the token never goes into the address
    console.post("/console/dead-letters/discard", msg_id=[first])
    gone = console.get(f"/console/dead-letters/discard?msg_id={first}")
    assert note(gone.text) == (True, "Refused: none of those dead letters is on the dead-letter queue now")


def test_nothing_selected_does_nothing_and_says_so(console: Console) -> None:
    lost(console, "lost 0")
    for answer in (
        console.post("/console/dead-letters/retry"),
        console.post("/console/dead-letters/forward", queue="REPAIR"),
        console.post("/console/dead-letters/discard"),
        console.get("/console/dead-letters/discard"),
    ):
        assert str(answer.url).endswith("/console/dead-letters")
        assert note(answer.text) == (True, "No dead letters selected: nothing was done")
        assert " 0 of 0" not in answer.text
    assert console.api.qm.depth(DEAD_LETTER_QUEUE) == 1


def test_one_dead_letter_shown_and_forwarded_without_its_header(console: Console) -> None:
    qm = console.api.qm
    qm.define_queue("REPAIR")
    (msg_id,) = lost(console, "lost score")
    page = console.get(f"/console/dead-letters/{msg_id}").text
    assert f"<h1>Dead letter {msg_id}</h1>" in page
    assert '<dd class="reason">MQRC_Q_FULL (2053)</dd>' in page and "<dd>SCORES on QM1</dd>" in page
    assert '<pre class="body">lost score</pre>' in page
    assert 'action="/console/dead-letters/forward"' in page and "Retry: put it back on SCORES on QM1" in page
    assert f'href="/console/dead-letters/discard?msg_id={msg_id}"' in page
    refused = console.post("/console/dead-letters/forward", msg_id=msg_id, queue="NOT.THERE")
    assert note(refused.text) == (
        True,
        f"Forwarded 0 of 1 dead letters to NOT.THERE; {msg_id[:16]}...: "
        "MQRC_UNKNOWN_OBJECT_NAME (2085): queue 'NOT.THERE' is not defined",
    )
    forwarded = console.post("/console/dead-letters/forward", msg_id=msg_id, queue="REPAIR")
    assert note(forwarded.text) == (False, "Forwarded 1 of 1 dead letters to REPAIR")
    message = qm.get("REPAIR")
    assert (message.body, message.format, message.ccsid, message.msg_id.hex()) == (
        b"lost score",
        MQFMT_STRING,
        819,
        msg_id,
    )
    gone = console.get(f"/console/dead-letters/{msg_id}")
    assert note(gone.text) == (True, f"Refused: dead letter {msg_id} is not on the dead-letter queue")
    assert console.get("/console/dead-letters/0102").status_code == 400


def test_a_forward_to_a_name_that_is_not_one_moves_nothing(console: Console) -> None:
    ids = lost(console, "lost 0", "lost 1")
    refused, text = note(console.post("/console/dead-letters/forward", msg_id=ids, queue="BAD NAME").text)
    assert refused and text.startswith("Refused: queue: String should match pattern"), text
    assert console.api.qm.depth(DEAD_LETTER_QUEUE) == 2


def test_a_message_without_a_header_is_listed_as_such(console: Console) -> None:
    console.api.qm.put(DEAD_LETTER_QUEUE, Message(body=b"no header"))
    assert "<td>no MQDLH</td>" in console.get("/console/dead-letters").text
