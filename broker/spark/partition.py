"""One partition of the backlog: rows in, ``engine.route``, message rows out.

Each input row becomes exactly the :class:`~queues.Message` a get returns at
the job's clock, is routed by :func:`broker.core.engine.route` against the
executor's state (rebuilt once per Python process from the broadcast snapshot),
and its outcome becomes the rows the service's writer would have written:
a put is the row :func:`queues.manager.message_row` builds for its queue, a put
for a neighbour goes where :func:`~broker.core.writes.write_of` sends it, a
put that cannot be made (unknown queue, too big, put inhibited) and every
DeadLetter effect is the dead-letter queue's row for the message behind an
MQDLH. What depends on the partitions before this one is left for its turn
(``broker.spark.commit``): the queues' MAXDEPTH, the retained publications a
SetRetained replaces and the ones a DeletePub deletes, so SetRetained effects
are kept in input order and DeletePubs are routed in the turn.

No other state change can come from a stream publication against the snapshot
(see ``broker.spark.snapshot``); one that does is a defect and fails the task.
Inputs are routed in the service's get order whatever order the read returned
them in, and each live one knows its rank in the backlog, hence its service batch.
"""

from __future__ import annotations

import logging
import pickle
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from broker.core import engine
from broker.core.effects import DELIVERY, REPLY, DeadLetter, Effect, Outcome, Put, SetRetained
from broker.core.engine import failed_outcome
from broker.core.routing import Source
from broker.core.state import BrokerState
from broker.core.writes import Write, write_of
from broker.spark.plan import Part, Plan
from broker.spark.runs import PartSummary, input_order
from broker.spark.snapshot import Snapshot
from queues import sql
from queues.errors import MQError
from queues.ids import mq_date_time
from queues.manager import dead_letter_message, message_row, row_to_message
from queues.message import Message
from queues.names import DEAD_LETTER_QUEUE
from queues.reasons import Reason
from queues.schema import MESSAGE_COLUMNS

log = logging.getLogger(__name__)

_ID, _PRIORITY = sql.ID, sql.PRIORITY
_EXPIRES_AT = sql.COLUMNS.index("expires_at")

# A row the partition writes: (input order, effect index, phase, the priority and
# persistence the engine asked for, then ``mq_messages``' columns as ``message_row``
# builds them). Phase 0: dead-lettered as the engine decided (the service writes those
# first in a batch); 1: a put, or a put that failed and went to the dead-letter queue.
SEQ, IDX, PHASE, ASKED_PRIORITY, ASKED_PERSISTENCE = range(5)
MESSAGE = 5
QUEUE = MESSAGE + MESSAGE_COLUMNS.index("queue")
DIRECT, PUT = 0, 1
_FIELDS = {name: MESSAGE + MESSAGE_COLUMNS.index(name) for name in MESSAGE_COLUMNS}
# The message's fields a row holds as they were put (its persistence and priority are asked
# for, and resolved against the queue, in columns of their own).
_AS_STORED = tuple(name for name in Message._fields if name not in ("persistence", "priority"))


class SnapshotError(MQError):
    """A stream publication changed state the snapshot promised it would not."""

    def __init__(self, detail: str) -> None:
        super().__init__(Reason.MQRCCF_COMMAND_FAILED, detail)


class Stager:
    """An outcome's message effects as the rows the service would have written."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.now = snapshot.now
        self.stamp = mq_date_time(snapshot.now)
        self.context = snapshot.context
        self.definitions = snapshot.definitions
        self.neighbours = frozenset(snapshot.neighbours)
        self.rows: list[tuple[Any, ...]] = []
        self.summary = PartSummary()

    def stage(self, seq: int, effects: Sequence[Effect]) -> list[tuple[int, Effect]]:
        """Row the puts and dead letters among ``effects`` (an outcome's, in order) as
        input ``seq``'s; return the state changes among them with their index."""
        changes: list[tuple[int, Effect]] = []
        summary = self.summary
        for idx, effect in enumerate(effects):
            if not isinstance(effect, Put | DeadLetter):
                changes.append((idx, effect))
                continue
            self._write(seq, idx, write_of(effect, self.neighbours))
            if not isinstance(effect, Put):
                continue
            if effect.kind == DELIVERY:
                summary.deliveries += 1
            elif effect.kind == REPLY:
                summary.replies += 1
            else:
                summary.forwards += 1
        return changes

    def overflowed(self, row: Sequence[Any], reason: int) -> tuple[Any, ...]:
        """The dead-letter row of a put its queue has no room for, as a failed put's is."""
        self._dead(row[SEQ], row[IDX], PUT, row[QUEUE], row_message(row), reason)
        return self.rows.pop()

    def _write(self, seq: int, idx: int, write: Write) -> None:
        queue, message = write.queue, write.message
        if write.reason:
            self._dead(seq, idx, DIRECT, queue, message, write.reason, write.dest_qmgr)
            return
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
        return (seq, idx, phase, message.priority, message.persistence, *row)


def row_message(row: Sequence[Any]) -> Message:
    """The message a row was built from (the inverse of ``Stager._row``)."""
    return Message(
        **{name: row[_FIELDS[name]] for name in _AS_STORED},
        persistence=row[ASKED_PERSISTENCE],
        priority=row[ASKED_PRIORITY],
    )


def route_one(message: Message, source: Source, state: BrokerState, now: int, sequence: int) -> Outcome:
    """``engine.route``, and what the service does when it raises (a defect): the
    message is dead-lettered with 3008 and answered, never allowed to stop the job."""
    try:
        return engine.route(message, source, state, now, sequence=sequence)
    except Exception as exc:
        log.exception("routing failed", extra={"queue": source.queue, "msg_id": message.msg_id.hex()})
        return failed_outcome(message, source.queue, state.qmgr, now, f"internal error: {exc!r}")


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """What every task of a job is given (broadcast once): the snapshot it routes
    against, the partitions, the lease it commits under, the service batch size whose
    dead-letter order it reproduces."""

    snapshot: Snapshot
    plan: Plan
    owner: str
    batch_size: int
    turn_timeout: float

    def encode(self) -> bytes:
        return pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def decode(data: bytes) -> TaskSpec:
        spec = pickle.loads(data)
        assert isinstance(spec, TaskSpec)
        return spec


@dataclass(slots=True)
class Routed:
    """One partition, routed: what its turn writes."""

    rows: list[tuple[Any, ...]]  # in (input order, effect index) order
    summary: PartSummary
    # Per input in order, what the turn does: a SetRetained (input, effect index, effect),
    # or a DeletePub to route (input, None, the message).
    ordered: list[tuple[int, int | None, Any]] = field(default_factory=list)
    batches: dict[int, int] = field(default_factory=dict)  # input order -> service batch (from 1)

    @property
    def deletes(self) -> bool:
        return any(idx is None for _, idx, _ in self.ordered)


def route_rows(
    rows: Iterable[Sequence[Any]], snapshot: Snapshot, state: BrokerState, part: Part, batch_size: int
) -> Routed:
    """Route backlog rows (``mq_messages`` columns in table order) of one partition."""
    started = time.perf_counter()
    stager = Stager(snapshot)
    routed = Routed(stager.rows, stager.summary)
    summary = routed.summary
    source = engine.source_of(state, snapshot.stream)
    now = snapshot.now
    rank = part.first_rank
    for row in sorted(rows, key=lambda r: input_order(r[_PRIORITY], r[_ID])):
        summary.rows_read += 1
        expires_at = row[_EXPIRES_AT]
        if expires_at is not None and expires_at <= now:
            continue  # a get never returns it; the turn removes it with the partition
        summary.messages += 1
        seq = input_order(row[_PRIORITY], row[_ID])
        routed.batches[seq] = (rank + batch_size - 1) // batch_size
        rank += 1
        message = row_to_message(row, now)
        outcome = route_one(message, source, state, now, row[_ID])
        if outcome.command == "DeletePub":
            routed.ordered.append((seq, None, message))
            continue
        for idx, change in stager.stage(seq, outcome.effects):
            if not isinstance(change, SetRetained):
                raise SnapshotError(f"a publication on {snapshot.stream} changed state: {change!r}")
            routed.ordered.append((seq, idx, change))
    summary.route_us = int((time.perf_counter() - started) * 1e6)
    return routed
