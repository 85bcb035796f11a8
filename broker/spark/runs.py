"""Every SQL statement of the Spark pipeline's own bookkeeping, in one place.

A run (``psb_spark_runs``) is one job on one stream; each partition it has
committed has a marker row (``psb_spark_parts``) holding what it did. The marker
is inserted first in the partition's transaction (``INSERT ... ON CONFLICT DO
NOTHING``): a second attempt of the same partition (a retry, a speculative copy)
finds it, waits for the first attempt's transaction if that is still open, and
writes nothing. The markers are also the turn: partition ``k`` commits once
``k - 1`` has (:func:`await_turn`), so the queues receive the backlog in the
service's order.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import astuple, dataclass, fields

from sqlalchemy import ColumnElement, Connection, Engine, delete, func, insert, select, update

from broker.store.schema import spark_parts as parts
from broker.store.schema import spark_runs as runs
from queues import sql
from queues.errors import MQError
from queues.reasons import Reason
from queues.schema import messages, queues

# A backlog message's place in the service's get order (priority DESC, id), as one
# integer: priorities 0..9 above 44 bits of row id.
ORDER_BITS = 44
ORDER_SPAN = 1 << ORDER_BITS


def input_order(priority: int, row_id: int) -> int:
    return (9 - priority) << ORDER_BITS | row_id


# -- runs ----------------------------------------------------------------------------------


def start_run(conn: Connection, job: str, stream: str, watermark: int, partitions: int, now: int) -> None:
    """Record the run, after clearing what dead runs of this stream left (the caller holds
    the stream's lease, so none of them is alive; runs on other streams may be)."""
    dead = select(runs.c.job).where(runs.c.stream == stream)
    conn.execute(delete(parts).where(parts.c.job.in_(dead)))
    conn.execute(delete(runs).where(runs.c.stream == stream))
    conn.execute(
        insert(runs).values(
            job=job, stream=stream, watermark=watermark, partitions=partitions, started_at=now
        )
    )


def end_run(conn: Connection, job: str) -> None:
    conn.execute(delete(parts).where(parts.c.job == job))
    conn.execute(delete(runs).where(runs.c.job == job))


# -- partitions ----------------------------------------------------------------------------


def consume(conn: Connection, where: ColumnElement[bool]) -> int:
    """Delete a partition's backlog (``broker.spark.plan.Plan.where``); how many went."""
    return int(conn.execute(delete(messages).where(where)).rowcount)


def remaining(conn: Connection, backlog: ColumnElement[bool]) -> int:
    """Messages of the backlog (``broker.spark.plan.Plan.backlog``) still on the stream."""
    return int(conn.execute(select(func.count()).where(backlog)).scalar_one())


def lock_queues(conn: Connection, names: Iterable[str]) -> list[tuple[str, int, int]]:
    """(name, depth, max_depth) of the queues ``names``, locked until commit (in name
    order, as ``queues.sql.apply_depth`` locks them, so the two never deadlock)."""
    stmt = (
        select(queues.c.name, queues.c.depth, queues.c.max_depth)
        .where(queues.c.name.in_(sorted(names)))
        .order_by(queues.c.name)
        .with_for_update()
    )
    return [(name, depth, max_depth) for name, depth, max_depth in conn.execute(stmt)]


@dataclass(slots=True)
class PartSummary:
    """What one partition did (a row of ``psb_spark_parts``, less its key)."""

    rows_read: int = 0  # backlog messages it read and consumed, expired ones included
    messages: int = 0  # of which routed
    deliveries: int = 0
    replies: int = 0
    forwards: int = 0
    dead_letters: int = 0  # messages it put on the dead-letter queue
    queue_full: int = 0  # of which deliveries their queue had no room for (MQRC_Q_FULL)
    written: int = 0  # messages it put on all queues
    route_us: int = 0  # reading and routing
    wait_us: int = 0  # waiting for the partition before it to commit
    write_us: int = 0  # its transaction

    def add(self, other: PartSummary) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


SUMMARY_FIELDS = tuple(f.name for f in fields(PartSummary))


def claim_part(conn: Connection, job: str, part: int) -> bool:
    """Mark ``part`` as committed by this transaction; False if another attempt did."""
    values = {"job": job, "part": part, **dict.fromkeys(SUMMARY_FIELDS, 0)}
    stmt = sql.insert_new(conn, parts, ("job", "part")).returning(parts.c.part)
    return conn.execute(stmt, values).first() is not None


def part_summary(conn: Connection, job: str, part: int) -> PartSummary | None:
    row = conn.execute(
        select(*(parts.c[name] for name in SUMMARY_FIELDS)).where(parts.c.job == job, parts.c.part == part)
    ).first()
    return None if row is None else PartSummary(*row)


def finish_part(conn: Connection, job: str, part: int, summary: PartSummary) -> None:
    stmt = update(parts).where(parts.c.job == job, parts.c.part == part)
    conn.execute(stmt.values(**dict(zip(SUMMARY_FIELDS, astuple(summary), strict=True))))


def committed_parts(conn: Connection, job: str) -> dict[int, PartSummary]:
    stmt = select(parts.c.part, *(parts.c[name] for name in SUMMARY_FIELDS)).where(parts.c.job == job)
    return {row[0]: PartSummary(*row[1:]) for row in conn.execute(stmt)}


class TurnTimeout(MQError):
    """The partition before this one did not commit in time: this attempt fails, and
    Spark tries it again (or the job fails, saying why)."""

    def __init__(self, detail: str) -> None:
        super().__init__(Reason.MQRCCF_COMMAND_FAILED, detail)


def await_turn(db: Engine, job: str, part: int, timeout: float) -> float:
    """Return once partition ``part - 1`` of ``job`` has committed; the seconds waited."""
    if part == 0:
        return 0.0
    started = time.monotonic()
    pause = 0.002
    stmt = select(func.count()).where(parts.c.job == job, parts.c.part == part - 1)
    while True:
        with db.connect() as conn:
            if conn.execute(stmt).scalar_one():
                return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise TurnTimeout(f"partition {part - 1} of job {job} did not commit within {timeout:.0f} s")
        time.sleep(pause)
        pause = min(pause * 1.5, 0.05)
