"""Queues in the console: the paged and sorted list with descriptions, depth history and open
handles, browse with the MQRFH2 decoded, define and alter with every attribute, purge and delete
through the API's handlers (both dialects)."""

from __future__ import annotations

import re
import time

from broker.admin import accounts
from broker.store import mqtt
from queues import DEAD_LETTER_QUEUE, Message
from queues.opens import QueueOpen
from queues.owners import owner_name
from queues.reasons import Reason
from tests.admin_api.console.conftest import Console
from tests.admin_api.test_queues import dead_letter
from tests.e2e.processes import publication


def test_the_list_pages_by_name_and_filters_by_pattern(console: Console) -> None:
    for n in range(60):
        console.api.qm.define_queue(f"APP.{n:03}")
    first = console.get("/console/queues?pattern=APP.*").text
    assert "APP.000" in first and "APP.049" in first and "APP.050" not in first
    assert 'href="/console/queues?pattern=APP.%2A&amp;after=APP.049&amp;sort=name"' in first
    second = console.get("/console/queues?pattern=APP.*&after=APP.049").text
    assert "APP.050" in second and "APP.059" in second and "APP.049<" not in second
    assert "SYSTEM.DEAD.LETTER.QUEUE" not in second
    assert "No queue matches" in console.get("/console/queues?pattern=NONE.*").text
    backwards = console.get("/console/queues?pattern=APP.*&sort=-name").text
    assert names(backwards)[:2] == ["APP.059", "APP.058"] and "APP.009" not in backwards
    assert 'href="/console/queues?pattern=APP.%2A&amp;after=APP.010&amp;sort=-name"' in backwards
    assert names(console.get("/console/queues?pattern=APP.*&sort=-name&after=APP.010").text) == [
        f"APP.{n:03}" for n in range(9, -1, -1)
    ]


def names(html: str) -> list[str]:
    return re.findall(r'<tr data-queue="([^"]+)">', html)


def test_depth_and_rates_sort_the_page_shown_and_a_bad_sort_is_refused(console: Console) -> None:
    qm = console.api.qm
    for name, depth in (("APP.A", 2), ("APP.B", 0), ("APP.C", 5)):
        qm.define_queue(name)
        qm.put_many([(name, Message(body=b"x")) for _ in range(depth)])
    deepest = console.get("/console/queues?pattern=APP.*&sort=-depth").text
    assert names(deepest) == ["APP.C", "APP.A", "APP.B"]
    assert '<th aria-sort="descending"' in deepest and "Sorted within this page" in deepest
    assert 'hx-get="/console/queues?pattern=APP.%2A&amp;after=&amp;sort=-depth&amp;live=1"' in deepest
    assert names(console.get("/console/queues?pattern=APP.*&sort=depth").text) == ["APP.B", "APP.A", "APP.C"]
    first = console.get("/console/queues?pattern=APP.*&sort=-put").text  # one sample: no rates yet
    assert names(first) == ["APP.A", "APP.B", "APP.C"]
    qm.put_many([("APP.B", Message(body=b"x")) for _ in range(9)])
    time.sleep(1.1)
    assert names(console.get("/console/queues?pattern=APP.*&sort=-put").text)[0] == "APP.B"
    refused = console.get("/console/queues?sort=size")
    assert refused.status_code == 400 and "Not a console address" in refused.text


def test_the_list_shows_descriptions_depth_history_and_who_holds_a_queue_open(console: Console) -> None:
    qm = console.api.qm
    qm.define_queue("APP.IN", description="orders from the shop")
    client = mqtt.queue_for("sensor-1")
    qm.define_queue(client)
    with qm.unit_of_work() as uow:
        session = mqtt.StoredSession("sensor-1", client, "alice", False, 4, "10.0.0.5:4711", 1, 1)
        mqtt.save_session(uow.connection, session)
    router = owner_name("router")
    qm.open_queues(router, [QueueOpen("APP.IN", "broker QM1 routes from it", reads=True)])
    console.get("/console/queues?pattern=APP.*")
    qm.put_many([("APP.IN", Message(body=b"x")) for _ in range(3)])
    time.sleep(1.1)
    html = console.get("/console/queues").text
    row = re.search(r'<tr data-queue="APP.IN">.*?</tr>', html, re.S)
    assert row is not None
    assert '<td class="description">orders from the shop</td>' in row.group(0)
    assert "<title>depth over the last minute: now 3, lowest 0, highest 3</title>" in row.group(0)
    assert re.search(r'<polyline points="[0-9.]+,17.0 80.0,1.0"/>', row.group(0))  # from the floor to the top
    assert re.search(r'title="broker QM1 routes from it \(router:[^"]+\) \(input\)">1</td>', row.group(0))
    assert (
        'disabled title="MQRC_OBJECT_IN_USE (2042): queue APP.IN is in use: broker QM1 routes' in row.group(0)
    )
    assert 'href="/console/queues/APP.IN/delete"' not in row.group(0)
    mqtt_row = re.search(rf'<tr data-queue="{client}">.*?</tr>', html, re.S)
    assert (
        mqtt_row is not None and 'title="MQTT client sensor-1, connected (input)">1</td>' in mqtt_row.group(0)
    )
    assert f'href="/console/queues/{client}/delete"' in mqtt_row.group(0)  # the API would delete it
    page = console.get("/console/queues/APP.IN").text
    assert '<dd id="handles">1 input, 0 output' in page and "<li>broker QM1 routes from it (router:" in page
    assert (
        "Delete is refused while the queue is open: MQRC_OBJECT_IN_USE (2042): queue APP.IN is in use" in page
    )
    qm.close_queues(router)
    assert 'href="/console/queues/APP.IN/delete"' in console.get("/console/queues/APP.IN").text


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


EVERY = {
    "description": "orders",
    "max_depth": "7",
    "max_msg_length": "1000",
    "backout_threshold": "3",
    "backout_requeue_q": "APP.BACKOUT",
    "def_priority": "5",
    "def_persistence": "1",
    "put_enabled": "0",
    "get_enabled": "1",
    "usage": "xmitq",
    "definition_type": "permdyn",
    "index_type": "correlid",
}


def test_define_and_alter_every_attribute_the_cli_sets(console: Console) -> None:
    qm = console.api.qm
    page = console.get("/console/queues").text
    for label in (
        "Maximum message length, bytes (MAXMSGL)",
        "Backout requeue queue (BOQNAME)",
        "Index type (INDXTYPE)",
    ):
        assert label in page
    assert '<option value="">default (normal)</option>' in page and 'placeholder="5000"' in page
    defined = console.post("/console/queues", name="APP.Q", **EVERY)
    assert "Queue APP.Q defined" in defined.text
    queue = qm.inquire_queue("APP.Q")
    assert {name: getattr(queue, name) for name in EVERY} == {
        "description": "orders",
        "max_depth": 7,
        "max_msg_length": 1000,
        "backout_threshold": 3,
        "backout_requeue_q": "APP.BACKOUT",
        "def_priority": 5,
        "def_persistence": 1,
        "put_enabled": False,
        "get_enabled": True,
        "usage": "xmitq",
        "definition_type": "permdyn",
        "index_type": "correlid",
    }
    shown = console.get("/console/queues/APP.Q").text
    assert (
        '<dt>Default persistence (DEFPSIST)</dt><dd data-attribute="def_persistence">persistent</dd>' in shown
    )
    assert '<option value="xmitq" selected>transmission</option>' in shown  # the alter form holds its values
    # The alter form sends every field; only those that differ are changed (and audited).
    form = {**EVERY, "max_depth": "9", "put_enabled": "1", "description": ""}
    altered = console.post("/console/queues/APP.Q/alter", **form)
    assert "Queue APP.Q altered: description, max_depth, put_enabled" in altered.text
    queue = qm.inquire_queue("APP.Q")
    assert (queue.max_depth, queue.put_enabled, queue.description, queue.index_type) == (
        9,
        True,
        "",
        "correlid",
    )
    with qm.reading() as conn:
        entry = accounts.list_audit(conn, limit=1)[0]
    assert entry.summary["attributes"] == {"description": "", "max_depth": 9, "put_enabled": True}
    unchanged = console.post("/console/queues/APP.Q/alter", **{**form, "description": ""})
    assert "Queue APP.Q unchanged" in unchanged.text
    for value, refusal in (
        ("-1", "Refused: max_depth: &#39;-1&#39; is not a whole number"),
        ("lots", "Refused: max_depth: &#39;lots&#39; is not a whole number"),
        ("1000000000", "Refused: max_depth: Input should be less than or equal to 999999999"),
    ):
        assert refusal in console.post("/console/queues/APP.Q/alter", max_depth=value).text
    assert "Refused: usage" in console.post("/console/queues/APP.Q/alter", usage="remote").text
    again = console.post("/console/queues", name="APP.Q", max_depth="11")
    assert "MQRCCF_OBJECT_ALREADY_EXISTS" in again.text
    replaced = console.post("/console/queues", name="APP.Q", max_depth="11", replace="on")
    assert "Queue APP.Q defined" in replaced.text and qm.inquire_queue("APP.Q").max_depth == 11


def test_purge_and_delete_ask_first(console: Console) -> None:
    qm = console.api.qm
    qm.define_queue("APP.Q")
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
