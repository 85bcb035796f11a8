"""Queues in the console: paged list, browse with the MQRFH2 decoded, define, alter, purge and
delete through the API's handlers (both dialects)."""

from __future__ import annotations

import re
import time

from queues import DEAD_LETTER_QUEUE, Message
from queues.reasons import Reason
from tests.admin_api.console.conftest import Console
from tests.admin_api.test_queues import dead_letter
from tests.e2e.processes import publication


def test_the_list_pages_by_name_and_filters_by_pattern(console: Console) -> None:
    for n in range(60):
        console.api.qm.define_queue(f"APP.{n:03}")
    first = console.get("/console/queues?pattern=APP.*").text
    assert "APP.000" in first and "APP.049" in first and "APP.050" not in first
    assert 'href="/console/queues?pattern=APP.%2A&amp;after=APP.049"' in first
    second = console.get("/console/queues?pattern=APP.*&after=APP.049").text
    assert "APP.050" in second and "APP.059" in second and "APP.049<" not in second
    assert "SYSTEM.DEAD.LETTER.QUEUE" not in second
    assert "No queue matches" in console.get("/console/queues?pattern=NONE.*").text


def test_browse_shows_the_psc_command_its_topics_and_the_body(console: Console) -> None:
    qm = console.api.qm
    qm.define_queue("APP/IN")  # a slash in the name stays one path segment
    qm.put("APP/IN", publication("Sport/Soccer", 10))
    qm.put("APP/IN", Message(body=b"\x00\x01binary"))
    html = console.get("/console/queues/APP%2FIN").text
    assert '<dd class="command">Publish</dd>' in html
    assert '<dd class="topics">Sport/Soccer</dd>' in html
    assert "&lt;psc&gt; folder" in html
    assert ">10</pre>" in html
    # not text: a hex dump with offsets and an ASCII column, open at once
    assert '<details class="dump" open><summary>Hex dump</summary>' in html
    assert "00000000:  0001 6269 6E61 7279" in html and "&#39;..binary&#39;" in html


def test_browse_shows_the_whole_mqmd_by_mq_names(console: Console) -> None:
    qm = console.api.qm
    qm.define_queue("APP.MQMD")
    qm.put(
        "APP.MQMD", Message(body=b"x", correl_id=b"\x07" * 24, reply_to_q="REPLIES", priority=7, expiry=600)
    )
    html = console.get("/console/queues/APP.MQMD").text
    for name, value in (
        ("CorrelId", "07" * 24),
        ("ReplyToQ", "REPLIES"),
        ("Priority", "7"),
        ("Expiry", "600"),
        ("BackoutCount", "0"),
        ("UserIdentifier", ""),
    ):
        assert f"<dt>{name}</dt><dd>" in html
        if value:
            assert f"<dt>{name}</dt><dd>{value}</dd>" in html


def test_a_dead_letter_shows_its_mqdlh_decoded_and_the_message_it_carries(console: Console) -> None:
    dead_letter(console.api, "SCORES", b"lost score", Reason.MQRC_Q_FULL)
    html = console.get(f"/console/queues/{DEAD_LETTER_QUEUE}").text
    assert '<dd class="reason">MQRC_Q_FULL (2053)</dd>' in html
    assert "<dd>SCORES on QM1</dd>" in html
    assert '<pre class="body">lost score</pre>' in html  # the original data, not the header


def test_define_alter_purge_and_delete(console: Console) -> None:
    qm = console.api.qm
    defined = console.post("/console/queues", name="APP.Q", max_depth="7", description="orders")
    assert "Queue APP.Q defined" in defined.text
    assert (qm.inquire_queue("APP.Q").max_depth, qm.inquire_queue("APP.Q").description) == (7, "orders")
    flags = {"put_enabled_shown": "1", "get_enabled_shown": "1", "get_enabled": "on"}  # put unticked
    altered = console.post("/console/queues/APP.Q/alter", max_depth="9", **flags)
    assert "Queue APP.Q altered" in altered.text
    queue = qm.inquire_queue("APP.Q")
    assert (queue.max_depth, queue.put_enabled, queue.get_enabled) == (9, False, True)
    refused = console.post("/console/queues/APP.Q/alter", max_depth="-1")
    assert "Refused: max_depth" in refused.text
    console.post("/console/queues/APP.Q/alter", put_enabled_shown="1", put_enabled="on")
    qm.put("APP.Q", Message(body=b"one"))
    confirm = console.get("/console/queues/APP.Q/purge").text
    assert "This removes all 1 messages from APP.Q" in confirm
    assert qm.depth("APP.Q") == 1  # asking changes nothing
    assert "Purged 1 messages from APP.Q" in console.post("/console/queues/APP.Q/purge").text
    qm.put("APP.Q", Message(body=b"two"))
    kept = console.post("/console/queues/APP.Q/delete")
    assert "Refused: MQRC_Q_NOT_EMPTY" in kept.text
    assert "Queue APP.Q deleted" in console.post("/console/queues/APP.Q/delete", purge="on").text
    assert "APP.Q" not in [q.name for q in qm.list_queues()]


def test_a_queue_that_is_not_defined_leads_back_to_the_list(console: Console) -> None:
    gone = console.get("/console/queues/NOT.THERE")
    assert str(gone.url).endswith("/console/queues")
    assert "MQRC_UNKNOWN_OBJECT_NAME (2085)" in gone.text
    problem = console.api.get("/api/v1/queues/NOT.THERE")  # the API's answer is unchanged
    assert (problem.status_code, problem.headers["content-type"]) == (404, "application/problem+json")


def test_the_list_shows_put_and_get_rates_from_successive_samples(console: Console) -> None:
    qm = console.api.qm
    qm.define_queue("APP.Q")
    first = console.get("/console/queues?pattern=APP.*").text
    assert 'hx-trigger="every 5s"' in first and "live=1" in first
    qm.put_many([("APP.Q", Message(body=b"x")) for _ in range(30)])
    qm.get("APP.Q")
    time.sleep(1.1)  # the sampler keeps a sample a second at most
    rows = console.get("/console/queues?pattern=APP.*&live=1").text
    assert rows.startswith('<tbody id="queue-rows"') and "<h1>" not in rows
    put_rate = re.search(r'class="num put-rate" title="30 put since defined">([0-9.]+)<', rows)
    get_rate = re.search(r'class="num get-rate" title="1 gotten since defined">([0-9.]+)<', rows)
    assert put_rate and get_rate, rows
    assert 10 <= float(put_rate.group(1)) <= 30 and 0.5 <= float(get_rate.group(1)) <= 1
    page = console.get("/console/queues/APP.Q").text
    assert '<dd id="counts">30, 1</dd>' in page


def test_names_that_are_path_segments_of_their_own_are_refused_and_other_dots_are_linked(
    console: Console,
) -> None:
    """``.`` and ``..`` would be taken by a browser for the link's own segments (``queues.names``);
    every other name of dots and slashes stays one segment of its links."""
    for name in (".", ".."):
        assert "Refused: name" in console.post("/console/queues", name=name).text
    assert [q.name for q in console.api.qm.list_queues("*.*")] == ["SYSTEM.DEAD.LETTER.QUEUE"]
    for name, segment in (("...", "..."), ("A/..", "A%2F.."), ("%2E%2E", "%252E%252E")):
        console.api.qm.define_queue(name)
        assert f'href="/console/queues/{segment}"' in console.get("/console/queues").text
        assert f"<h1>Queue {name}</h1>" in console.get(f"/console/queues/{segment}").text
