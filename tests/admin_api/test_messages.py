"""One queue's messages by MsgId over HTTP: got, deleted, moved and copied, each change an
operator's and audited, a refusing target losing nothing (both dialects)."""

from __future__ import annotations

import base64

import pytest

from queues import Message
from queues.message import MQFMT_STRING
from tests.admin_api.conftest import Api, assert_problem

QUEUES = "/api/v1/queues"


def put(api: Api, queue: str, *bodies: bytes) -> list[str]:
    return [
        api.qm.put(queue, Message(body=body, format=MQFMT_STRING, correl_id=b"\x05" * 24, priority=4)).hex()
        for body in bodies
    ]


def bodies(api: Api, queue: str) -> list[bytes]:
    return [b.message.body for b in api.qm.browse(queue, limit=100)]


def audit(api: Api) -> list[tuple[str, str, int, dict[str, object]]]:
    entries = api.get("/api/v1/audit").json()["items"]
    return [(e["method"], e["resource"], e["status"], e["summary"]) for e in reversed(entries)]


@pytest.fixture
def queues(api: Api) -> Api:
    api.qm.define_queue("APP.IN")
    api.qm.define_queue("APP.OUT")
    return api


def test_get_returns_the_message_and_takes_it_off_the_queue(queues: Api) -> None:
    api = queues
    first, second = put(api, "APP.IN", b"first", b"\x00binary")
    got = api.post(f"{QUEUES}/APP.IN/messages/{second}/get", "operator")
    assert got.status_code == 200, got.text
    body = got.json()
    assert (body["msg_id"], body["body_text"], base64.b64decode(body["body_base64"])) == (
        second,
        None,
        b"\x00binary",
    )
    assert (body["format"], body["correl_id"], body["priority"]) == ("MQSTR", "05" * 24, 4)
    assert bodies(api, "APP.IN") == [b"first"]
    assert_problem(
        api.post(f"{QUEUES}/APP.IN/messages/{second}/get", "operator"), 404, "MQRC_NO_MSG_AVAILABLE"
    )
    assert_problem(api.post(f"{QUEUES}/APP.IN/messages/{first}/get", "viewer"), 403)
    api.qm.alter_queue("APP.IN", get_enabled=False)
    assert_problem(api.post(f"{QUEUES}/APP.IN/messages/{first}/get"), 409, "MQRC_GET_INHIBITED")
    assert_problem(api.post(f"{QUEUES}/NOPE/messages/{first}/get"), 404, "MQRC_UNKNOWN_OBJECT_NAME")
    assert_problem(api.post(f"{QUEUES}/APP.IN/messages/0102/get"), 422)
    assert bodies(api, "APP.IN") == [b"first"]


def test_delete_removes_one_message(queues: Api) -> None:
    api = queues
    _, gone = put(api, "APP.IN", b"kept", b"gone")
    assert_problem(api.delete(f"{QUEUES}/APP.IN/messages/{gone}", "viewer"), 403)
    assert api.delete(f"{QUEUES}/APP.IN/messages/{gone.upper()}", "operator").status_code == 204
    assert_problem(api.delete(f"{QUEUES}/APP.IN/messages/{gone}", "operator"), 404, "MQRC_NO_MSG_AVAILABLE")
    assert bodies(api, "APP.IN") == [b"kept"]
    assert api.qm.inquire_queue("APP.IN").depth == 1


def test_move_and_copy_keep_the_msg_id_and_are_audited(queues: Api) -> None:
    api = queues
    one, two, three = put(api, "APP.IN", b"1", b"2", b"3")
    moved = api.post(
        f"{QUEUES}/APP.IN/move", "operator", json={"msg_ids": [one, three, one], "target": "APP.OUT"}
    )
    assert moved.status_code == 200, moved.text
    assert moved.json() == {"queue": "APP.IN", "target": "APP.OUT", "msg_ids": [one, three]}
    assert (bodies(api, "APP.IN"), bodies(api, "APP.OUT")) == ([b"2"], [b"1", b"3"])
    copied = api.post(
        f"{QUEUES}/APP.IN/copy", "operator", json={"msg_ids": [two.upper()], "target": "APP.OUT"}
    )
    assert copied.json()["msg_ids"] == [two]
    assert bodies(api, "APP.IN") == [b"2"]
    assert [b.message.msg_id.hex() for b in api.qm.browse("APP.OUT", limit=10)] == [one, three, two]
    assert audit(api)[-2:] == [
        (
            "POST",
            "/api/v1/queues/{name}/move",
            200,
            {"name": "APP.IN", "target": "APP.OUT", "msg_ids": [one, three]},
        ),
        (
            "POST",
            "/api/v1/queues/{name}/copy",
            200,
            {"name": "APP.IN", "target": "APP.OUT", "msg_ids": [two]},
        ),
    ]


@pytest.mark.parametrize("operation", ["move", "copy"])
def test_a_target_that_refuses_gives_its_mq_reason_and_loses_nothing(queues: Api, operation: str) -> None:
    api = queues
    ids = put(api, "APP.IN", b"1", b"2")
    path = f"{QUEUES}/APP.IN/{operation}"
    assert_problem(
        api.post(path, json={"msg_ids": ids, "target": "NOT.THERE"}), 409, "MQRC_UNKNOWN_OBJECT_NAME"
    )
    api.qm.alter_queue("APP.OUT", put_enabled=False)
    assert_problem(api.post(path, json={"msg_ids": ids, "target": "APP.OUT"}), 409, "MQRC_PUT_INHIBITED")
    api.qm.alter_queue("APP.OUT", put_enabled=True, max_depth=1)
    assert_problem(api.post(path, json={"msg_ids": ids, "target": "APP.OUT"}), 409, "MQRC_Q_FULL")
    missing = api.post(path, json={"msg_ids": [*ids, "09" * 24], "target": "APP.IN"})
    assert "09" * 24 in assert_problem(missing, 409, "MQRC_NO_MSG_AVAILABLE")["detail"]
    assert (bodies(api, "APP.IN"), bodies(api, "APP.OUT")) == ([b"1", b"2"], [])
    assert [status for _, _, status, _ in audit(api)] == [409, 409, 409, 409]  # refusals are recorded
    assert_problem(api.post(path, "viewer", json={"msg_ids": ids, "target": "APP.OUT"}), 403)
    unknown = api.post(f"{QUEUES}/NOPE/{operation}", json={"msg_ids": ids, "target": "APP.OUT"})
    assert_problem(unknown, 404, "MQRC_UNKNOWN_OBJECT_NAME")  # the path's queue: not found


def test_selections_are_checked_before_the_queue_manager(queues: Api) -> None:
    api = queues
    (msg_id,) = put(api, "APP.IN", b"1")
    for body in (
        {"msg_ids": [], "target": "APP.OUT"},
        {"msg_ids": ["0102"], "target": "APP.OUT"},
        {"msg_ids": [msg_id] * 101, "target": "APP.OUT"},
        {"msg_ids": [msg_id], "target": "BAD NAME"},
        {"msg_ids": [msg_id]},
        {"msg_ids": [msg_id], "target": "APP.OUT", "purge": True},
    ):
        assert_problem(api.post(f"{QUEUES}/APP.IN/move", json=body), 422)
    assert bodies(api, "APP.IN") == [b"1"]
