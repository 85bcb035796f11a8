"""A partition's turn: its results become visible, and its backlog goes, in one transaction.

Partitions commit in partition order (each waits for the marker of the one
before it, ``broker.spark.runs.await_turn``), so every queue receives the
backlog's messages in the service's order, and whatever a partition's
transaction reads (queue depths, the retained store) is what the partitions
before it left. In that transaction:

1. the stream's lease is locked and checked (no router can have touched the
   stream) and the partition's marker inserted: a second attempt of a partition
   that committed writes nothing;
2. retained changes are applied in input order, and each DeletePub is routed with
   :func:`broker.core.engine.route` at its place in that order, against the retained
   store as it is then: exactly the service's semantics; its replies and forwards
   join the partition's rows;
3. queues that would exceed MAXDEPTH keep their first messages, in order; the rest
   go to the dead-letter queue with MQRC_Q_FULL, as the service's put does;
4. the rows are inserted in the service's order (the dead letters ordered as the
   service orders them within its batches), depth counters change and the arrivals
   are announced, the state changes go through
   :meth:`broker.store.StateStore.write` (change log and version, so running
   services see them), and the partition's backlog is deleted: exactly the rows it
   read, or the transaction fails.

A job killed at any moment leaves whole partitions committed and the rest of the
backlog where it was; running the job again routes what is left.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Engine

from broker import store
from broker.core import engine
from broker.core.effects import Effect
from broker.spark import runs
from broker.spark.partition import IDX, MESSAGE, PHASE, QUEUE, SEQ, Routed, Stager, TaskSpec, route_one
from broker.spark.plan import Part
from broker.spark.runs import ORDER_SPAN, PartSummary
from broker.spark.snapshot import Snapshot, queue_directory
from broker.store import leases
from queues import sql
from queues.errors import MQError
from queues.ids import now_ms
from queues.names import DEAD_LETTER_QUEUE
from queues.reasons import Reason


class CommitError(MQError):
    """The partition cannot be committed as read: nothing of it is written."""

    def __init__(self, detail: str) -> None:
        super().__init__(Reason.MQRCCF_COMMAND_FAILED, detail)


def commit_partition(db: Engine, task: TaskSpec, part: Part, routed: Routed) -> PartSummary:
    """Wait for ``part``'s turn, then commit it; the summary of whichever attempt did."""
    snapshot = task.snapshot
    job = snapshot.job
    summary = routed.summary
    summary.wait_us = int(runs.await_turn(db, job, part.index, task.turn_timeout) * 1e6)
    started = time.perf_counter()
    with db.begin() as conn:
        leases.verify(conn, leases.stream_resource(snapshot.stream), task.owner, now_ms())
        if not runs.claim_part(conn, job, part.index):
            existing = runs.part_summary(conn, job, part.index)
            assert existing is not None  # the claim failed on its row, now committed
            return existing
        stager = Stager(snapshot)
        changes = _in_order(conn, snapshot, routed, stager)
        rows = routed.rows
        if stager.rows:  # a DeletePub's replies and forwards, at its place in the order
            rows = sorted([*rows, *stager.rows], key=lambda row: (row[SEQ], row[IDX]))
        consumed = runs.consume(conn, task.plan.where(part))
        if consumed != summary.rows_read:
            raise CommitError(
                f"partition {part.index} read {summary.rows_read} messages but {consumed} were left "
                f"to consume: something else took messages off {snapshot.stream}"
            )
        write(conn, snapshot, rows, routed.batches, changes, summary, consumed=consumed)
        summary.add(stager.summary)
        summary.write_us = int((time.perf_counter() - started) * 1e6)
        runs.finish_part(conn, job, part.index, summary)
    return summary


def _in_order(conn: Connection, snapshot: Snapshot, routed: Routed, stager: Stager) -> list[Effect]:
    """The partition's state changes in input order: its SetRetained effects, and the
    outcomes of its DeletePubs routed here against the retained store as it is now
    (loaded only when there is a DeletePub to route)."""
    if not routed.deletes:
        return [effect for _, _, effect in routed.ordered]
    state_store = store.StateStore(
        snapshot.config, default_allow=snapshot.default_allow, admin_group=snapshot.admin_group
    )
    state = state_store.load(conn, queue_directory(snapshot.definitions))
    source = engine.source_of(state, snapshot.stream)
    changes: list[Effect] = []
    for seq, idx, item in routed.ordered:
        if idx is not None:
            state.apply(item)
            changes.append(item)
            continue
        outcome = route_one(item, source, state, snapshot.now, seq % ORDER_SPAN)
        state.apply_all(outcome.effects)
        changes.extend(effect for _, effect in stager.stage(seq, outcome.effects))
    return changes


def write(
    conn: Connection,
    snapshot: Snapshot,
    rows: Sequence[tuple[Any, ...]],
    batches: dict[int, int],
    changes: Sequence[Effect],
    summary: PartSummary,
    *,
    consumed: int = 0,
) -> None:
    """Write ``rows`` (in input order) and ``changes`` as the service would: MAXDEPTH
    kept, the dead letters in service-batch order (``batches``: input -> batch; inputs
    not in it, such as housekeeping's, come first), depths changed by the rows and by
    ``consumed`` backlog messages, arrivals announced."""
    # The state version first and then every queue row this transaction changes, at once
    # and in name order, as the service's units of work lock them: none can deadlock with it.
    store.StateStore(snapshot.config).write(conn, changes)
    others = {DEAD_LETTER_QUEUE, snapshot.stream} if consumed else {DEAD_LETTER_QUEUE}
    ordinary, dead = _overflow(conn, snapshot, rows, summary, others)
    dead.sort(key=lambda row: (batches.get(row[SEQ], 0), row[PHASE], row[SEQ], row[IDX]))
    sql.insert_messages(conn, [row[MESSAGE:] for row in (*ordinary, *dead)])
    written = Counter(row[QUEUE] for row in ordinary)
    if dead:
        written[DEAD_LETTER_QUEUE] += len(dead)
    summary.written += len(ordinary) + len(dead)
    deltas = dict(written)
    if consumed:
        deltas[snapshot.stream] = deltas.get(snapshot.stream, 0) - consumed
    index_types = {name: d.index_type for name, d in snapshot.definitions.items()}
    # Gets as the service counts them: the messages routed, not the expired ones removed.
    gets = {snapshot.stream: summary.messages} if consumed else {}
    refused = sql.apply_depth(conn, deltas, index_types, tuple(written), puts=written, gets=gets)
    if refused:
        raise MQError(Reason.MQRC_Q_FULL, f"no room left on {', '.join(refused)}")


def _overflow(
    conn: Connection,
    snapshot: Snapshot,
    rows: Sequence[tuple[Any, ...]],
    summary: PartSummary,
    others: set[str],
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The rows split into ordinary ones and dead letters, after moving the puts their
    queue has no room for (MAXDEPTH, as of now: the queue rows, and ``others``, are locked
    until commit) to the dead letters with MQRC_Q_FULL, each queue keeping its first ones."""
    wanted = Counter(row[QUEUE] for row in rows if row[QUEUE] != DEAD_LETTER_QUEUE)
    locked = runs.lock_queues(conn, wanted.keys() | others)
    room = {name: max(0, max_depth - depth) for name, depth, max_depth in locked if name in wanted}
    full = {name for name, count in wanted.items() if name in room and count > room[name]}
    ordinary: list[tuple[Any, ...]] = []
    dead: list[tuple[Any, ...]] = []
    stager = Stager(snapshot)
    for row in rows:
        queue = row[QUEUE]
        if queue == DEAD_LETTER_QUEUE:
            dead.append(row)
        elif queue in full and room[queue] == 0:
            dead.append(stager.overflowed(row, Reason.MQRC_Q_FULL))
            summary.queue_full += 1
            summary.dead_letters += 1
        else:
            if queue in full:
                room[queue] -= 1
            ordinary.append(row)
    return ordinary, dead
