"""How a backlog is cut into partitions: whole service batches, in get order.

Each partition commits its own results (``broker.spark.commit``), in partition
order, so a partition must be a stretch of the backlog in the order the service
would get it: priority descending, then id. And the dead-letter queue is
ordered as the service orders it within its batches (a batch's dead letters
the engine decided, then its failed puts), so a partition holds whole service
batches of ``batch_size`` live messages: its dead letters then never share a
batch with another partition's.

One query ranks the live messages (``row_number()`` over the get order, on
both databases) and returns only the first message of each partition; every
row between two of them, expired ones included, belongs to the first. A
partition is described by the key of its first message and of the next
partition's first, and becomes the same SQL predicate for the JDBC read that
loads it and for the delete that consumes it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import ColumnElement, Connection, and_, func, or_, select
from sqlalchemy.dialects import postgresql

from queues.schema import messages

ROWS_PER_PARTITION = 10_000

Key = tuple[int, int]  # (priority, id) of a message: get order is priority DESC, id ASC


@dataclass(frozen=True, slots=True)
class Part:
    """Partition ``index``: the backlog's messages from key ``start`` (None: the first)
    up to, not including, ``end`` (None: the last); its first live message is the
    ``first_rank``-th (from 1) in get order."""

    index: int
    first_rank: int
    start: Key | None
    end: Key | None


def _at_or_after(key: Key, one_priority: bool) -> ColumnElement[bool]:
    """Messages at ``key`` or after it in get order: an id range when the backlog has one
    priority (read through the primary key on both databases)."""
    priority, row_id = key
    c = messages.c
    if one_priority:
        return c.id >= row_id
    return or_(c.priority < priority, and_(c.priority == priority, c.id >= row_id))


def _before(key: Key, one_priority: bool) -> ColumnElement[bool]:
    priority, row_id = key
    c = messages.c
    if one_priority:
        return c.id < row_id
    return or_(c.priority > priority, and_(c.priority == priority, c.id < row_id))


@dataclass(frozen=True, slots=True)
class Plan:
    """The backlog (the stream's messages with id <= ``watermark``) and its partitions."""

    stream: str
    watermark: int
    rows: int  # messages in the backlog, expired ones included
    live: int  # of which a get would return at the job's clock
    size: int  # live messages per partition (the last may hold fewer)
    parts: tuple[Part, ...]
    one_priority: bool = True  # every message of the backlog has the same priority

    def backlog(self) -> ColumnElement[bool]:
        return _backlog(self.stream, self.watermark)

    def where(self, part: Part) -> ColumnElement[bool]:
        """The messages of ``part``: the same statement reads and then consumes them."""
        bounds = [self.backlog()]
        if part.start:
            bounds.append(_at_or_after(part.start, self.one_priority))
        if part.end:
            bounds.append(_before(part.end, self.one_priority))
        return and_(*bounds)

    def predicate(self, part: Part) -> str:
        """:meth:`where` as SQL text for the JDBC read of ``part`` from ``mq_messages``: MQ
        queue names cannot hold a quote and the rest are integers, so literals are safe."""
        compiled = self.where(part).compile(
            dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True}
        )
        return str(compiled)


def _backlog(stream: str, watermark: int) -> ColumnElement[bool]:
    return and_(messages.c.queue == stream, messages.c.id <= watermark)


def partition_size(live: int, batch_size: int, partitions: int | None, cores: int) -> int:
    """Live messages per partition: whole batches, about ``ROWS_PER_PARTITION`` or what
    makes ``partitions`` of them, and at least two partitions per core when the backlog
    has the batches for it."""
    wanted = partitions or max(2 * cores, -(-live // ROWS_PER_PARTITION))
    batches = -(-max(live, 1) // batch_size)
    return batch_size * max(1, -(-batches // max(wanted, 1)))


def make_plan(
    conn: Connection, stream: str, now: int, *, batch_size: int, partitions: int | None, cores: int
) -> Plan:
    """The backlog as of this transaction, cut into partitions."""
    c = messages.c
    watermark, rows, lowest, highest = conn.execute(
        select(func.max(c.id), func.count(), func.min(c.priority), func.max(c.priority)).where(
            c.queue == stream
        )
    ).one()
    if not rows:
        return Plan(stream, 0, 0, 0, batch_size, ())
    backlog = _backlog(stream, watermark)
    live_now = or_(c.expires_at.is_(None), c.expires_at > now)
    live = conn.execute(select(func.count()).where(backlog, live_now)).scalar_one()
    size = partition_size(live, batch_size, partitions, cores)
    rank = func.row_number().over(order_by=(c.priority.desc(), c.id)).label("rank")
    ranked = select(c.priority, c.id, rank).where(backlog, live_now).subquery()
    first = (ranked.c.rank - 1) % size == 0
    starts: list[Key] = [
        (priority, row_id)
        for priority, row_id, _ in conn.execute(
            select(ranked.c.priority, ranked.c.id, ranked.c.rank)
            .where(first, ranked.c.rank > 1)
            .order_by(ranked.c.rank)
        )
    ]
    bounds: list[Key | None] = [None, *starts, None]
    parts = tuple(
        Part(index, index * size + 1, bounds[index], bounds[index + 1]) for index in range(len(starts) + 1)
    )
    return Plan(stream, watermark, rows, live, size, parts, one_priority=lowest == highest)
