"""Moving and copying messages between queues: the descriptor kept, one unit of work for them all,
and a target that refuses leaves every message where it was (both dialects)."""

from __future__ import annotations

import pytest

from queues import DEAD_LETTER_QUEUE, Message, QueueManager, transfers
from queues.errors import MQError
from queues.message import MQFMT_STRING
from queues.reasons import Reason

ORIGINAL = Message(
    body=b"order 17",
    correl_id=b"\x01" * 24,
    format=MQFMT_STRING,
    reply_to_q="REPLIES",
    user_id="alice",
    put_appl_name="orders.exe",
    persistence=1,
    priority=6,
    expiry=6000,
)


def put(qm: QueueManager, queue: str, *bodies: bytes) -> list[bytes]:
    return [qm.put(queue, ORIGINAL._replace(body=body)) for body in bodies]


def bodies(qm: QueueManager, queue: str) -> list[bytes]:
    return [b.message.body for b in qm.browse(queue, limit=100)]


@pytest.fixture
def queues(qm: QueueManager) -> QueueManager:
    qm.define_queue("APP.IN", backout_threshold=1, backout_requeue_q="APP.BO")
    qm.define_queue("APP.BO")
    qm.define_queue("APP.OUT")
    return qm


def test_a_copy_keeps_the_descriptor_and_leaves_the_source_alone(queues: QueueManager) -> None:
    qm = queues
    (msg_id,) = put(qm, "APP.IN", b"order 17")
    qm.alter_queue("APP.IN", backout_threshold=0)
    with qm.unit_of_work() as uow:  # a backed-out get: BackoutCount 1 on the source
        uow.get("APP.IN")
        uow.backout()
    transfers.copy(qm, "APP.IN", [msg_id], "APP.OUT")
    source = qm.browse("APP.IN")[0].message
    copied = qm.browse("APP.OUT")[0].message
    assert copied._replace(expiry=0, backout_count=0) == source._replace(expiry=0, backout_count=0)
    assert (copied.msg_id, copied.user_id, copied.put_appl_name, copied.priority) == (
        msg_id,
        "alice",
        "orders.exe",
        6,
    )
    assert (source.backout_count, copied.backout_count) == (1, 0)
    assert 5900 <= copied.expiry <= source.expiry  # what was left of it
    assert bodies(qm, "APP.IN") == [b"order 17"]


def test_a_move_takes_every_message_named_and_puts_it_on_the_target(queues: QueueManager) -> None:
    qm = queues
    first, second, third = put(qm, "APP.IN", b"1", b"2", b"3")
    transfers.move(qm, "APP.IN", [third, first, third], "APP.OUT")
    assert bodies(qm, "APP.IN") == [b"2"]
    assert [b.message.msg_id for b in qm.browse("APP.OUT", limit=10)] == [third, first]
    assert (qm.inquire_queue("APP.IN").get_count, qm.inquire_queue("APP.OUT").put_count) == (2, 2)
    transfers.move(qm, "APP.IN", [second], "APP.IN")  # onto its own queue: there once, at the back
    assert bodies(qm, "APP.IN") == [b"2"]


@pytest.mark.parametrize(
    ("target", "attributes", "reason"),
    [
        ("NOT.DEFINED", {}, Reason.MQRC_UNKNOWN_OBJECT_NAME),
        ("APP.OUT", {"put_enabled": False}, Reason.MQRC_PUT_INHIBITED),
        ("APP.OUT", {"max_depth": 1}, Reason.MQRC_Q_FULL),
        ("APP.OUT", {"max_msg_length": 1}, Reason.MQRC_MSG_TOO_BIG_FOR_Q),
    ],
)
def test_a_target_that_refuses_leaves_every_message_where_it_was(
    queues: QueueManager, target: str, attributes: dict[str, object], reason: int
) -> None:
    qm = queues
    qm.alter_queue("APP.OUT", **attributes)
    ids = put(qm, "APP.IN", b"one", b"two")
    for transfer in (transfers.move, transfers.copy):
        with pytest.raises(MQError) as refused:
            transfer(qm, "APP.IN", ids, target)
        assert refused.value.reason == reason
    # BackoutCount unchanged: past the threshold of 1 a backed-out get would have moved them to APP.BO
    assert [(b.message.body, b.message.backout_count) for b in qm.browse("APP.IN", limit=10)] == [
        (b"one", 0),
        (b"two", 0),
    ]
    assert bodies(qm, "APP.OUT") == bodies(qm, "APP.BO") == bodies(qm, DEAD_LETTER_QUEUE) == []


def test_a_message_not_there_or_a_source_not_readable_moves_nothing(queues: QueueManager) -> None:
    qm = queues
    ids = put(qm, "APP.IN", b"1")
    gone = b"\x09" * 24
    with pytest.raises(MQError) as missing:
        transfers.move(qm, "APP.IN", [*ids, gone], "APP.OUT")
    assert missing.value.reason == Reason.MQRC_NO_MSG_AVAILABLE
    assert gone.hex() in str(missing.value)
    qm.alter_queue("APP.IN", get_enabled=False)
    with pytest.raises(MQError) as inhibited:
        transfers.move(qm, "APP.IN", ids, "APP.OUT")
    assert inhibited.value.reason == Reason.MQRC_GET_INHIBITED
    transfers.copy(qm, "APP.IN", ids, "APP.OUT")  # a copy only browses the source
    assert (bodies(qm, "APP.IN"), bodies(qm, "APP.OUT")) == ([b"1"], [b"1"])
    with pytest.raises(MQError) as unknown:
        transfers.copy(qm, "NOT.DEFINED", ids, "APP.OUT")
    assert unknown.value.reason == Reason.MQRC_UNKNOWN_OBJECT_NAME
