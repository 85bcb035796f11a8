"""Every SQL statement of the queue manager, in one place.

Statements are SQLAlchemy Core, written once; the dialects differ only where a
database has a faster native path, and those differences live here too:

* claiming: ``FOR UPDATE SKIP LOCKED`` inside a materialised CTE on PostgreSQL
  (competing getters never wait for each other, and the planner cannot re-run
  the LIMIT); the same statement without the lock clause on SQLite, where
  ``BEGIN IMMEDIATE`` already makes the unit of work the only writer;
* bulk puts: ``COPY`` on PostgreSQL, the compiled INSERT run with positional
  rows on SQLite; both skip SQLAlchemy's per-row parameter processing, which
  costs half the throughput of a 1,000-message put;
* wake-ups: ``pg_notify`` on PostgreSQL (SQLite has no equivalent; see
  ``queues.waiting``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import (
    Connection,
    Row,
    and_,
    bindparam,
    delete,
    func,
    insert,
    or_,
    select,
    text,
    update,
)

from queues.schema import MESSAGE_COLUMNS, messages, qmgr, queues

NOTIFY_CHANNEL = "mq_put"
# Positions in a message row (table column order), for the hot paths that read tuples.
COLUMNS = tuple(c.name for c in messages.columns)
ID, PRIORITY = COLUMNS.index("id"), COLUMNS.index("priority")


# --- queue manager -------------------------------------------------------------------------


def select_qmgr(conn: Connection) -> Row[Any] | None:
    return conn.execute(select(qmgr)).first()


def insert_qmgr(conn: Connection, name: str, now: int, description: str = "") -> None:
    conn.execute(insert(qmgr).values(name=name, created_at=now, description=description))


# --- queue definitions ---------------------------------------------------------------------


def select_queues(conn: Connection, names: Iterable[str] | None = None) -> list[Row[Any]]:
    stmt = select(queues).order_by(queues.c.name)
    if names is not None:
        stmt = stmt.where(queues.c.name.in_(list(names)))
    return list(conn.execute(stmt))


def select_queue(conn: Connection, name: str) -> Row[Any] | None:
    return conn.execute(select(queues).where(queues.c.name == name)).first()


def insert_queue(conn: Connection, values: Mapping[str, Any]) -> None:
    conn.execute(insert(queues).values(**values))


def update_queue(conn: Connection, name: str, values: Mapping[str, Any]) -> int:
    return conn.execute(update(queues).where(queues.c.name == name).values(**values)).rowcount


def delete_empty_queue(conn: Connection, name: str) -> int:
    """Delete the definition only if the queue holds nothing (MQ refuses otherwise)."""
    stmt = delete(queues).where(queues.c.name == name, queues.c.depth == 0)
    return conn.execute(stmt).rowcount


_grow = (
    update(queues)
    .where(
        queues.c.name == bindparam("q"),
        queues.c.depth + bindparam("d") <= queues.c.max_depth,
    )
    .values(depth=queues.c.depth + bindparam("d"))
)
_shrink = update(queues).where(queues.c.name == bindparam("q")).values(depth=queues.c.depth + bindparam("d"))


def apply_depth(conn: Connection, deltas: Mapping[str, int]) -> list[str]:
    """Apply net depth changes, in name order so that concurrent units of work
    never deadlock on queue rows. Returns the queues that refused growth
    (deleted, or full since this unit of work looked)."""
    refused = []
    for name in sorted(deltas):
        delta = deltas[name]
        if delta > 0:
            if conn.execute(_grow, {"q": name, "d": delta}).rowcount != 1:
                refused.append(name)
        elif delta < 0:
            conn.execute(_shrink, {"q": name, "d": delta})
    return refused


# --- messages --------------------------------------------------------------------------------


def _live(now: Any) -> Any:
    return or_(messages.c.expires_at.is_(None), messages.c.expires_at > now)


def insert_messages(conn: Connection, rows: Sequence[tuple[Any, ...]]) -> None:
    """Insert message rows (values in ``MESSAGE_COLUMNS`` order) in one round trip."""
    if not rows:
        return
    if conn.dialect.name == "postgresql":
        _copy_messages(conn, rows)
    else:
        conn.exec_driver_sql(_insert_sql(conn), list(rows))


_COMPILED: dict[str, str] = {}


def _insert_sql(conn: Connection) -> str:
    sql = _COMPILED.get(conn.dialect.name)
    if sql is None:
        stmt = insert(messages).values({name: bindparam(name) for name in MESSAGE_COLUMNS})
        sql = str(stmt.compile(dialect=conn.dialect))
        _COMPILED[conn.dialect.name] = sql
    return sql


_COPY_SQL = f"COPY {messages.name} ({', '.join(MESSAGE_COLUMNS)}) FROM STDIN"


def _copy_messages(conn: Connection, rows: Sequence[tuple[Any, ...]]) -> None:
    driver = conn.connection.driver_connection
    assert driver is not None
    with driver.cursor() as cursor, cursor.copy(_COPY_SQL) as copy:
        for row in rows:
            copy.write_row(row)


_CLAIMS: dict[tuple[str, bool, bool], Any] = {}


def _claim_statement(dialect: Any, by_msg_id: bool, by_correl_id: bool) -> Any:
    """The claim, compiled once per dialect and filter: executed for every batch."""
    key = (dialect.name, by_msg_id, by_correl_id)
    compiled = _CLAIMS.get(key)
    if compiled is None:
        conditions = [messages.c.queue == bindparam("queue"), _live(bindparam("now"))]
        if by_msg_id:
            conditions.append(messages.c.msg_id == bindparam("msg_id"))
        if by_correl_id:
            conditions.append(messages.c.correl_id == bindparam("correl_id"))
        chosen = (
            select(messages.c.id)
            .where(and_(*conditions))
            .order_by(messages.c.priority.desc(), messages.c.id)
            .limit(bindparam("limit"))
            .with_for_update(skip_locked=True)
            .cte("claimed")
            .prefix_with("MATERIALIZED", dialect="postgresql")
        )
        stmt = delete(messages).where(messages.c.id.in_(select(chosen.c.id))).returning(*messages.c)
        compiled = _CLAIMS[key] = stmt.compile(dialect=dialect)
    return compiled


def claim_messages(
    conn: Connection,
    queue: str,
    limit: int,
    now: int,
    *,
    msg_id: bytes | None = None,
    correl_id: bytes | None = None,
) -> list[tuple[Any, ...]]:
    """Remove and return up to ``limit`` live messages in priority-then-FIFO order,
    as tuples in table column order.

    The removal belongs to the caller's transaction: rolling it back puts the
    messages back exactly where they were. The compiled statement runs on the
    driver's cursor directly: building SQLAlchemy rows for 1,000 messages would
    cost more than the database does to delete them.
    """
    compiled = _claim_statement(conn.dialect, msg_id is not None, correl_id is not None)
    params = {"queue": queue, "now": now, "limit": limit, "msg_id": msg_id, "correl_id": correl_id}
    rows = _fetch(conn, compiled, params)
    # RETURNING order is not the claim order on every database.
    rows.sort(key=_get_order)
    return rows


def _get_order(row: tuple[Any, ...]) -> tuple[int, int]:
    return (-row[PRIORITY], row[ID])


def _fetch(conn: Connection, compiled: Any, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    values = compiled.construct_params(params)
    if compiled.positiontup is not None:
        arguments: Any = tuple(values[name] for name in compiled.positiontup)
    else:
        arguments = values
    driver = conn.connection.driver_connection
    assert driver is not None
    cursor = driver.cursor()
    try:
        cursor.execute(compiled.string, arguments)
        return list(cursor.fetchall())
    finally:
        cursor.close()


def delete_expired(conn: Connection, queue: str, now: int) -> int:
    stmt = delete(messages).where(
        messages.c.queue == queue,
        messages.c.expires_at.isnot(None),
        messages.c.expires_at <= now,
    )
    return conn.execute(stmt).rowcount


def browse_messages(
    conn: Connection, queue: str, after: tuple[int, int] | None, limit: int, now: int
) -> list[Row[Any]]:
    """Live messages after the browse cursor ``(priority, id)``, in get order."""
    conditions = [messages.c.queue == queue, _live(now)]
    if after is not None:
        priority, last_id = after
        conditions.append(
            or_(
                messages.c.priority < priority,
                and_(messages.c.priority == priority, messages.c.id > last_id),
            )
        )
    stmt = (
        select(messages)
        .where(and_(*conditions))
        .order_by(messages.c.priority.desc(), messages.c.id)
        .limit(limit)
    )
    return list(conn.execute(stmt))


def select_messages_by_id(conn: Connection, ids: Sequence[int]) -> list[Row[Any]]:
    return list(conn.execute(select(messages).where(messages.c.id.in_(list(ids)))))


def increment_backout(conn: Connection, ids: Sequence[int]) -> None:
    conn.execute(
        update(messages)
        .where(messages.c.id.in_(list(ids)))
        .values(backout_count=messages.c.backout_count + 1)
    )


def delete_messages_by_id(conn: Connection, ids: Sequence[int]) -> int:
    return conn.execute(delete(messages).where(messages.c.id.in_(list(ids)))).rowcount


def purge_queue(conn: Connection, queue: str) -> int:
    return conn.execute(delete(messages).where(messages.c.queue == queue)).rowcount


def count_messages(conn: Connection, queue: str, now: int | None = None) -> int:
    stmt = select(func.count()).select_from(messages).where(messages.c.queue == queue)
    if now is not None:
        stmt = stmt.where(_live(now))
    return int(conn.execute(stmt).scalar_one())


def notify_arrivals(conn: Connection, queue_names: Iterable[str]) -> None:
    """Wake PostgreSQL listeners once per queue; delivered only if the transaction commits."""
    if conn.dialect.name != "postgresql":
        return
    for name in sorted(set(queue_names)):
        conn.execute(text("SELECT pg_notify(:channel, :queue)"), {"channel": NOTIFY_CHANNEL, "queue": name})
