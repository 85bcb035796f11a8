"""Every SQL statement of the queue manager, in one place.

Statements are SQLAlchemy Core, written once; the dialects differ only where a
database has a faster native path, and those differences live here too:

* claiming: ``FOR UPDATE SKIP LOCKED`` inside a materialised CTE on PostgreSQL
  (competing getters never wait for each other, and the planner cannot re-run
  the LIMIT); the same statement without the lock clause on SQLite, where
  ``BEGIN IMMEDIATE`` already makes the unit of work the only writer;
* bulk puts: binary ``COPY`` on PostgreSQL (:func:`copy_rows`), the compiled
  INSERT run with positional rows on SQLite; both skip SQLAlchemy's per-row
  parameter processing, which costs half the throughput of a 1,000-message put;
* depth counters: one ``UPDATE ... FROM unnest(...)`` for several queues on
  PostgreSQL, one statement per queue on SQLite (:func:`apply_depth`);
* wake-ups: ``pg_notify`` on PostgreSQL (SQLite has no equivalent; see
  ``queues.waiting``);
* write-only units of work: one exchange with the server for their statements and the
  COMMIT on PostgreSQL (psycopg's pipeline mode, :func:`committed_together`); SQLite is
  in-process, where a round trip costs nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    Insert,
    Integer,
    LargeBinary,
    Row,
    SmallInteger,
    String,
    Table,
    and_,
    any_,
    bindparam,
    case,
    column,
    delete,
    func,
    insert,
    literal,
    literal_column,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.types import ARRAY

from queues.arrays import Keys, array
from queues.bulk import insert_mappings
from queues.schema import MESSAGE_COLUMNS, claim_turns, messages, opens, qmgr, queues

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


def select_queues(
    conn: Connection, pattern: str = "*", *, offset: int = 0, limit: int | None = None
) -> list[Row[Any]]:
    """Queues whose names match ``pattern``, by name; the page is cut in SQL, so a page of 50
    costs one index range, not a read of every queue."""
    stmt = select(queues).order_by(queues.c.name).offset(offset).limit(limit)
    return list(conn.execute(_matching(conn, stmt, pattern)))


def select_temporary_queues(conn: Connection) -> list[str]:
    """The names of the temporary dynamic queues: the database picks them out of every queue
    (thousands of MQTT session queues), not the process."""
    stmt = select(queues.c.name).where(queues.c.definition_type == "tempdyn").order_by(queues.c.name)
    return list(conn.execute(stmt).scalars())


def count_queues(conn: Connection, pattern: str = "*") -> int:
    stmt = select(func.count()).select_from(queues)
    return int(conn.execute(_matching(conn, stmt, pattern)).scalar_one())


def _matching(conn: Connection, stmt: Any, pattern: str) -> Any:
    """``stmt`` narrowed to the names ``pattern`` matches: ``*`` any run, ``?`` one character,
    case-sensitive on both databases (SQLite's GLOB has exactly these wildcards and no others a
    queue name can hold; PostgreSQL's LIKE gets the literal ``%`` and ``_`` escaped)."""
    if pattern == "*":
        return stmt
    if conn.dialect.name == "sqlite":
        return stmt.where(queues.c.name.op("GLOB")(pattern))
    like = like_literal(pattern).replace("*", "%").replace("?", "_")
    return stmt.where(queues.c.name.like(like, escape="\\"))


def select_deepest_queues(conn: Connection, limit: int) -> list[Row[Any]]:
    """The ``limit`` non-empty queues holding the most messages (ties by name), read from the
    depth counters: one pass over the queue table, none over the messages."""
    deepest = select(queues).where(queues.c.depth > 0).order_by(queues.c.depth.desc(), queues.c.name)
    return list(conn.execute(deepest.limit(limit)))


def select_nonempty_names(conn: Connection, prefix: str) -> list[str]:
    """The names beginning with ``prefix`` of the queues holding messages: a range of the
    primary key (LIKE would not use it on SQLite), read from the depth counters."""
    upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    names = select(queues.c.name).where(queues.c.name >= prefix, queues.c.name < upper, queues.c.depth > 0)
    return list(conn.execute(names).scalars())


def like_literal(text: str) -> str:
    """``text`` as a LIKE pattern (escape ``\\``) that matches only itself."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def like_prefix(prefix: str) -> str:
    """A LIKE pattern (escape ``\\``) for the strings starting with ``prefix``."""
    return like_literal(prefix) + "%"


def select_queue_page(
    conn: Connection, *, after: str, prefix: str, limit: int, descending: bool = False
) -> list[Row[Any]]:
    """Up to ``limit`` queues by name after ``after`` (before it, ``descending``; "" for the
    first page) whose names start with ``prefix``, each with ``head_put_at``: when the message
    a get would take next was put (None when empty).

    Keyset order on the primary key, and the head is the first entry of the claim index
    (queue, priority desc, id), so a page costs the same with 100,000 queues as with ten and
    whatever the queues hold."""
    head = (
        select(messages.c.put_at)
        .where(messages.c.queue == queues.c.name)
        .order_by(messages.c.priority.desc(), messages.c.id)
        .limit(1)
        .scalar_subquery()
        .label("head_put_at")
    )
    name = queues.c.name
    stmt = select(queues, head).order_by(name.desc() if descending else name).limit(limit)
    if after:
        stmt = stmt.where(name < after if descending else name > after)
    if prefix:
        stmt = stmt.where(queues.c.name >= prefix, queues.c.name.like(like_prefix(prefix), escape="\\"))
    return list(conn.execute(stmt))


# The lengths an IN list is padded to (see ``padded``); past the last, multiples of it.
IN_LIST_LENGTHS = (1, 4, 16, 64, 256, 1024)


def padded(values: Iterable[Any]) -> list[Any]:
    """``values`` for an ``IN`` list, the last repeated up to one of ``IN_LIST_LENGTHS``. Each
    length is a statement text of its own, which every connection prepares and keeps (SQLite's
    statement cache, PostgreSQL's prepared statements): lists of every length from 1 to a
    thousand grew a process by tens of megabytes; a few lengths keep a few statements."""
    items = list(values)
    if not items:
        return items
    step = IN_LIST_LENGTHS[-1]
    length = next((n for n in IN_LIST_LENGTHS if n >= len(items)), -(-len(items) // step) * step)
    return items + [items[-1]] * (length - len(items))


def among(conn: Connection, key: ColumnElement[Any], values: Iterable[Any]) -> ColumnElement[bool]:
    """``key IN values``, in one statement text whatever their number. On PostgreSQL
    ``key = ANY`` of one array parameter: an IN list of 150 keys costs SQLAlchemy and
    psycopg twice the time of the statement to expand and parse again, and a padded one of
    more than about 200 is too long for psycopg's cache of parsed statements. Elsewhere an IN
    list, padded (:func:`padded`)."""
    if conn.dialect.name == "postgresql":
        return key == any_(bindparam(None, list(values), type_=Keys(key.type)))
    return key.in_(padded(values))


# Definitions looked up in chunks of at most this many names: the statements are compiled
# once per chunk size, and every put and batch runs one. On PostgreSQL more names than that
# go as one array (a wave of sessions opening: one query, not one per chunk).
DEFINITION_CHUNK = 16
QUEUE_COLUMNS = tuple(c.name for c in queues.columns)


def select_definitions(conn: Connection, names: Iterable[str]) -> list[dict[str, Any]]:
    """The rows of the named queues as column -> value mappings (unknown names are absent),
    through the driver's cursor: SQLAlchemy's statement building and result rows cost
    more than the lookup itself on the put path."""
    wanted = sorted(names)
    if len(wanted) > DEFINITION_CHUNK and conn.dialect.name == "postgresql":
        compiled = _compiled(conn.dialect, "definitions", _all_definitions_statement)
        return _definition_rows(_fetch(conn, compiled, {"names": wanted}))
    found = []
    for start in range(0, len(wanted), DEFINITION_CHUNK):
        chunk = wanted[start : start + DEFINITION_CHUNK]
        compiled = _compiled(conn.dialect, ("definitions", len(chunk)), _definitions_statement, len(chunk))
        params = {f"n{i}": name for i, name in enumerate(chunk)}
        found += _definition_rows(_fetch(conn, compiled, params))
    return found


def _definition_rows(rows: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    return [dict(zip(QUEUE_COLUMNS, row, strict=True)) for row in rows]


def _definitions_statement(count: int) -> Any:
    return select(queues).where(queues.c.name.in_([bindparam(f"n{i}") for i in range(count)]))


def _all_definitions_statement() -> Any:
    return select(queues).where(queues.c.name == any_(bindparam("names", type_=ARRAY(queues.c.name.type))))


def select_queue(conn: Connection, name: str) -> Row[Any] | None:
    return conn.execute(select(queues).where(queues.c.name == name)).first()


def insert_queue(conn: Connection, values: Mapping[str, Any]) -> None:
    conn.execute(insert(queues).values(**values))


def insert_queue_if_new(conn: Connection, values: Mapping[str, Any]) -> None:
    """Define the queue unless one of that name exists (which is left as it is)."""
    conn.execute(insert_new(conn, queues, ("name",)).values(**values))


def insert_queues_if_new(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    """Define each queue unless one of its name exists: one statement for them all."""
    insert_mappings(conn, queues, rows, unless=("name",))


def update_queue(conn: Connection, name: str, values: Mapping[str, Any]) -> int:
    return conn.execute(update(queues).where(queues.c.name == name).values(**values)).rowcount


def reindex_correl(conn: Connection, name: str, indexed: bool) -> None:
    """After INDXTYPE changes: give the queue's messages their index key, or take it away."""
    key = messages.c.correl_id if indexed else None
    conn.execute(update(messages).where(messages.c.queue == name).values(correl_key=key))


def delete_queue(conn: Connection, name: str) -> int:
    """Delete the definition, whatever the queue holds (the caller purged it)."""
    return conn.execute(delete(queues).where(queues.c.name == name)).rowcount


def delete_queues(conn: Connection, names: Sequence[str]) -> int:
    """Delete the definitions (the caller purged the queues)."""
    return conn.execute(delete(queues).where(among(conn, queues.c.name, names))).rowcount


def delete_empty_queue(conn: Connection, name: str) -> int:
    """Delete the definition only if the queue holds nothing (MQ refuses otherwise)."""
    stmt = delete(queues).where(queues.c.name == name, queues.c.depth == 0)
    return conn.execute(stmt).rowcount


def replace_opens(conn: Connection, owner: str, rows: Sequence[Mapping[str, Any]]) -> None:
    """``owner``'s opens become exactly ``rows`` (each with its ``until``)."""
    conn.execute(delete(opens).where(opens.c.owner == owner))
    if rows:
        conn.execute(insert(opens), [{**row, "owner": owner} for row in rows])


def delete_opens(conn: Connection, owner: str) -> None:
    conn.execute(delete(opens).where(opens.c.owner == owner))


def delete_opens_of(conn: Connection, queue: str) -> None:
    """The lapsed records of a queue that is being deleted."""
    conn.execute(delete(opens).where(opens.c.queue == queue))


def select_opens_of(conn: Connection, names: Sequence[str]) -> list[Row[Any]]:
    return list(conn.execute(select(opens).where(among(conn, opens.c.queue, names))))


def select_opens(conn: Connection, queue: str) -> list[Row[Any]]:
    return list(conn.execute(select(opens).where(opens.c.queue == queue).order_by(opens.c.owner)))


_index_type = bindparam("index_type", type_=String(8))


def _returning(stmt: Any, notify: bool) -> Any:
    """RETURNING says which queues took their change (a deleted queue has no row to
    return). With ``notify`` every changed row also raises the arrival notification:
    PostgreSQL delivers identical notifications of one transaction once, so the depth
    change carries the wake-up and the put or batch saves a round trip."""
    if notify:
        return stmt.returning(queues.c.name, func.pg_notify(bindparam("channel"), bindparam("payload")))
    return stmt.returning(queues.c.name)


def _counted(d: Any, p: Any, g: Any) -> dict[str, Any]:
    """The new depth and the put and get counters: one row update carries all three, so the
    counters cost no statement of their own."""
    return {
        "depth": queues.c.depth + d,
        "put_count": queues.c.put_count + p,
        "get_count": queues.c.get_count + g,
    }


def _change_depth(notify: bool) -> Any:
    """One statement for growth and shrinkage: growth only within MAXDEPTH and only if the
    queue's INDXTYPE is still the one the rows were written for. A change that leaves the
    depth as it was (as many gets as puts) only counts them."""
    stmt = (
        update(queues)
        .where(
            queues.c.name == bindparam("q"),
            or_(
                bindparam("d") <= 0,
                and_(
                    queues.c.depth + bindparam("d") <= queues.c.max_depth,
                    or_(_index_type.is_(None), queues.c.index_type == _index_type),
                ),
            ),
        )
        .values(_counted(bindparam("d"), bindparam("p"), bindparam("g")))
    )
    return _returning(stmt, notify)


def _change_depths(notify: bool) -> Any:
    """PostgreSQL: the same change for many queues in one statement. The CTE locks the
    rows in name order, and every row is locked by it before it is updated (an updated row
    must pass the IN, which reads the CTE at least up to that name), so concurrent units of
    work never deadlock on them. One statement costs less than psycopg's pipeline of one
    per queue (1.2 ms against 1.7 ms for ten queues, ``docs/performance.md``)."""
    names = bindparam("names", type_=ARRAY(String))
    locked = (
        select(queues.c.name)
        .where(queues.c.name == func.any(names))
        .order_by(queues.c.name)
        .with_for_update()
        .cte("locked")
        .prefix_with("MATERIALIZED", dialect="postgresql")
    )
    change = (
        func.unnest(
            names,
            bindparam("deltas", type_=ARRAY(Integer)),
            bindparam("puts", type_=ARRAY(Integer)),
            bindparam("gets", type_=ARRAY(Integer)),
            bindparam("types", type_=ARRAY(String)),
        )
        .table_valued(
            column("q", String),
            column("d", Integer),
            column("p", Integer),
            column("g", Integer),
            column("index_type", String),
        )
        .render_derived(name="change", with_types=False)
    )
    stmt = (
        update(queues)
        .where(
            queues.c.name == change.c.q,
            queues.c.name.in_(select(locked.c.name)),
            or_(
                change.c.d <= 0,
                and_(
                    queues.c.depth + change.c.d <= queues.c.max_depth,
                    or_(change.c.index_type.is_(None), queues.c.index_type == change.c.index_type),
                ),
            ),
        )
        .values(_counted(change.c.d, change.c.p, change.c.g))
    )
    return _returning(stmt, notify)


def apply_depth(
    conn: Connection,
    deltas: Mapping[str, int],
    index_types: Mapping[str, str] | None = None,
    arrivals: Collection[str] = (),
    puts: Mapping[str, int] | None = None,
    gets: Mapping[str, int] | None = None,
) -> list[str]:
    """Apply net depth changes and add ``puts`` and ``gets`` to the queues' counters, in
    name order so that concurrent units of work never deadlock on queue rows, and announce
    ``arrivals`` (:func:`notify_arrivals`). Returns the queues that refused growth (deleted,
    full since this unit of work looked, or re-indexed: ``index_types`` are the INDXTYPEs
    the rows were written for).

    PostgreSQL changes several queues in one statement (one round trip for a
    publication's ten subscriber queues rather than ten), which also carries the
    notification when every arrival has a depth change to carry it; SQLite is
    in-process, where a loop costs nothing extra.
    """
    types, puts, gets = index_types or {}, puts or {}, gets or {}
    params: list[dict[str, Any]] = [
        {"q": name, "d": delta, "p": puts.get(name, 0), "g": gets.get(name, 0), "index_type": types.get(name)}
        for name in sorted(deltas.keys() | puts.keys() | gets.keys())
        if (delta := deltas.get(name, 0)) or puts.get(name) or gets.get(name)
    ]
    postgresql = conn.dialect.name == "postgresql"
    carried = postgresql and bool(arrivals) and _carries(params, arrivals)
    if not carried:
        notify_arrivals(conn, arrivals)
    if not params:
        return []
    notice = {"channel": NOTIFY_CHANNEL, "payload": ",".join(sorted(arrivals))} if carried else {}
    if postgresql and len(params) > 1:
        together = {
            "names": [p["q"] for p in params],
            "deltas": [p["d"] for p in params],
            "puts": [p["p"] for p in params],
            "gets": [p["g"] for p in params],
            "types": [p["index_type"] for p in params],
            **notice,
        }
        compiled = _compiled(conn.dialect, ("change_depths", carried), _change_depths, carried)
        rows = _fetch(conn, compiled, together)
    else:
        compiled = _compiled(conn.dialect, ("change_depth", carried), _change_depth, carried)
        rows = [row for p in params for row in _fetch(conn, compiled, {**p, **notice})]
    changed = {row[0] for row in rows}
    return [p["q"] for p in params if p["d"] > 0 and p["q"] not in changed]


def _carries(params: list[dict[str, Any]], arrivals: Collection[str]) -> bool:
    """Whether the depth statement can raise the arrival notification: one payload, and
    a changed row for every queue named (every queue put to has its counter changed)."""
    changed = {p["q"] for p in params}
    return len(arrivals) <= NOTIFY_NAMES and all(name in changed for name in arrivals)


@contextmanager
def committed_together(conn: Connection) -> Iterator[None]:
    """Send BEGIN, the statements the block executes through the driver, then COMMIT, in one
    exchange with a PostgreSQL server: psycopg's pipeline mode queues each and reads every
    result at the end. A unit of work that only writes then costs one round trip (and one
    wake-up of its server process) instead of one each for BEGIN, every statement and COMMIT:
    on a loaded machine each is a scheduling delay, not just a network hop. Nothing may read
    a result inside the block (it would come back empty before the end), hence the driver's
    cursors only, never SQLAlchemy's. A statement that fails aborts the rest, the COMMIT
    included, and raises at the end, the transaction rolled back.

    The connection must not be in a transaction yet (:func:`can_commit_together`). It is in
    autocommit mode for the block, with BEGIN sent as a statement: psycopg's own BEGIN waits
    for its answer in a pipeline."""
    driver = conn.connection.driver_connection
    assert driver is not None and can_commit_together(conn)
    driver.autocommit = True
    try:
        with driver.pipeline(), driver.cursor() as cursor:
            cursor.execute("BEGIN")
            yield
            cursor.execute("COMMIT")
    except BaseException:
        if not driver.closed:
            with suppress(Exception):  # a lost connection: what the caller hears is the first error
                driver.rollback()
        raise
    finally:
        if not driver.closed and driver.info.transaction_status.name == "IDLE":
            driver.autocommit = False


def can_commit_together(conn: Connection) -> bool:
    """Whether :func:`committed_together` can take ``conn``: PostgreSQL's, no transaction open."""
    if conn.dialect.name != "postgresql":
        return False
    driver = conn.connection.driver_connection
    return driver is not None and driver.info.transaction_status.name == "IDLE"


# --- messages --------------------------------------------------------------------------------


# Messages a SQLite router has claimed (see "claims" below) are invisible to other getters.
_unclaimed = messages.c.claimed_by.is_(None)


def _live(now: Any) -> Any:
    return or_(messages.c.expires_at.is_(None), messages.c.expires_at > now)


def insert_messages(conn: Connection, rows: Sequence[tuple[Any, ...]]) -> None:
    """Insert message rows (values in ``MESSAGE_COLUMNS`` order) in one statement.

    PostgreSQL: one row as a plain INSERT, more with a binary COPY, which beats a
    pipelined INSERT per row from two rows up (10 rows: 1.0 ms against 1.7 ms,
    ``docs/performance.md``)."""
    if not rows:
        return
    if conn.dialect.name != "postgresql":
        conn.exec_driver_sql(_insert_sql(conn), list(rows))
    elif len(rows) > 1:
        copy_rows(conn, messages, MESSAGE_COLUMNS, rows)
    else:
        driver = conn.connection.driver_connection
        assert driver is not None
        with driver.cursor() as cursor:
            cursor.execute(_insert_sql(conn), dict(zip(MESSAGE_COLUMNS, rows[0], strict=True)))


def _insert_sql(conn: Connection) -> str:
    return str(_compiled(conn.dialect, "insert_messages", _insert_statement))


def _insert_statement() -> Any:
    return insert(messages).values({name: bindparam(name) for name in MESSAGE_COLUMNS})


def insert_new(conn: Connection, table: Table, key: tuple[str, ...]) -> Insert:
    """An INSERT that leaves an existing row with the same ``key`` alone."""
    if conn.dialect.name == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing(index_elements=list(key))
    return sqlite.insert(table).on_conflict_do_nothing(index_elements=list(key))


def copy_rows(conn: Connection, table: Table, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Bulk-load ``rows`` (values in ``columns`` order) on PostgreSQL with a binary ``COPY``.

    The text format would send every bytea as hex and every integer as digits, both
    built and parsed again per value; in binary the bodies go as they are (8% more
    routing throughput on the route benchmark, ``docs/performance.md``)."""
    driver = conn.connection.driver_connection
    assert driver is not None
    statement, types = _copy_plan(table, tuple(columns))
    with driver.cursor() as cursor, cursor.copy(statement) as copy:
        copy.set_types(types)
        for row in rows:
            copy.write_row(row)


_COPY_PLANS: dict[tuple[str, tuple[str, ...]], tuple[str, list[str]]] = {}
# SQLAlchemy column types -> the PostgreSQL type the binary COPY sends (subclasses first).
_PG_TYPES: tuple[tuple[type, str], ...] = (
    (BigInteger, "int8"),
    (SmallInteger, "int2"),
    (Integer, "int4"),
    (LargeBinary, "bytea"),
    (String, "text"),
)


def _copy_plan(table: Table, columns: tuple[str, ...]) -> tuple[str, list[str]]:
    key = (table.name, columns)
    plan = _COPY_PLANS.get(key)
    if plan is None:
        statement = f"COPY {table.name} ({', '.join(columns)}) FROM STDIN (FORMAT BINARY)"
        plan = _COPY_PLANS[key] = (statement, [_pg_type(table.c[name].type) for name in columns])
    return plan


def _pg_type(column_type: Any) -> str:
    for sa_type, name in _PG_TYPES:
        if isinstance(column_type, sa_type):
            return name
    raise TypeError(f"no binary COPY type for {column_type!r}")


# --- claim turns (PostgreSQL) ----------------------------------------------------------------
# Routers that claim batches of one queue concurrently commit them in claim order: each claim
# that takes messages draws a turn while claims are serialised, holds the turn's lock until it
# ends, and waits for the previous turn's lock before it writes (``UnitOfWork.get_batch(...,
# in_turn=True)``). Advisory locks of class TURN_LOCK_CLASS: key 0 serialises the claims, key
# n > 0 is held by the unit of work of turn n. SQLite has one writer, so all of this is moot there.
# A unit of work that takes turns gives itself an idle limit (idle_in_transaction_session_timeout)
# with the lock that serialises its claim: one whose client stops sending (a stopped or hung
# process) is ended by the server once the limit passes, its locks with it, so that the turns
# behind it go on; it never committed, so nothing it did is kept.

TURN_LOCK_CLASS = 0x4D515455  # "MQTU"
_TURN_CLASS = literal(TURN_LOCK_CLASS, Integer)
_LAST_TURN = 2147483646  # the sequence's MAXVALUE (migration 0010); turn 1 follows it


def lock_claims(conn: Connection, idle_ms: int) -> None:
    """Serialise claims with other turn-taking claims (a session lock: released by
    :func:`take_turn` or :func:`unlock_claims`, or by closing the connection), and have the
    server end this transaction if it stays idle for ``idle_ms`` (see above)."""
    if conn.dialect.name == "postgresql":
        fetch_cached(conn, "lock_claims", _lock_claims_statement, {"idle": str(idle_ms)})


def _lock_claims_statement() -> Any:
    return select(
        func.set_config("idle_in_transaction_session_timeout", bindparam("idle", type_=String), True),
        func.pg_advisory_lock(_TURN_CLASS, 0),
    )


def ping(conn: Connection) -> None:
    """A statement that does nothing, to show the server this transaction is not idle."""
    fetch_cached(conn, "ping", lambda: select(literal(1, Integer)))


def unlock_claims(conn: Connection) -> None:
    if conn.dialect.name == "postgresql":
        fetch_cached(conn, "unlock_claims", lambda: select(func.pg_advisory_unlock(_TURN_CLASS, 0)))


def take_turn(conn: Connection) -> int | None:
    """Draw this transaction's turn and hold its lock until the transaction ends, then let
    the next claim in; in one round trip. Returns the turn while the previous one is still
    running (the caller must :func:`await_turn` before it writes), 0 when the previous turn
    has already ended (the usual case for a router alone), None on SQLite."""
    if conn.dialect.name != "postgresql":
        return None
    ((turn, _, _, ready),) = fetch_cached(conn, "take_turn", _take_turn_statement)
    return 0 if ready else int(turn)


def _take_turn_statement() -> Any:
    drawn = select(claim_turns.next_value().cast(Integer).label("turn")).subquery("drawn")
    previous = case((drawn.c.turn > 1, drawn.c.turn - 1), else_=literal(_LAST_TURN, Integer))
    return select(
        drawn.c.turn,
        func.pg_advisory_xact_lock(_TURN_CLASS, drawn.c.turn),
        func.pg_advisory_unlock(_TURN_CLASS, 0),
        func.pg_try_advisory_xact_lock_shared(_TURN_CLASS, previous),
    )


def await_turn(conn: Connection, turn: int) -> None:
    """Wait until the transaction holding the previous turn has ended (at once if it has)."""
    fetch_cached(
        conn,
        "await_turn",
        lambda: select(func.pg_advisory_xact_lock_shared(_TURN_CLASS, bindparam("previous", type_=Integer))),
        {"previous": previous_turn(turn)},
    )


# A turn's owner that stops inside a statement (its process stopped in the middle of a COPY,
# or of a message larger than the socket buffer) is not idle in its transaction: the server
# waits for the rest of the statement's input with no limit. The unit of work waiting for that
# turn ends such an owner itself once it has shown no progress for the turn timeout
# (``queues.turn_watch``); these two statements are how it looks and how it ends it.

_STALLED_HOLDER = text(
    "SELECT a.pid, a.state_change, p.bytes_processed"
    " FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
    " LEFT JOIN pg_stat_progress_copy p ON p.pid = a.pid"
    " WHERE l.locktype = 'advisory' AND l.classid = :class AND l.objid = :turn AND l.objsubid = 2"
    " AND l.granted AND l.mode = 'ExclusiveLock' AND a.state = 'active' AND a.wait_event = 'ClientRead'"
)


def turn_holder_reading(conn: Connection, turn: int) -> tuple[Any, ...] | None:
    """The backend holding the lock of the turn before ``turn`` when it is waiting for its
    client in the middle of a statement, with what shows its progress (pid, when its
    statement began, bytes of COPY received); None when no backend holding it is."""
    row = conn.execute(_STALLED_HOLDER, {"class": TURN_LOCK_CLASS, "turn": previous_turn(turn)}).first()
    return tuple(row) if row else None


def end_backend(conn: Connection, pid: int) -> bool:
    """End a stalled turn owner's session: its transaction rolls back and its locks go."""
    return bool(conn.execute(select(func.pg_terminate_backend(pid))).scalar_one())


def previous_turn(turn: int) -> int:
    return turn - 1 if turn > 1 else _LAST_TURN


def _claim_statement(by_msg_id: bool, by_correl_id: bool, indexed: bool, skip: Collection[int] = ()) -> Any:
    """The claim for one filter (compiled once per dialect by :func:`_compiled`: it runs
    for every batch). On a queue with INDXTYPE(CORRELID) a get by CorrelId asks for
    ``correl_key``, which only that queue's rows carry, so the partial index serves it."""
    conditions = [messages.c.queue == bindparam("queue"), _live(bindparam("now")), *_claimable(skip)]
    if by_msg_id:
        conditions.append(messages.c.msg_id == bindparam("msg_id"))
    if by_correl_id:
        correl = messages.c.correl_key if indexed else messages.c.correl_id
        conditions.append(correl == bindparam("correl_id"))
    chosen = (
        select(messages.c.id)
        .where(and_(*conditions))
        .order_by(messages.c.priority.desc(), messages.c.id)
        .limit(bindparam("limit"))
        .with_for_update(skip_locked=True)
        .cte("claimed")
        .prefix_with("MATERIALIZED", dialect="postgresql")
    )
    return delete(messages).where(messages.c.id.in_(select(chosen.c.id))).returning(*messages.c)


def claim_messages(
    conn: Connection,
    queue: str,
    limit: int,
    now: int,
    *,
    msg_id: bytes | None = None,
    correl_id: bytes | None = None,
    correl_indexed: bool = False,
    skip: Collection[int] = (),
) -> list[tuple[Any, ...]]:
    """Remove and return up to ``limit`` live messages in priority-then-FIFO order,
    as tuples in table column order, passing over the messages whose ids are in ``skip``.

    The removal belongs to the caller's transaction: rolling it back puts the
    messages back exactly where they were. The compiled statement runs on the
    driver's cursor directly: building SQLAlchemy rows for 1,000 messages would
    cost more than the database does to delete them.
    """
    filters = (msg_id is not None, correl_id is not None, correl_indexed)
    params = {"queue": queue, "now": now, "limit": limit, "msg_id": msg_id, "correl_id": correl_id}
    rows = _fetch_skipping(conn, ("claim", *filters), _claim_statement, params, skip, *filters)
    # RETURNING order is not the claim order on every database.
    rows.sort(key=_get_order)
    return rows


def _get_order(row: tuple[Any, ...]) -> tuple[int, int]:
    return (-row[PRIORITY], row[ID])


_STATEMENTS: dict[tuple[str, Hashable], Any] = {}


def _compiled(dialect: Any, name: Hashable, build: Any, *args: Any) -> Any:
    """``build(*args)`` compiled for ``dialect``, built and compiled only the first time."""
    key = (dialect.name, name)
    compiled = _STATEMENTS.get(key)
    if compiled is None:
        compiled = _STATEMENTS[key] = build(*args).compile(dialect=dialect)
    return compiled


def _fetch_skipping(
    conn: Connection, name: Hashable, build: Any, params: dict[str, Any], skip: Collection[int], *args: Any
) -> list[tuple[Any, ...]]:
    """The rows of a claim that passes over the messages whose ids are in ``skip``: compiled
    once when it passes over none, as every batch's claim does, built afresh when it does
    (a router's set-aside messages, rare)."""
    if not skip:
        return _fetch(conn, _compiled(conn.dialect, name, build, *args), params)
    return _fetch(conn, build(*args, skip=skip).compile(dialect=conn.dialect), params)


def _claimable(skip: Collection[int]) -> list[Any]:
    """What a claim may take: unclaimed messages, none of those whose ids are in ``skip``
    (written into the statement: they are integers, and it is not reused)."""
    if not skip:
        return [_unclaimed]
    return [_unclaimed, messages.c.id.not_in([literal_column(str(int(i))) for i in sorted(skip)])]


def fetch_cached(
    conn: Connection, name: Hashable, build: Any, params: dict[str, Any] | None = None
) -> list[tuple[Any, ...]]:
    """The rows of ``build()``'s statement, compiled once per dialect and run on the
    driver's cursor: for the statements other packages run in every batch, where
    SQLAlchemy's statement building costs more than the database's answer."""
    return _fetch(conn, _compiled(conn.dialect, name, build), params or {})


def fetch_outside_transaction(
    conn: Connection, name: Hashable, build: Any, params: dict[str, Any] | None = None
) -> list[tuple[Any, ...]]:
    """:func:`fetch_cached` on an idle PostgreSQL connection in autocommit mode: one exchange
    with the server, where a transaction's BEGIN, the read and its ROLLBACK are three. For a
    read that needs no other read to agree with it, asked often (the state's version, before
    every batch of the MQTT gateway)."""
    driver = conn.connection.driver_connection
    assert driver is not None and can_commit_together(conn)
    driver.autocommit = True
    try:
        return fetch_cached(conn, name, build, params)
    except BaseException:
        if driver.broken:  # the server dropped it: the pool must not try to reset it
            conn.invalidate()
        raise
    finally:
        if not driver.closed and not driver.broken:
            driver.autocommit = False


def execute_cached(conn: Connection, name: Hashable, build: Any, params: dict[str, Any]) -> None:
    """Run ``build()``'s statement as :func:`fetch_cached` does, reading nothing back: it may
    go in a pipeline (:func:`committed_together`), where an error it raises aborts the rest."""
    compiled = _compiled(conn.dialect, name, build)
    driver = conn.connection.driver_connection
    assert driver is not None
    cursor = driver.cursor()
    try:
        cursor.execute(compiled.string, _arguments(compiled, params))
    finally:
        cursor.close()


def _arguments(compiled: Any, params: dict[str, Any]) -> Any:
    values = compiled.construct_params(params)
    if compiled.dialect.name == "postgresql":  # SQLAlchemy's processors are not run here
        values = {name: array(value) if type(value) is list else value for name, value in values.items()}
    if compiled.positiontup is not None:
        return tuple(values[name] for name in compiled.positiontup)
    return values


def _fetch(conn: Connection, compiled: Any, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    arguments = _arguments(compiled, params)
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
        _unclaimed,
    )
    return conn.execute(stmt).rowcount


# --- claims (SQLite) ------------------------------------------------------------------------
# A SQLite router marks its batch in one short transaction and removes it, with every effect,
# in a second one (``queues.claims``); between the two it routes holding no lock. Other
# getters skip marked rows, as PostgreSQL's SKIP LOCKED skips a router's locked ones.


def mark_claims(
    conn: Connection, queue: str, limit: int, now: int, owner: str, turn: int, skip: Collection[int] = ()
) -> list[tuple[Any, ...]]:
    """Mark up to ``limit`` live, unclaimed messages of ``queue`` in get order, passing over
    those whose ids are in ``skip``, as ``owner``'s claim of ``turn``; returns them as tuples
    in table column order, in get order."""
    params = {"queue": queue, "now": now, "limit": limit, "owner": owner, "turn": turn}
    rows = _fetch_skipping(conn, "mark_claims", _mark_statement, params, skip)
    rows.sort(key=_get_order)
    return rows


def _mark_statement(skip: Collection[int] = ()) -> Any:
    chosen = (
        select(messages.c.id)
        .where(messages.c.queue == bindparam("queue"), _live(bindparam("now")), *_claimable(skip))
        .order_by(messages.c.priority.desc(), messages.c.id)
        .limit(bindparam("limit"))
    )
    return (
        update(messages)
        .where(messages.c.id.in_(chosen.scalar_subquery()))
        .values(claimed_by=bindparam("owner"), claim_turn=bindparam("turn"))
        .returning(*messages.c)
    )


def claimants(conn: Connection, queue: str) -> list[tuple[str, int, int]]:
    """(owner, lowest turn, highest turn) of every owner holding claims on ``queue``."""
    rows = fetch_cached(conn, "claimants", _claimants_statement, {"queue": queue})
    return [(str(owner), int(low), int(high)) for owner, low, high in rows]


def _claimants_statement() -> Any:
    return (
        select(messages.c.claimed_by, func.min(messages.c.claim_turn), func.max(messages.c.claim_turn))
        .where(messages.c.queue == bindparam("queue"), messages.c.claimed_by.isnot(None))
        .group_by(messages.c.claimed_by)
    )


def release_claims(conn: Connection, queue: str, owner: str, turn: int | None = None) -> int:
    """Unmark ``owner``'s claims on ``queue`` (only those of ``turn``, if given)."""
    conditions = [messages.c.queue == queue, messages.c.claimed_by == owner]
    if turn is not None:
        conditions.append(messages.c.claim_turn == turn)
    stmt = update(messages).where(*conditions).values(claimed_by=None, claim_turn=None)
    return conn.execute(stmt).rowcount


def consume_claims(conn: Connection, queue: str, owner: str, turn: int) -> int:
    """Remove ``owner``'s claimed messages of ``turn``; returns how many there still were."""
    compiled = _compiled(conn.dialect, "consume_claims", _consume_statement)
    params = {"queue": queue, "owner": owner, "turn": turn}
    return conn.exec_driver_sql(compiled.string, _arguments(compiled, params)).rowcount


def _consume_statement() -> Any:
    return delete(messages).where(
        messages.c.queue == bindparam("queue"),
        messages.c.claimed_by == bindparam("owner"),
        messages.c.claim_turn == bindparam("turn"),
    )


def browse_messages(
    conn: Connection,
    queue: str,
    after: tuple[int, int] | None,
    limit: int,
    now: int,
    msg_id: bytes | None = None,
) -> list[Row[Any]]:
    """Live messages after the browse cursor ``(priority, id)``, in get order; only those with
    ``msg_id`` when it is given."""
    conditions = [messages.c.queue == queue, _live(now)]
    if msg_id is not None:
        conditions.append(messages.c.msg_id == msg_id)
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
    return list(conn.execute(select(messages).where(among(conn, messages.c.id, ids))))


def increment_backout(conn: Connection, ids: Sequence[int]) -> None:
    conn.execute(
        update(messages)
        .where(among(conn, messages.c.id, ids))
        .values(backout_count=messages.c.backout_count + 1)
    )


def delete_messages_by_id(conn: Connection, ids: Sequence[int]) -> int:
    return conn.execute(delete(messages).where(among(conn, messages.c.id, ids))).rowcount


def purge_queue(conn: Connection, queue: str) -> int:
    return conn.execute(delete(messages).where(messages.c.queue == queue)).rowcount


def purge_queues(conn: Connection, names: Sequence[str]) -> int:
    return conn.execute(delete(messages).where(among(conn, messages.c.queue, names))).rowcount


def count_messages(conn: Connection, queue: str, now: int | None = None) -> int:
    stmt = select(func.count()).select_from(messages).where(messages.c.queue == queue)
    if now is not None:
        stmt = stmt.where(_live(now))
    return int(conn.execute(stmt).scalar_one())


def notify_arrivals(conn: Connection, queue_names: Iterable[str]) -> None:
    """Wake PostgreSQL listeners, delivered only if the transaction commits: one
    notification names every queue (comma-separated; MQ names have no commas),
    split only where a payload would pass PostgreSQL's 8,000-byte limit."""
    if conn.dialect.name != "postgresql":
        return
    names = sorted(set(queue_names))
    for start in range(0, len(names), NOTIFY_NAMES):
        payload = ",".join(names[start : start + NOTIFY_NAMES])
        conn.execute(_NOTIFY, {"channel": NOTIFY_CHANNEL, "queues": payload})


_NOTIFY = text("SELECT pg_notify(:channel, :queues)")
# 48-character names and their commas stay well inside the 8,000-byte payload limit.
NOTIFY_NAMES = 150
