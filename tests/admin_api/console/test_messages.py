"""A queue's messages in the console: a test message put with its MQMD fields (MQSTR, none,
MQHRF2), one got and one deleted after a confirmation page, a selection moved or copied, and the
MQ reason of a target that refuses, through the API's handlers (both dialects)."""

from __future__ import annotations

import re

from admin_api.console.sessions import csrf_token
from broker.protocol import rfh2
from queues import Message
from queues.message import MQFMT_NONE, MQFMT_RF_HEADER_2, MQFMT_STRING
from tests.admin_api.console.conftest import Console

NOTE = re.compile(r'<p class="note( refused)?" role="(?:status|alert)">([^<]*)</p>')


def note(html: str) -> tuple[bool, str]:
    """The note a page shows after a change: (refused, its text)."""
    found = NOTE.search(html)
    assert found, html
    return bool(found.group(1)), found.group(2).replace("&#39;", "'")


def put(console: Console, queue: str, *bodies: bytes) -> list[str]:
    return [console.api.qm.put(queue, Message(body=body, format=MQFMT_STRING)).hex() for body in bodies]


def bodies(console: Console, queue: str) -> list[bytes]:
    return [b.message.body for b in console.api.qm.browse(queue, limit=100)]


def test_put_a_test_message_with_its_mqmd_fields(console: Console) -> None:
    qm = console.api.qm
    qm.define_queue("APP.Q")
    page = console.get("/console/queues/APP.Q").text
    assert '<form method="post" action="/console/queues/APP.Q/messages" class="define put">' in page
    done = console.post(
        "/console/queues/APP.Q/messages",
        body="line 1\r\nline 2",
        format="MQSTR",
        priority="7",
        persistence="1",
        expiry="600",
        correl_id="0a0b",
        reply_to_q="REPLIES",
        reply_to_qmgr="QM2",
    )
    refused, text = note(done.text)
    (browsed,) = qm.browse("APP.Q")
    message = browsed.message
    assert (refused, text) == (False, f"Put message {message.msg_id.hex()} on APP.Q")
    assert (message.body, message.format, message.priority, message.persistence) == (
        b"line 1\nline 2",
        MQFMT_STRING,
        7,
        1,
    )
    assert (message.correl_id, message.reply_to_q, message.reply_to_qmgr, message.user_id) == (
        bytes.fromhex("0a0b").ljust(24, b"\x00"),
        "REPLIES",
        "QM2",
        "otto",
    )
    assert 590 <= message.expiry <= 600
    assert '<pre class="body">line 1\nline 2</pre>' in done.text  # the page it leads back to shows it


def test_put_with_format_none_and_mqhrf2_and_what_is_refused(console: Console) -> None:
    qm = console.api.qm
    qm.define_queue("APP.Q", def_priority=3)
    console.post("/console/queues/APP.Q/messages", body="raw", format="", priority="", expiry="")
    console.post(
        "/console/queues/APP.Q/messages",
        body="payload",
        format="MQHRF2",
        folder=["<usr><colour>red</colour></usr>\r\n", "  "],
    )
    plain, headed = (b.message for b in qm.browse("APP.Q", limit=10))
    assert (plain.body, plain.format, plain.priority) == (b"raw", MQFMT_NONE, 3)
    assert headed.format == MQFMT_RF_HEADER_2
    decoded = rfh2.decode(headed.body, headed.encoding, headed.format)
    assert (decoded.folders, decoded.payload, decoded.payload_format) == (
        ("<usr><colour>red</colour></usr>",),
        b"payload",
        MQFMT_STRING,
    )
    for fields, why in (
        ({"format": "MQHRF2", "folder": "<usr><open></usr>"}, "MQRC_RFH_PARM_ERROR"),
        ({"format": "MQHRF2", "folder": "not xml"}, "MQRC_RFH_ERROR"),
        ({"priority": "10"}, "priority"),
        ({"correl_id": "xyz"}, "correl_id"),
    ):
        refused, text = note(console.post("/console/queues/APP.Q/messages", body="x", **fields).text)
        assert refused and why in text, text
    qm.alter_queue("APP.Q", put_enabled=False)
    refused, text = note(console.post("/console/queues/APP.Q/messages", body="x", format="MQSTR").text)
    assert refused and "MQRC_PUT_INHIBITED (2051)" in text
    assert qm.depth("APP.Q") == 2


def test_the_browse_list_selects_with_the_token_on_its_post_buttons_only(console: Console) -> None:
    qm = console.api.qm
    qm.define_queue("APP.Q")
    (msg_id,) = put(console, "APP.Q", b"one")
    page = console.get("/console/queues/APP.Q").text
    selection = page[
        page.index('<form method="post" id="messages"') : page.index("</form>", page.index('id="messages"'))
    ]
    assert f'<input type="checkbox" name="msg_id" value="{msg_id}"' in selection
    assert 'class="select-all"' in selection
    csrf = csrf_token(console.api.secrets["operator"])
    assert selection.count(f'name="csrf" value="{csrf}"') == 2  # move and copy, never a hidden field
    assert 'formmethod="get" formnovalidate formaction="/console/queues/APP.Q/messages/delete"' in selection
    assert f'href="/console/queues/APP.Q/messages/get?msg_id={msg_id}"' in selection
    viewer = console.sign_in("viewer").get("/console/queues/APP.Q").text
    assert 'name="msg_id"' not in viewer and "Put a test message" not in viewer and 'method="post"' in viewer
    assert viewer.count('method="post"') == 1  # sign out


def test_get_asks_first_then_shows_the_message_it_took(console: Console) -> None:
    qm = console.api.qm
    qm.define_queue("APP.Q")
    first, second = put(console, "APP.Q", b"first", b"second")
    asked = console.get(f"/console/queues/APP.Q/messages/get?msg_id={second}").text
    assert "<h1>Get a message from APP.Q?</h1>" in asked and '<pre class="body">second</pre>' in asked
    assert f'<input type="hidden" name="msg_id" value="{second}">' in asked
    assert qm.depth("APP.Q") == 2  # asking changes nothing
    got = console.post("/console/queues/APP.Q/messages/get", msg_id=second)
    assert "<h1>Message got from APP.Q</h1>" in got.text
    assert '<pre class="body">second</pre>' in got.text and f"MsgId {second}" in got.text
    assert bodies(console, "APP.Q") == [b"first"]
    again = console.post("/console/queues/APP.Q/messages/get", msg_id=second)
    assert note(again.text) == (True, "Refused: MQRC_NO_MSG_AVAILABLE (2033): no message available on APP.Q")
    gone = console.get(f"/console/queues/APP.Q/messages/get?msg_id={second}")
    assert str(gone.url).endswith("/console/queues/APP.Q")
    assert note(gone.text) == (True, f"Refused: no message with MsgId {second} on APP.Q")
    assert console.get("/console/queues/APP.Q/messages/get?msg_id=0102").status_code == 400
    assert note(console.post("/console/queues/APP.Q/messages/get", msg_id=[first, second]).text)[0]
    assert bodies(console, "APP.Q") == [b"first"]


def test_delete_a_selection_after_a_confirmation_page(console: Console) -> None:
    qm = console.api.qm
    qm.define_queue("APP.Q")
    one, two, three = put(console, "APP.Q", b"one", b"two", b"three")
    asked = console.get(f"/console/queues/APP.Q/messages/delete?msg_id={one}&msg_id={three}&target=").text
    assert "<h1>Delete 2 messages from APP.Q?</h1>" in asked and "Yes, delete 2 messages" in asked
    assert qm.depth("APP.Q") == 3
    deleted = console.post("/console/queues/APP.Q/messages/delete", msg_id=[one, three])
    assert note(deleted.text) == (False, "Deleted 2 of 2 messages")
    assert bodies(console, "APP.Q") == [b"two"]
    partly = console.post("/console/queues/APP.Q/messages/delete", msg_id=[one, two])
    refused, text = note(partly.text)
    assert refused and text.startswith("Deleted 1 of 2 messages; ") and "MQRC_NO_MSG_AVAILABLE" in text
    for nothing in (
        console.get("/console/queues/APP.Q/messages/delete"),
        console.post("/console/queues/APP.Q/messages/delete"),
    ):
        assert note(nothing.text) == (True, "No messages selected: nothing was done")


def test_move_and_copy_a_selection_and_a_target_that_refuses(console: Console) -> None:
    qm = console.api.qm
    qm.define_queue("APP.Q")
    qm.define_queue("APP.OUT")
    one, two = put(console, "APP.Q", b"one", b"two")
    copied = console.post("/console/queues/APP.Q/messages/copy", msg_id=[one, two], target="APP.OUT")
    assert note(copied.text) == (False, "Copied 2 messages from APP.Q to APP.OUT")
    moved = console.post("/console/queues/APP.Q/messages/move", msg_id=[two], target="APP.OUT")
    assert note(moved.text) == (False, "Moved 1 messages from APP.Q to APP.OUT")
    assert bodies(console, "APP.Q") == [b"one"]
    assert [b.message.msg_id.hex() for b in qm.browse("APP.OUT", limit=10)] == [one, two, two]
    qm.alter_queue("APP.OUT", max_depth=3)
    for target, reason in (
        ("NOT.THERE", "MQRC_UNKNOWN_OBJECT_NAME (2085)"),
        ("APP.OUT", "MQRC_Q_FULL (2053)"),
    ):
        refused, text = note(
            console.post("/console/queues/APP.Q/messages/move", msg_id=[one], target=target).text
        )
        assert refused and text.startswith(f"Refused: {reason}"), text
    qm.alter_queue("APP.OUT", max_depth=10, put_enabled=False)
    refused, text = note(
        console.post("/console/queues/APP.Q/messages/copy", msg_id=[one], target="APP.OUT").text
    )
    assert refused and text.startswith("Refused: MQRC_PUT_INHIBITED (2051)")
    assert (bodies(console, "APP.Q"), qm.depth("APP.OUT")) == ([b"one"], 3)  # nothing lost, nothing added
    assert note(console.post("/console/queues/APP.Q/messages/move", target="APP.OUT").text) == (
        True,
        "No messages selected: nothing was done",
    )
    refused, text = note(
        console.post("/console/queues/APP.Q/messages/move", msg_id=["xyz"], target="APP.OUT").text
    )
    assert (refused, text) == (True, "Refused: not a MsgId of 48 hex digits: xyz")
    refused, text = note(console.post("/console/queues/APP.Q/messages/move", msg_id=[one], target="").text)
    assert refused and text.startswith("Refused: target")


def test_a_viewer_cannot_change_messages(console: Console) -> None:
    qm = console.api.qm
    qm.define_queue("APP.Q")
    qm.define_queue("APP.OUT")
    (msg_id,) = put(console, "APP.Q", b"one")
    console.sign_in("viewer")
    assert console.get(f"/console/queues/APP.Q/messages/get?msg_id={msg_id}").status_code == 403
    for path, fields in (
        ("messages", {"body": "x"}),
        ("messages/get", {"msg_id": msg_id}),
        ("messages/delete", {"msg_id": msg_id}),
        ("messages/move", {"msg_id": msg_id, "target": "APP.OUT"}),
    ):
        assert console.post(f"/console/queues/APP.Q/{path}", **fields).status_code == 403
    assert (bodies(console, "APP.Q"), qm.depth("APP.OUT")) == ([b"one"], 0)
