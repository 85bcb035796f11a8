"""Every SQL statement of the Spark pipeline's staging area, in one place.

Tasks stage what they computed under the job's id; the final merge turns the
staged rows into queue messages with statements that run inside the database
(``INSERT ... SELECT ... ORDER BY``), so that ten million deliveries never
travel through the driver. Exactly once, per partition: a task's transaction
first inserts the partition's marker (``INSERT ... ON CONFLICT DO NOTHING``); a
second attempt of the same partition (a retry, a speculative copy) finds it,
waits for the first attempt's transaction if it is still open, and writes
nothing. The staged rows' primary key (job, input order, effect index) makes a
duplicate impossible even so.

Bulk paths follow ``queues.sql``: ``COPY`` on PostgreSQL, the compiled INSERT
run with positional rows on SQLite.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import astuple, dataclass, fields
from typing import Any

from sqlalchemy import ColumnElement, Connection, Insert, Table, delete, func, insert, select, text, update
from sqlalchemy.dialects import postgresql, sqlite

from broker.spark.schema import STAGING, deferred, parts, puts, retained, runs
from queues.schema import MESSAGE_COLUMNS, messages, queues
from queues.sql import copy_rows

# A staged input's place in the service's get order (priority DESC, id), as one integer:
# priorities 0..9 above 44 bits of row id.
ORDER_BITS = 44
ORDER_SPAN = 1 << ORDER_BITS
PUT_COLUMNS = tuple(c.name for c in puts.columns)


def input_order(priority: int, row_id: int) -> int:
    return (9 - priority) << ORDER_BITS | row_id


def insert_new(conn: Connection, table: Table, key: Sequence[str]) -> Insert:
    """An INSERT that leaves an existing row with the same ``key`` alone."""
    if conn.dialect.name == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing(index_elements=list(key))
    return sqlite.insert(table).on_conflict_do_nothing(index_elements=list(key))


# -- runs ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Backlog:
    """The stream's rows as of the watermark: ids ``low..watermark``, ``rows`` of them."""

    low: int
    watermark: int
    rows: int


def backlog(conn: Connection, stream: str) -> Backlog:
    stmt = select(func.min(messages.c.id), func.max(messages.c.id), func.count()).where(
        messages.c.queue == stream
    )
    low, high, count = conn.execute(stmt).one()
    return Backlog(low or 0, high or 0, count)


def start_run(conn: Connection, job: str, stream: str, watermark: int, partitions: int, now: int) -> None:
    """Record the run, after clearing what dead runs left behind (the caller holds the
    stream's lease, so no other run on it is alive; runs on other streams may be)."""
    conn.execute(delete(runs).where(runs.c.stream == stream))
    _discard(conn, lambda table: table.c.job.not_in(select(runs.c.job)))
    conn.execute(
        insert(runs).values(
            job=job, stream=stream, watermark=watermark, partitions=partitions, started_at=now
        )
    )


def end_run(conn: Connection, job: str) -> None:
    conn.execute(delete(runs).where(runs.c.job == job))


def clear(conn: Connection, job: str) -> None:
    """Remove a finished or failed job's staged rows."""
    _discard(conn, lambda table: table.c.job == job)


def _discard(conn: Connection, which: Callable[[Table], ColumnElement[bool]]) -> None:
    """Delete the staged rows ``which`` selects; when no run is left, empty the tables
    wholesale instead (TRUNCATE on PostgreSQL, SQLite's own truncation of an
    unconditional DELETE), which costs nothing like deleting ten million rows."""
    if conn.dialect.name == "postgresql":
        conn.execute(text(f"LOCK TABLE {runs.name} IN SHARE MODE"))  # no run may start meanwhile
    remaining = conn.execute(select(func.count()).select_from(runs)).scalar_one()
    for table in STAGING[:-1]:
        if remaining:
            conn.execute(delete(table).where(which(table)))
        elif conn.dialect.name == "postgresql":
            conn.execute(text(f"TRUNCATE {table.name}"))
        else:
            conn.execute(delete(table))


# -- partitions ----------------------------------------------------------------------------


@dataclass(slots=True)
class PartSummary:
    """What one partition did (a row of ``psb_spark_parts``, less its key)."""

    rows_read: int = 0
    messages: int = 0
    deliveries: int = 0
    replies: int = 0
    forwards: int = 0
    dead_letters: int = 0
    staged: int = 0
    route_us: int = 0
    stage_us: int = 0

    def add(self, other: PartSummary) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


SUMMARY_FIELDS = tuple(f.name for f in fields(PartSummary))


def claim_part(conn: Connection, job: str, part: int) -> bool:
    """Mark ``part`` as staged by this transaction; False if another attempt did."""
    values = {"job": job, "part": part, **dict.fromkeys(SUMMARY_FIELDS, 0)}
    stmt = insert_new(conn, parts, ("job", "part")).returning(parts.c.part)
    return conn.execute(stmt, values).first() is not None


def staged_part(conn: Connection, job: str, part: int) -> PartSummary | None:
    row = conn.execute(
        select(*(parts.c[name] for name in SUMMARY_FIELDS)).where(parts.c.job == job, parts.c.part == part)
    ).first()
    return None if row is None else PartSummary(*row)


def finish_part(conn: Connection, job: str, part: int, summary: PartSummary) -> None:
    stmt = update(parts).where(parts.c.job == job, parts.c.part == part)
    conn.execute(stmt.values(**dict(zip(SUMMARY_FIELDS, astuple(summary), strict=True))))


def staged_parts(conn: Connection, job: str) -> dict[int, PartSummary]:
    stmt = select(parts.c.part, *(parts.c[name] for name in SUMMARY_FIELDS)).where(parts.c.job == job)
    return {row[0]: PartSummary(*row[1:]) for row in conn.execute(stmt)}


def write_puts(conn: Connection, rows: Sequence[tuple[Any, ...]]) -> None:
    """Staged message rows, values in ``PUT_COLUMNS`` order."""
    if not rows:
        return
    if conn.dialect.name == "postgresql":
        copy_rows(conn, puts, PUT_COLUMNS, rows)
    else:
        conn.exec_driver_sql(_compiled(conn, puts), list(rows))


_INSERTS: dict[tuple[str, str], str] = {}


def _compiled(conn: Connection, table: Table) -> str:
    key = (conn.dialect.name, table.name)
    sql = _INSERTS.get(key)
    if sql is None:
        sql = _INSERTS[key] = str(insert(table).compile(dialect=conn.dialect))
    return sql


def write_retained(conn: Connection, rows: Sequence[tuple[str, int, int, str, str]]) -> None:
    """(job, seq, idx, sub_point, topic) of every SetRetained."""
    if rows:
        names = ("job", "seq", "idx", "sub_point", "topic")
        conn.execute(insert(retained), [dict(zip(names, row, strict=True)) for row in rows])


def write_deferred(conn: Connection, rows: Sequence[tuple[str, int]]) -> None:
    if rows:
        conn.execute(insert(deferred), [{"job": job, "seq": seq} for job, seq in rows])


# -- the merge -----------------------------------------------------------------------------


def deferred_inputs(conn: Connection, job: str) -> list[int]:
    stmt = select(deferred.c.seq).where(deferred.c.job == job).order_by(deferred.c.seq)
    return [row.seq for row in conn.execute(stmt)]


def last_retained(conn: Connection, job: str, after: int, before: int | None) -> list[Any]:
    """The last SetRetained per (sub_point, topic) among inputs in (after, before), in
    input order: within a stretch without DeletePub only the last writer counts."""
    conditions = [retained.c.job == job, retained.c.seq > after]
    if before is not None:
        conditions.append(retained.c.seq < before)
    rank = (
        func.row_number()
        .over(
            partition_by=(retained.c.sub_point, retained.c.topic),
            order_by=(retained.c.seq.desc(), retained.c.idx.desc()),
        )
        .label("rank")
    )
    ranked = (
        select(retained.c.seq, retained.c.sub_point, retained.c.topic, rank).where(*conditions).subquery()
    )
    stmt = select(ranked.c.seq, ranked.c.sub_point, ranked.c.topic).where(ranked.c.rank == 1)
    return list(conn.execute(stmt.order_by(ranked.c.seq)))


def staged_depths(conn: Connection, job: str) -> dict[str, int]:
    stmt = select(puts.c.queue, func.count()).where(puts.c.job == job).group_by(puts.c.queue)
    return {queue: count for queue, count in conn.execute(stmt)}


def lock_queues(conn: Connection, names: Iterable[str]) -> list[tuple[str, int, int]]:
    """(name, depth, max_depth) of the queues ``names``, locked until commit (in name
    order, as ``queues.sql.apply_depth`` locks them, so the two never deadlock)."""
    stmt = (
        select(queues.c.name, queues.c.depth, queues.c.max_depth)
        .where(queues.c.name.in_(sorted(names)))
        .order_by(queues.c.name)
        .with_for_update()
    )
    return [tuple(row) for row in conn.execute(stmt)]  # type: ignore[misc]


def excess_puts(conn: Connection, job: str, queue: str, keep: int) -> list[Any]:
    """The staged puts to ``queue`` after its first ``keep``, in input order."""
    stmt = (
        select(puts)
        .where(puts.c.job == job, puts.c.queue == queue)
        .order_by(puts.c.seq, puts.c.idx)
        .offset(keep)
    )
    return list(conn.execute(stmt))


def replace_puts(conn: Connection, job: str, rows: Sequence[tuple[Any, ...]]) -> None:
    """Put ``rows`` in place of the staged rows with the same keys."""
    for row in rows:
        _, seq, idx = row[:3]
        conn.execute(delete(puts).where(puts.c.job == job, puts.c.seq == seq, puts.c.idx == idx))
    write_puts(conn, rows)


def insert_messages(conn: Connection, job: str, dead_letter_queue: str) -> None:
    """Move the staged rows of every queue but the dead-letter queue into ``mq_messages``,
    in input order: the order the service puts them in.

    On PostgreSQL the staging table is analysed first: its rows were written in input
    order, and a planner that knows it reads them through the primary key instead of
    sorting gigabytes on disk (a quarter of the statement's time)."""
    if conn.dialect.name == "postgresql":
        conn.execute(text(f"ANALYZE {puts.name}"))
    ordinary = (
        select(*_MESSAGE_VALUES)
        .where(puts.c.job == job, puts.c.queue != dead_letter_queue)
        .order_by(puts.c.seq, puts.c.idx)
    )
    conn.execute(insert(messages).from_select(MESSAGE_COLUMNS, ordinary))


def insert_dead_letters(
    conn: Connection,
    job: str,
    dead_letter_queue: str,
    *,
    stream: str,
    watermark: int,
    now: int,
    batch_size: int,
) -> None:
    """Move the staged dead letters into ``mq_messages`` in the order the service writes them.

    The service writes a batch's dead letters in two runs, first those the engine
    decided, then the puts that failed; so the rows are ordered by (the service batch
    of ``batch_size`` inputs their input falls in, that run, input order). The backlog
    rows must still be in ``mq_messages``: they give each input its rank.
    """
    live = (messages.c.expires_at.is_(None)) | (messages.c.expires_at > now)
    ranked = (
        select(
            messages.c.id,
            func.row_number().over(order_by=(messages.c.priority.desc(), messages.c.id)).label("rank"),
        )
        .where(messages.c.queue == stream, messages.c.id <= watermark, live)
        .subquery()
    )
    # Inputs rank from 1; what no input caused (housekeeping, seq 0) comes first, as batch 0.
    batch = (func.coalesce(ranked.c.rank, 0) + (batch_size - 1)) // batch_size
    dead = (
        select(*_MESSAGE_VALUES)
        .select_from(puts.outerjoin(ranked, ranked.c.id == puts.c.seq % ORDER_SPAN))
        .where(puts.c.job == job, puts.c.queue == dead_letter_queue)
        .order_by(batch, puts.c.phase, puts.c.seq, puts.c.idx)
    )
    conn.execute(insert(messages).from_select(MESSAGE_COLUMNS, dead))


_MESSAGE_VALUES = tuple(puts.c[name] for name in MESSAGE_COLUMNS)


def delete_backlog(conn: Connection, stream: str, watermark: int) -> int:
    stmt = delete(messages).where(messages.c.queue == stream, messages.c.id <= watermark)
    return conn.execute(stmt).rowcount


def count_backlog(conn: Connection, stream: str, watermark: int) -> int:
    stmt = (
        select(func.count())
        .select_from(messages)
        .where(messages.c.queue == stream, messages.c.id <= watermark)
    )
    return int(conn.execute(stmt).scalar_one())
