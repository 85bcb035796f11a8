"""broker.network.inbound.receive: a neighbour's batch put exactly once, descriptors intact, and
whatever cannot be put dead-lettered with the reason, as an MQ receiving channel does."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from broker.network import inbound, links, wire
from queues import DEAD_LETTER_QUEUE, QueueManager, UnitOfWork, xqh
from queues import schema as queue_schema
from queues.dlh import DeadLetterHeader
from queues.dlh import decode as decode_dlh
from queues.errors import MQError
from queues.message import MQEI_UNLIMITED, MQFMT_DEAD_LETTER_HEADER, Message
from queues.reasons import Reason
from tests.broker.network.test_links import (  # noqa: F401 (fixtures)
    EPOCH,
    TOKEN,
    Sites,
    add,
    link_of,
    shared_sites_fixture,
    sites_fixture,
)

RECEIVER = "QMA"


@pytest.fixture
def qm(sites: Sites) -> QueueManager:
    """The receiving broker QMA, which knows QMB as a neighbour, with two application queues."""
    manager = sites.qm(RECEIVER)
    add(manager, "QMB")
    manager.define_queue("APP.ONE")
    manager.define_queue("APP.TWO")
    return manager


def original(n: int, **changes: object) -> Message:
    """A message with every descriptor field set to something other than its default."""
    fields: dict[str, object] = {
        "body": f"body {n}".encode(),
        "msg_id": f"msg-{n}".encode().ljust(24, b"-"),
        "correl_id": f"correl-{n}".encode().ljust(24, b"-"),
        "format": "MQSTR   ",
        "encoding": 273,
        "ccsid": 819,
        "msg_type": 1,
        "report": 2,
        "reply_to_q": "APP.REPLIES",
        "reply_to_qmgr": "QMB",
        "user_id": "alice",
        "persistence": 1,
        "priority": 7,
        "expiry": MQEI_UNLIMITED,
        "put_appl_type": 26,
        "put_appl_name": "publisher at QMB",
        "put_date": "20250102",
        "put_time": "10111213",
        "backout_count": 0,
    }
    fields.update(changes)
    return Message(**fields)  # type: ignore[arg-type]


def frame(queue: str, message: Message, q_mgr: str = RECEIVER, expiry: int = MQEI_UNLIMITED) -> wire.Frame:
    return wire.Frame(xqh.encode(queue, q_mgr, message), expiry)


def batch(*frames: wire.Frame, number: int = 1, epoch: str = EPOCH, sender: str = "QMB") -> bytes:
    return wire.encode(wire.Batch(sender, epoch, number, frames))


def drain(qm: QueueManager, queue: str) -> list[Message]:
    found = []
    with qm.unit_of_work() as uow:
        while batch_ := uow.get_batch(queue, 100):
            found.extend(batch_)
    return found


def dead_letters(qm: QueueManager) -> list[tuple[DeadLetterHeader, Message, bytes]]:
    """(MQDLH, the dead-lettered message, its original data) for everything on the DLQ."""
    found = []
    for message in drain(qm, DEAD_LETTER_QUEUE):
        assert message.format == MQFMT_DEAD_LETTER_HEADER
        header, data = decode_dlh(message.body, message.encoding)
        found.append((header, message, data))
    return found


def test_every_frame_reaches_its_queue_with_its_descriptor_intact(qm: QueueManager) -> None:
    sent = [original(1), original(2, priority=0, persistence=0), original(3, report=0, msg_type=8)]
    payload = batch(frame("APP.ONE", sent[0]), frame("APP.TWO", sent[1]), frame("APP.ONE", sent[2]))
    assert inbound.receive(qm, payload, TOKEN, "QMB") == inbound.Receipt(1, 3, 0, duplicate=False)
    assert drain(qm, "APP.ONE") == [sent[0], sent[2]]
    assert drain(qm, "APP.TWO") == [sent[1]]
    assert qm.depth(DEAD_LETTER_QUEUE) == 0
    assert link_of(qm, "QMB").received_batch == 1  # type: ignore[union-attr]


def test_the_expiry_left_when_the_message_left_is_applied(qm: QueueManager) -> None:
    # The MQXQH's descriptor says 900 tenths (the expiry when it was put at QMB); the frame
    # says 50 are left: the message must expire here 5 s after it arrives, not 90 s.
    payload = batch(
        frame("APP.ONE", original(1, expiry=900), expiry=50),
        frame("APP.ONE", original(2), expiry=MQEI_UNLIMITED),
    )
    inbound.receive(qm, payload, TOKEN, "QMB")
    stored = queue_schema.messages
    with qm.reading() as conn:
        rows = conn.execute(
            select(stored.c.expires_at - stored.c.put_at, stored.c.expiry)
            .where(stored.c.queue == "APP.ONE")
            .order_by(stored.c.id)
        ).all()
    assert [tuple(row) for row in rows] == [(5_000, 50), (None, MQEI_UNLIMITED)]


def test_a_resent_batch_is_a_duplicate_and_puts_nothing(qm: QueueManager) -> None:
    payload = batch(frame("APP.ONE", original(1)), frame("APP.TWO", original(2)))
    inbound.receive(qm, payload, TOKEN, "QMB")
    assert inbound.receive(qm, payload, TOKEN, "QMB") == inbound.Receipt(1, 0, 0, duplicate=True)
    assert (qm.depth("APP.ONE"), qm.depth("APP.TWO"), qm.depth(DEAD_LETTER_QUEUE)) == (1, 1, 0)


def test_the_next_batch_is_taken_after_a_duplicate(qm: QueueManager) -> None:
    first = batch(frame("APP.ONE", original(1)), number=1)
    inbound.receive(qm, first, TOKEN, "QMB")
    inbound.receive(qm, first, TOKEN, "QMB")
    second = batch(frame("APP.ONE", original(2)), number=2)
    assert inbound.receive(qm, second, TOKEN, "QMB") == inbound.Receipt(2, 1, 0, duplicate=False)
    assert [m.body for m in drain(qm, "APP.ONE")] == [b"body 1", b"body 2"]


def test_a_batch_that_fails_is_not_recorded_so_its_resend_is_taken(
    qm: QueueManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    payload = batch(frame("APP.ONE", original(1)), frame("APP.ONE", original(2)))
    real = UnitOfWork.put_many

    def broken(self: UnitOfWork, *args: object, **kwargs: object) -> object:
        raise MQError(Reason.MQRC_CONNECTION_BROKEN, "the database went away mid-batch")

    monkeypatch.setattr(UnitOfWork, "put_many", broken)
    with pytest.raises(MQError):
        inbound.receive(qm, payload, TOKEN, "QMB")
    monkeypatch.setattr(UnitOfWork, "put_many", real)
    assert link_of(qm, "QMB").received_batch == 0  # type: ignore[union-attr]
    assert inbound.receive(qm, payload, TOKEN, "QMB") == inbound.Receipt(1, 2, 0, duplicate=False)
    assert [m.body for m in drain(qm, "APP.ONE")] == [b"body 1", b"body 2"]


def test_a_message_for_an_unknown_queue_is_dead_lettered_with_2085(qm: QueueManager) -> None:
    lost = original(2)
    payload = batch(frame("APP.ONE", original(1)), frame("NO.SUCH.QUEUE", lost))
    assert inbound.receive(qm, payload, TOKEN, "QMB") == inbound.Receipt(1, 1, 1, duplicate=False)
    [(header, message, data)] = dead_letters(qm)
    assert (header.reason, header.dest_q_name, header.dest_q_mgr_name) == (2085, "NO.SUCH.QUEUE", RECEIVER)
    assert (header.format, header.encoding, header.ccsid) == ("MQSTR   ", 273, 819)
    assert data == lost.body
    assert (message.msg_id, message.correl_id, message.user_id) == (lost.msg_id, lost.correl_id, "alice")
    assert qm.depth("APP.ONE") == 1


def test_a_message_for_a_full_queue_is_dead_lettered_with_2053(qm: QueueManager) -> None:
    qm.define_queue("APP.SMALL", max_depth=1)
    payload = batch(frame("APP.SMALL", original(1)), frame("APP.SMALL", original(2)))
    assert inbound.receive(qm, payload, TOKEN, "QMB") == inbound.Receipt(1, 1, 1, duplicate=False)
    [(header, _, data)] = dead_letters(qm)
    assert (header.reason, header.dest_q_name, data) == (Reason.MQRC_Q_FULL, "APP.SMALL", b"body 2")
    assert [m.body for m in drain(qm, "APP.SMALL")] == [b"body 1"]


def test_a_message_for_another_queue_manager_is_dead_lettered_with_2087(qm: QueueManager) -> None:
    payload = batch(frame("APP.ONE", original(1), q_mgr="QMZ"))
    assert inbound.receive(qm, payload, TOKEN, "QMB") == inbound.Receipt(1, 0, 1, duplicate=False)
    [(header, message, data)] = dead_letters(qm)
    assert (header.reason, header.dest_q_name, header.dest_q_mgr_name) == (2087, "APP.ONE", "QMZ")
    assert (data, message.msg_id) == (b"body 1", original(1).msg_id)
    assert qm.depth("APP.ONE") == 0


def test_an_undecodable_frame_is_dead_lettered_with_2026_as_it_came(qm: QueueManager) -> None:
    garbage = b"XQH?" + bytes(500)
    payload = batch(wire.Frame(garbage, MQEI_UNLIMITED), frame("APP.ONE", original(1)))
    assert inbound.receive(qm, payload, TOKEN, "QMB") == inbound.Receipt(1, 1, 1, duplicate=False)
    [(header, _, data)] = dead_letters(qm)
    assert (header.reason, header.dest_q_name, header.dest_q_mgr_name) == (Reason.MQRC_MD_ERROR, "", "QMB")
    assert data == garbage
    assert qm.depth("APP.ONE") == 1


@pytest.mark.parametrize(
    "changes", [{"priority": 42}, {"persistence": 7}], ids=["priority 42", "persistence 7"]
)
def test_a_descriptor_mq_would_refuse_is_dead_lettered_without_failing_the_batch(
    qm: QueueManager, changes: dict[str, int]
) -> None:
    bad = xqh.encode("APP.ONE", RECEIVER, original(1, **changes))
    payload = batch(wire.Frame(bad, MQEI_UNLIMITED), frame("APP.ONE", original(2)))
    assert inbound.receive(qm, payload, TOKEN, "QMB") == inbound.Receipt(1, 1, 1, duplicate=False)
    [(header, _, data)] = dead_letters(qm)
    assert (header.reason, data) == (Reason.MQRC_MD_ERROR, bad)
    assert [m.body for m in drain(qm, "APP.ONE")] == [b"body 2"]


@pytest.mark.parametrize(
    ("sender", "claimed", "token"),
    [("QMB", "QMC", TOKEN), ("QMB", "QMB", "wrong-token-0123456789"), ("QMX", "QMX", TOKEN)],
    ids=["batch names another sender", "wrong token", "not a neighbour"],
)
def test_a_batch_from_anyone_but_the_neighbour_is_3085_and_leaves_nothing(
    qm: QueueManager, sender: str, claimed: str, token: str
) -> None:
    add(qm, "QMC", token="another-token-0123456789")
    payload = batch(frame("APP.ONE", original(1)), sender=sender)
    with pytest.raises(MQError) as refused:
        inbound.receive(qm, payload, token, claimed)
    assert refused.value.reason == Reason.MQRCCF_UNKNOWN_BROKER == 3085
    assert (qm.depth("APP.ONE"), qm.depth(DEAD_LETTER_QUEUE)) == (0, 0)
    assert [link_of(qm, name).received_batch for name in ("QMB", "QMC")] == [0, 0]  # type: ignore[union-attr]


def test_a_malformed_batch_is_2337(qm: QueueManager) -> None:
    with pytest.raises(MQError) as refused:
        inbound.receive(qm, b'{"sender": "QMB"}', TOKEN, "QMB")
    assert refused.value.reason == Reason.MQRC_RFH_PARM_ERROR


def test_links_record_batches_per_sender(qm: QueueManager) -> None:
    add(qm, "QMC", token="another-token-0123456789")
    inbound.receive(qm, batch(frame("APP.ONE", original(1)), number=5), TOKEN, "QMB")
    receipt = inbound.receive(
        qm, batch(frame("APP.ONE", original(2)), number=1, sender="QMC"), "another-token-0123456789", "QMC"
    )
    assert receipt == inbound.Receipt(1, 1, 0, duplicate=False)
    with qm.reading() as conn:
        assert {link.name: link.received_batch for link in links.list_links(conn)} == {"QMB": 5, "QMC": 1}
