"""The final merge: the staged backlog becomes visible in one transaction.

Everything a job computed is made visible at once, or nothing is: a job killed
before the commit leaves only staging rows nobody reads (the next run clears
them), one killed after it leaves the complete result. In that one transaction,
on the driver:

1. the lease is locked and checked (no router can have touched the stream), and
   the staging is checked complete: every partition's marker, and as many rows
   read as the backlog still holds;
2. the state is loaded with the retained store and housekeeping is done at the
   job's clock, as the service does it (the snapshot left out what it removes);
3. retained changes are applied in input order, and each DeletePub is routed
   with :func:`broker.engine.route` at its place in that order, against the
   retained publications as they are there: exactly the service's semantics;
   its replies and forwards are staged into the same ordered insert;
4. queues that would exceed MAXDEPTH keep their first deliveries, in order; the
   rest go to the dead-letter queue with MQRC_Q_FULL, as the service's put does;
5. the staged rows are inserted into ``mq_messages`` in the service's order,
   depth counters change by a per-queue aggregate, state changes go through
   :meth:`broker.store.StateStore.write` (change log and version, so running
   services see them), the backlog is deleted, the run ended, the lease
   released.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Connection, Engine

from broker import engine, store
from broker.effects import Effect, SetRetained
from broker.retained import RetainedPublication
from broker.spark import lease, staging
from broker.spark.partition import Stager, route_one
from broker.spark.snapshot import Snapshot, queue_directory
from broker.spark.staging import ORDER_SPAN, PartSummary
from broker.state import BrokerState
from queues import sql
from queues.errors import MQError
from queues.ids import now_ms
from queues.manager import _row_to_message
from queues.message import Message
from queues.names import DEAD_LETTER_QUEUE
from queues.reasons import Reason


class MergeError(MQError):
    """The staging does not account for the backlog: nothing is merged."""

    def __init__(self, detail: str) -> None:
        super().__init__(Reason.MQRCCF_COMMAND_FAILED, detail)


@dataclass(frozen=True, slots=True)
class Run:
    """What the merge needs to know of the job."""

    snapshot: Snapshot
    owner: str  # the lease holder
    watermark: int
    partitions: int
    batch_size: int  # the service batch whose dead-letter order is reproduced


@dataclass(frozen=True, slots=True)
class Merged:
    consumed: int  # backlog rows removed, expired ones included
    written: dict[str, int]  # messages inserted per queue
    routed: PartSummary  # what the merge routed itself (DeletePub, housekeeping)
    overflowed: int  # deliveries dead-lettered because their queue was full


def merge(db: Engine, run: Run, state_store: store.StateStore) -> Merged:
    snapshot = run.snapshot
    stream, job = snapshot.stream, snapshot.job
    with db.begin() as conn:
        lease.verify(conn, lease.stream_resource(stream), run.owner, now_ms())
        _check_complete(conn, run)
        state = state_store.load(conn, queue_directory(snapshot.definitions))
        stager = Stager(snapshot)
        changes = _route_in_order(conn, snapshot, state, stager)
        staging.write_puts(conn, stager.rows)
        written = staging.staged_depths(conn, job)
        overflowed = _overflow(conn, snapshot, written)
        staging.insert_messages(conn, job, DEAD_LETTER_QUEUE)
        if written.get(DEAD_LETTER_QUEUE):
            staging.insert_dead_letters(
                conn,
                job,
                DEAD_LETTER_QUEUE,
                stream=stream,
                watermark=run.watermark,
                now=snapshot.now,
                batch_size=run.batch_size,
            )
        consumed = staging.delete_backlog(conn, stream, run.watermark)
        index_types = {name: d.index_type for name, d in snapshot.definitions.items()}
        refused = sql.apply_depth(conn, {**written, stream: written.get(stream, 0) - consumed}, index_types)
        if refused:
            raise MQError(Reason.MQRC_Q_FULL, f"no room left on {', '.join(refused)}")
        state_store.write(conn, changes)
        staging.end_run(conn, job)
        lease.release(conn, lease.stream_resource(stream), run.owner)
        sql.notify_arrivals(conn, written)
    return Merged(consumed, written, stager.summary, overflowed)


def _check_complete(conn: Connection, run: Run) -> None:
    snapshot = run.snapshot
    done = staging.staged_parts(conn, snapshot.job)
    if len(done) != run.partitions:
        raise MergeError(f"{len(done)} of {run.partitions} partitions are staged")
    read = sum(part.rows_read for part in done.values())
    present = staging.count_backlog(conn, snapshot.stream, run.watermark)
    if read != present:
        raise MergeError(f"the partitions read {read} rows but the backlog holds {present}")


def _route_in_order(conn: Connection, snapshot: Snapshot, state: BrokerState, stager: Stager) -> list[Effect]:
    """Housekeeping, then the retained changes and DeletePubs in input order; returns the
    state changes to write, in that order (the store keeps the last per key)."""
    now, job = snapshot.now, snapshot.job
    housekeeping = engine.housekeeping(state, now)
    state.apply_all(housekeeping)
    changes = [effect for _, effect in stager.stage(0, housekeeping)]
    source = engine.source_of(state, snapshot.stream)
    after = 0
    for seq in [*staging.deferred_inputs(conn, job), None]:
        for record in staging.last_retained(conn, job, after, seq):
            message = _input(conn, record.seq, now)
            effect = SetRetained(_publication(message, record.sub_point, record.topic, now))
            state.apply(effect)
            changes.append(effect)
        if seq is None:
            break
        outcome = route_one(_input(conn, seq, now), source, state, now, seq % ORDER_SPAN)
        state.apply_all(outcome.effects)
        changes.extend(effect for _, effect in stager.stage(seq, outcome.effects))
        after = seq
    return changes


def _input(conn: Connection, seq: int, now: int) -> Message:
    """The backlog message staged as input ``seq``, as a get returns it."""
    (row,) = sql.select_messages_by_id(conn, [seq % ORDER_SPAN])
    return _row_to_message(row, now)


def _publication(message: Message, sub_point: str, topic: str, now: int) -> RetainedPublication:
    """The retained publication the engine made of ``message``, rebuilt as the store
    rebuilds what it reads back (headers decoded, command parsed)."""
    row: Any = SimpleNamespace(
        **message._asdict(),
        sub_point=sub_point,
        topic=topic,
        retained_at=now,
    )
    return store.retained_from_row(row)


def _overflow(conn: Connection, snapshot: Snapshot, staged: dict[str, int]) -> int:
    """Dead-letter the staged puts that do not fit in their queue (MAXDEPTH), keeping
    each queue's first ones in input order; ``staged`` (puts per queue) follows the
    change. Returns how many moved."""
    overflowing: list[Any] = []
    for name, depth, max_depth in staging.lock_queues(conn, staged):
        room = max(0, max_depth - depth)
        if name != DEAD_LETTER_QUEUE and staged[name] > room:
            overflowing.extend(staging.excess_puts(conn, snapshot.job, name, room))
            staged[name] = room
    if not overflowing:
        return 0
    staged[DEAD_LETTER_QUEUE] = staged.get(DEAD_LETTER_QUEUE, 0) + len(overflowing)
    stager = Stager(snapshot)
    for row in overflowing:
        stager.overflowed(row, Reason.MQRC_Q_FULL)
    staging.replace_puts(conn, snapshot.job, stager.rows)
    return len(overflowing)
