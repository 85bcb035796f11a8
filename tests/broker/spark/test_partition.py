"""One partition: backlog rows -> ``engine.route`` -> the rows the service would have written.

No Spark and no database here: rows are built as a put stores them, routed against a snapshot
made in memory, and every staged row is compared with what the engine and the queue manager's
own row builders produce for the same message.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from broker.core import engine
from broker.core.effects import DELIVERY, FORWARD, Put, SetRetained
from broker.core.neighbours import transmission
from broker.core.state import BrokerConfig
from broker.core.subscription import Identity as SubscriberIdentity
from broker.core.subscription import Subscription, SubscriptionKey
from broker.core.system import DEFAULT_STREAM, INTER_BROKER_QUEUE
from broker.spark import partition, task
from broker.spark.partition import Routed, SnapshotError, Stager, TaskSpec, route_rows
from broker.spark.plan import Part, Plan
from broker.spark.runs import input_order
from broker.spark.snapshot import PutContext, Snapshot
from queues import DEAD_LETTER_QUEUE, dlh
from queues.definition import QueueDefinition
from queues.ids import mq_date_time
from queues.manager import dead_letter_message, message_row, row_to_message
from queues.message import MQMT_DATAGRAM, MQMT_REPLY, MQPER_PERSISTENCE_AS_Q_DEF, Message, derive
from queues.reasons import Reason
from queues.schema import MESSAGE_COLUMNS
from tests.broker.core.builders import NOW, message, msg_id, psc_text

JOB = "job-1"
BATCH = 50
WHOLE = Part(0, 1, None, None)  # a partition holding the whole backlog
ROW_COLUMNS = ("seq", "idx", "phase", "asked_priority", "asked_persistence", *MESSAGE_COLUMNS)
CONTEXT = PutContext("QM1", "broker", "broker")
STAMP = mq_date_time(NOW)
DEFINITIONS = {
    name: QueueDefinition(name, def_persistence=1 if name == "SUB.PQ" else 0)
    for name in ("SUB", "SUB.PQ", "REPLIES", "QM2", DEAD_LETTER_QUEUE, DEFAULT_STREAM)
}


def subscription(
    topic: str,
    queue: str = "SUB",
    *,
    q_mgr: str = "QM1",
    origin: str | None = None,
    expires_at: int | None = None,
) -> Subscription:
    key = SubscriptionKey(SubscriberIdentity(q_mgr, queue), "", topic)
    return Subscription(key, "alice", 0, NOW, 1, expires_at=expires_at, origin=origin)


def snapshot(*subscriptions: Subscription, neighbours: tuple[str, ...] = ()) -> Snapshot:
    return Snapshot(
        job=JOB,
        stream=DEFAULT_STREAM,
        now=NOW,
        context=CONTEXT,
        config=BrokerConfig("QM1"),
        rules=(),
        groups={},
        default_allow=True,
        admin_group="mqm",
        subscriptions=subscriptions,
        definitions=DEFINITIONS,
        neighbours=neighbours,
    )


def row(row_id: int, m: Message, *, now: int = NOW - 1000) -> tuple[object, ...]:
    """The mq_messages row a put of ``m`` on the stream stores (table column order)."""
    stored = message_row(DEFINITIONS[DEFAULT_STREAM], DEFAULT_STREAM, m, now, STAMP, "QM1", "app", "app")
    return (row_id, *stored)


def staged(seq: int, idx: int, phase: int, queue: str, m: Message) -> tuple[object, ...]:
    stored = message_row(DEFINITIONS[queue], queue, m, NOW, STAMP, "QM1", "broker", "broker")
    return (seq, idx, phase, m.priority, m.persistence, *stored)


def values(routed_row: tuple[object, ...]) -> dict[str, object]:
    return dict(zip(ROW_COLUMNS, routed_row, strict=True))


def route(rows: list[tuple[object, ...]], snap: Snapshot, part: Part = WHOLE) -> Routed:
    return route_rows(rows, snap, snap.state(), part, BATCH)


def test_deliveries_and_replies_are_the_rows_the_service_would_put():
    snap = snapshot(subscription("A/#"))
    command = message(psc_text("Publish", "A/B"), msg_id=msg_id(1), priority=3, reply_to_q="REPLIES")
    (stored,) = [row(7, command)]

    result = route([stored], snap)

    gotten = row_to_message(stored, NOW)
    outcome = engine.route(
        gotten, engine.source_of(snap.state(), DEFAULT_STREAM), snap.state(), NOW, sequence=7
    )
    delivery, answer = outcome.effects
    assert isinstance(delivery, Put) and isinstance(answer, Put)
    seq = input_order(3, 7)
    assert result.rows == [
        staged(seq, 0, partition.PUT, "SUB", delivery.message),
        staged(seq, 1, partition.PUT, "REPLIES", answer.message),
    ]
    assert len(result.rows[0]) == len(ROW_COLUMNS)
    assert (result.summary.rows_read, result.summary.messages, result.summary.deliveries) == (1, 1, 1)
    assert (result.summary.replies, result.summary.dead_letters) == (1, 0)
    assert result.ordered == [] and not result.deletes


def test_retained_publications_are_kept_in_order_and_delete_pubs_left_for_the_turn():
    snap = snapshot()
    retain = message(psc_text("Publish", "A/B", "A/C", opts=("RetainPub",)), msg_id=msg_id(1), reply_to_q="")
    delete = message(psc_text("DeletePub", "A/#"), msg_id=msg_id(2), reply_to_q="REPLIES", priority=2)

    result = route([row(2, delete), row(1, retain)], snap)

    seq = input_order(4, 1)
    retained = [(s, i, e.publication.topic) for s, i, e in result.ordered if isinstance(e, SetRetained)]
    assert retained == [(seq, 0, "A/B"), (seq, 1, "A/C")]
    (deferred,) = [(s, m.msg_id) for s, i, m in result.ordered if i is None]
    assert deferred == (input_order(2, 2), msg_id(2)) and result.deletes
    assert result.rows == []  # DeletePub's reply comes from its turn, where it is routed
    assert result.summary.messages == 2


def test_inputs_are_routed_in_get_order_and_know_their_service_batch():
    """Whatever order the read returns: priority first, then FIFO; and the live rank, from
    the partition's first, gives each input its batch of the service's batch size."""
    snap = snapshot(subscription("A/#"))
    publish = message(psc_text("Publish", "A/B"), reply_to_q="")
    rows = [row(n, derive(publish, msg_id=msg_id(n), priority=n % 3)) for n in range(1, 8)]

    result = route(list(reversed(rows)), snap, Part(2, 2 * BATCH - 2, (2, 2), None))

    order = [r[0] for r in result.rows]
    assert order == sorted(order) and order[0] == input_order(2, 2)
    ranks = range(2 * BATCH - 2, 2 * BATCH - 2 + 7)
    assert list(result.batches.values()) == [(rank + BATCH - 1) // BATCH for rank in ranks]
    assert set(result.batches.values()) == {2, 3}


def test_an_expired_row_is_read_but_not_routed():
    snap = snapshot(subscription("A/#"))
    expiring = message(psc_text("Publish", "A/B"), msg_id=msg_id(1), expiry=5, reply_to_q="")

    result = route([row(1, expiring, now=NOW - 501), row(2, expiring, now=NOW - 499)], snap)

    assert (result.summary.rows_read, result.summary.messages, len(result.rows)) == (2, 1, 1)
    assert result.rows[0][0] == input_order(4, 2)
    assert list(result.batches) == [input_order(4, 2)]  # only live inputs have a rank


def test_poison_goes_to_the_dead_letter_queue_before_any_failed_put():
    snap = snapshot()
    poison = message(psc_text("Publish", "A/B"), msg_id=msg_id(1), msg_type=MQMT_REPLY)
    lost_reply = message(psc_text("Publish", "A/B"), msg_id=msg_id(2), reply_to_q="MISSING")

    result = route([row(1, poison), row(2, lost_reply)], snap)

    (dead_poison, dead_reply) = result.rows
    assert dead_poison[2:3] == (partition.DIRECT,) and dead_reply[2:3] == (partition.PUT,)
    reasons = []
    for routed_row in result.rows:
        fields = values(routed_row)
        assert fields["queue"] == DEAD_LETTER_QUEUE
        header, _ = dlh.decode(fields["body"], fields["encoding"])  # type: ignore[arg-type]
        reasons.append((header.reason, header.dest_q_name))
    assert reasons == [
        (Reason.MQRC_MSG_TYPE_ERROR, DEFAULT_STREAM),
        (Reason.MQRC_UNKNOWN_OBJECT_NAME, "MISSING"),
    ]
    assert result.summary.dead_letters == 2


def test_puts_for_neighbours_go_to_their_transmission_queue_and_others_are_dead_lettered():
    proxy = subscription("A/#", INTER_BROKER_QUEUE, q_mgr="QM2", origin="QM2")
    snap = snapshot(proxy, neighbours=("QM2",))
    command = message(psc_text("Publish", "A/B"), msg_id=msg_id(1), reply_to_q="R", reply_to_qmgr="QM9")

    result = route([row(1, command)], snap)

    gotten = row_to_message(row(1, command), NOW)
    forward, answer = engine.route(
        gotten, engine.source_of(snap.state(), DEFAULT_STREAM), snap.state(), NOW
    ).effects
    assert isinstance(forward, Put) and forward.kind == FORWARD and forward.q_mgr == "QM2"
    assert isinstance(answer, Put) and answer.q_mgr == "QM9"
    xmitq, wrapped = transmission(forward)
    dead = dead_letter_message("R", answer.message, Reason.MQRC_UNKNOWN_REMOTE_Q_MGR, "QM9", "broker", STAMP)
    seq = input_order(4, 1)
    assert result.rows == [
        staged(seq, 0, partition.PUT, xmitq, wrapped),
        staged(seq, 1, partition.DIRECT, DEAD_LETTER_QUEUE, dead),
    ]
    assert (result.summary.forwards, result.summary.replies) == (1, 1)


def test_an_overflowing_put_is_dead_lettered_from_what_the_engine_asked():
    """The staged row holds the queue's default persistence; the dead letter keeps the
    PersAsQueue the engine asked for, as the service's failed put does."""
    stager = Stager(snapshot())
    delivery = Message(body=b"x", msg_id=msg_id(5), persistence=MQPER_PERSISTENCE_AS_Q_DEF, priority=6)
    stager.stage(11, [Put("SUB.PQ", delivery, kind=DELIVERY)])
    (routed_row,) = stager.rows
    assert values(routed_row)["persistence"] == 1

    dead_row = stager.overflowed(routed_row, Reason.MQRC_Q_FULL)

    dead = dead_letter_message("SUB.PQ", delivery, Reason.MQRC_Q_FULL, "QM1", "broker", STAMP)
    assert dead_row == staged(11, 0, partition.PUT, DEAD_LETTER_QUEUE, dead)
    assert stager.rows == [routed_row]
    filled = {"user_id": "broker", "put_appl_name": "broker", "put_date": STAMP[0], "put_time": STAMP[1]}
    assert partition.row_message(routed_row) == derive(delivery, **filled)


def test_an_engine_failure_is_dead_lettered_and_answered_as_the_service_does(monkeypatch):
    def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(engine, "route", broken)
    command = message(psc_text("Publish", "A/B"), msg_id=msg_id(1), reply_to_q="REPLIES")

    result = route([row(1, command)], snapshot())

    queues = [values(r)["queue"] for r in result.rows]
    assert queues == [DEAD_LETTER_QUEUE, "REPLIES"]
    header, _ = dlh.decode(values(result.rows[0])["body"], command.encoding)  # type: ignore[arg-type]
    assert header.reason == Reason.MQRCCF_COMMAND_FAILED


def test_a_publication_that_would_change_subscriptions_fails_the_task():
    """The snapshot leaves out what housekeeping removes; one that slipped through would be
    removed by whichever partition met it first, so the task refuses to go on."""
    snap = snapshot(subscription("A/#", expires_at=NOW - 1))
    command = message(psc_text("Publish", "A/B"), msg_id=msg_id(1), msg_type=MQMT_DATAGRAM, reply_to_q="")

    with pytest.raises(SnapshotError):
        route([row(1, command)], snap)


def test_the_executor_state_is_built_once_per_job(monkeypatch: pytest.MonkeyPatch):
    tuned: list[int] = []
    monkeypatch.setattr(task, "tune_collector", lambda: tuned.append(1))
    plan = Plan(DEFAULT_STREAM, 1, 1, 1, BATCH, (WHOLE,))
    first = TaskSpec(snapshot(subscription("A/#")), plan, "owner", BATCH, 60.0)
    second = TaskSpec(snapshot(), plan, "owner", BATCH, 60.0)
    reads: list[str] = []

    def broadcast(spec: TaskSpec) -> Callable[[], bytes]:
        def value() -> bytes:
            reads.append(spec.snapshot.job + str(len(spec.snapshot.subscriptions)))
            return spec.encode()

        return value

    prepared = task.prepared("job-a", broadcast(first))
    assert task.prepared("job-a", broadcast(first)) is prepared
    assert prepared[0] == first and len(prepared[1]) == 1
    assert task.prepared("job-b", broadcast(second))[0] == second
    assert task.prepared("job-a", broadcast(first)) is not prepared  # only the latest job is kept
    assert reads == [f"{JOB}1", f"{JOB}0", f"{JOB}1"]
    assert len(tuned) == len(reads)  # the worker's collector is paced for routing (broker.service.collector)
