"""One partition of the backlog: rows in, ``engine.route``, staged rows out.

Each input row becomes exactly the :class:`~queues.Message` a get returns at
the job's clock, is routed by :func:`broker.engine.route` against the
executor's state (rebuilt once per Python process from the broadcast snapshot),
and its outcome becomes the rows the service's ``_apply`` would have written:
a put is the row :func:`queues.manager.message_row` builds for its queue, a put
for a neighbour is the service's :func:`~broker.service.transmission` of it, a
put that cannot be made (unknown queue, too big, put inhibited) and every
DeadLetter effect is the dead-letter queue's row for the message behind an
MQDLH. The only depth check left is the queue's MAXDEPTH, which depends on
every partition: the merge does it.

Two kinds of input are not finished here. SetRetained is staged as a record
(the input, subscription point, topic): the merge applies retained changes in
input order. DeletePub is staged for the merge to route, because what it
deletes depends on the retained publications at its place in the sequence.
No other state change can come from a stream publication against the snapshot
(see ``broker.spark.snapshot``); one that does is a defect and fails the task.

Rows are keyed by (job, the input's place in the service's get order, the
effect's index), and a partition's rows are written in one transaction behind
its marker (``broker.spark.staging``), so a retried or speculative task writes
nothing twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

from broker import engine
from broker.collector import tune_collector
from broker.effects import DELIVERY, REPLY, DeadLetter, Effect, Outcome, Put, SetRetained
from broker.routing import Source
from broker.service import failed_outcome, transmission
from broker.spark import staging
from broker.spark.snapshot import Snapshot
from broker.spark.staging import PartSummary, input_order
from broker.state import BrokerState
from queues import make_engine, sql
from queues.errors import MQError
from queues.ids import mq_date_time
from queues.manager import _row_to_message, dead_letter_message, message_row
from queues.message import Message
from queues.names import DEAD_LETTER_QUEUE
from queues.reasons import Reason

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark import Broadcast

log = logging.getLogger(__name__)

_ID, _PRIORITY = sql.ID, sql.PRIORITY
_EXPIRES_AT = sql.COLUMNS.index("expires_at")
DIRECT, PUT = 0, 1  # phases: see broker.spark.schema.puts
SUMMARY_SCHEMA = "part LONG, " + ", ".join(f"{name} LONG" for name in staging.SUMMARY_FIELDS)


class StagingError(MQError):
    """A stream publication changed state the snapshot promised it would not."""

    def __init__(self, detail: str) -> None:
        super().__init__(Reason.MQRCCF_COMMAND_FAILED, detail)


class Stager:
    """An outcome's message effects as the staged rows the service would have written."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.job = snapshot.job
        self.now = snapshot.now
        self.stamp = mq_date_time(snapshot.now)
        self.context = snapshot.context
        self.definitions = snapshot.definitions
        self.neighbours = frozenset(snapshot.neighbours)
        self.rows: list[tuple[Any, ...]] = []
        self.summary = PartSummary()

    def stage(self, seq: int, effects: Sequence[Effect]) -> list[tuple[int, Effect]]:
        """Stage the puts and dead letters among ``effects`` (an outcome's, in order) as
        input ``seq``'s; return the state changes among them with their index."""
        changes: list[tuple[int, Effect]] = []
        summary = self.summary
        for idx, effect in enumerate(effects):
            if isinstance(effect, Put):
                self._put(seq, idx, effect)
                if effect.kind == DELIVERY:
                    summary.deliveries += 1
                elif effect.kind == REPLY:
                    summary.replies += 1
                else:
                    summary.forwards += 1
            elif isinstance(effect, DeadLetter):
                self._dead(seq, idx, DIRECT, effect.queue, effect.message, effect.reason)
            else:
                changes.append((idx, effect))
        return changes

    def overflowed(self, row: Any, reason: int) -> None:
        """Dead-letter a staged put its queue has no room for, as a failed put is."""
        self._dead(row.seq, row.idx, PUT, row.queue, staged_message(row), reason)

    def _put(self, seq: int, idx: int, put: Put) -> None:
        queue, message = put.queue, put.message
        if put.q_mgr:
            if put.q_mgr not in self.neighbours:
                self._dead(seq, idx, DIRECT, queue, message, Reason.MQRC_UNKNOWN_REMOTE_Q_MGR, put.q_mgr)
                return
            queue, message = transmission(put)
        try:
            self.rows.append(self._row(seq, idx, PUT, queue, message))
        except MQError as exc:
            if exc.reason == Reason.MQRC_MD_ERROR:
                raise
            self._dead(seq, idx, PUT, queue, message, exc.reason)

    def _dead(
        self, seq: int, idx: int, phase: int, queue: str, message: Message, reason: int, dest_qmgr: str = ""
    ) -> None:
        context = self.context
        dead = dead_letter_message(
            queue, message, reason, dest_qmgr or context.qmgr, context.appl_name, self.stamp
        )
        self.rows.append(self._row(seq, idx, phase, DEAD_LETTER_QUEUE, dead))
        self.summary.dead_letters += 1

    def _row(self, seq: int, idx: int, phase: int, queue: str, message: Message) -> tuple[Any, ...]:
        context = self.context
        row = message_row(
            self.definitions.get(queue),
            queue,
            message,
            self.now,
            self.stamp,
            context.qmgr,
            context.user_id,
            context.appl_name,
        )
        return (self.job, seq, idx, phase, message.priority, message.persistence, *row)


def staged_message(row: Any) -> Message:
    """The message a staged put row was built from (the inverse of ``Stager._row``)."""
    return Message(
        body=row.body,
        msg_id=row.msg_id,
        correl_id=row.correl_id,
        format=row.format,
        encoding=row.encoding,
        ccsid=row.ccsid,
        msg_type=row.msg_type,
        report=row.report,
        reply_to_q=row.reply_to_q,
        reply_to_qmgr=row.reply_to_qmgr,
        user_id=row.user_id,
        persistence=row.asked_persistence,
        priority=row.asked_priority,
        expiry=row.expiry,
        put_appl_type=row.put_appl_type,
        put_appl_name=row.put_appl_name,
        put_date=row.put_date,
        put_time=row.put_time,
        backout_count=row.backout_count,
    )


def route_one(message: Message, source: Source, state: BrokerState, now: int, sequence: int) -> Outcome:
    """``engine.route``, and what the service does when it raises (a defect): the
    message is dead-lettered with 3008 and answered, never allowed to stop the job."""
    try:
        return engine.route(message, source, state, now, sequence=sequence)
    except Exception as exc:
        log.exception("routing failed", extra={"queue": source.queue, "msg_id": message.msg_id.hex()})
        return failed_outcome(message, source.queue, state.qmgr, now, f"internal error: {exc!r}")


@dataclass(slots=True)
class Staged:
    """One partition's output, ready to be written."""

    job: str
    puts: list[tuple[Any, ...]]
    summary: PartSummary
    retained: list[tuple[str, int, int, str, str]] = field(default_factory=list)
    deferred: list[tuple[str, int]] = field(default_factory=list)


def route_rows(rows: Iterable[Sequence[Any]], snapshot: Snapshot, state: BrokerState) -> Staged:
    """Route backlog rows (``mq_messages`` columns in table order) of one partition."""
    started = time.perf_counter()
    stager = Stager(snapshot)
    staged = Staged(snapshot.job, stager.rows, stager.summary)
    summary = staged.summary
    source = engine.source_of(state, snapshot.stream)
    now, job = snapshot.now, snapshot.job
    for row in rows:
        summary.rows_read += 1
        expires_at = row[_EXPIRES_AT]
        if expires_at is not None and expires_at <= now:
            continue  # a get never returns it; the merge removes it with the backlog
        summary.messages += 1
        seq = input_order(row[_PRIORITY], row[_ID])
        outcome = route_one(_row_to_message(row, now), source, state, now, row[_ID])
        if outcome.command == "DeletePub":
            staged.deferred.append((job, seq))
            continue
        for idx, change in stager.stage(seq, outcome.effects):
            if not isinstance(change, SetRetained):
                raise StagingError(f"a publication on {snapshot.stream} changed state: {change!r}")
            publication = change.publication
            staged.retained.append((job, seq, idx, publication.sub_point, publication.topic))
    summary.staged = len(staged.puts)
    summary.route_us = int((time.perf_counter() - started) * 1e6)
    return staged


def store(db: Engine, part: int, staged: Staged) -> PartSummary:
    """Write one partition in one transaction, unless another attempt already did:
    then that attempt's summary is the partition's."""
    started = time.perf_counter()
    job, summary = staged.job, staged.summary
    with db.begin() as conn:
        if not staging.claim_part(conn, job, part):
            existing = staging.staged_part(conn, job, part)
            assert existing is not None  # the claim failed on its row, now committed
            return existing
        staging.write_puts(conn, staged.puts)
        staging.write_retained(conn, staged.retained)
        staging.write_deferred(conn, staged.deferred)
        summary.stage_us = int((time.perf_counter() - started) * 1e6)
        staging.finish_part(conn, job, part, summary)
    return summary


# -- the executor side -------------------------------------------------------------------------

# Per Python worker process (Spark reuses them across tasks): the state of the job being
# run, rebuilt once from its broadcast, and one engine per database.
_PREPARED: dict[str, tuple[Snapshot, BrokerState]] = {}
_ENGINES: dict[str, Engine] = {}


def prepared(job: str, payload: Callable[[], bytes]) -> tuple[Snapshot, BrokerState]:
    """The job's snapshot and state; ``payload`` (the broadcast) is read only the first time."""
    found = _PREPARED.get(job)
    if found is None:
        _PREPARED.clear()  # a worker outliving its job must not keep the old state
        snapshot = Snapshot.decode(payload())
        found = _PREPARED[job] = (snapshot, snapshot.state())
        tune_collector()  # this worker routes from now on, as a service's router does
    return found


def _engine(url: str) -> Engine:
    db = _ENGINES.get(url)
    if db is None:
        db = _ENGINES[url] = make_engine(url)
    return db


def _rows(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[Any, ...]]:
    for batch in batches:
        yield from zip(*(column.to_pylist() for column in batch.columns), strict=True)


def route_partition(
    batches: Iterator[pa.RecordBatch], *, job: str, url: str, snapshot: Broadcast[bytes]
) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function: route and stage one partition, yield its summary."""
    import pyarrow as pa
    from pyspark import TaskContext

    context = TaskContext.get()
    assert context is not None
    part = context.partitionId()
    prepared_snapshot, state = prepared(job, lambda: snapshot.value)
    summary = store(_engine(url), part, route_rows(_rows(batches), prepared_snapshot, state))
    yield pa.RecordBatch.from_pylist([{"part": part, **asdict(summary)}])
