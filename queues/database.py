"""Engines for SQLite and PostgreSQL, configured for a queue manager's needs.

SQLite: one writer at a time, handed from writer to writer by a file lock
(``queues.writer_lock``), and every unit of work starts with ``BEGIN
IMMEDIATE`` (a deferred transaction that later writes gets SQLITE_BUSY at once
instead of waiting), ``busy_timeout`` is set before WAL so that even the switch
to WAL waits politely, and ``synchronous=FULL`` makes a committed put survive
power loss, as a persistent MQ message does. Read-only work (browse, inquire)
asks for ``BEGIN DEFERRED`` so that it never blocks the writer.

PostgreSQL: psycopg 3. A pooled connection that has sat idle for a while is pinged
before it is handed out, and one the driver already knows is broken is replaced, so
that a restarted server costs one failed batch and a reconnect, not a dead process.
A connection in constant use (a router's, a busy publisher's) is not pinged: the
ping is a round trip, one of a dozen in a streaming batch (``docs/performance.md``).
Connections go only to a server that accepts writes, so a URL naming a primary and its
standbys follows a failover (``docs/decisions.md``).
"""

from __future__ import annotations

import sqlite3
import sys
import time
import weakref
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError, DisconnectionError, OperationalError

from queues.companions import companion
from queues.writer_lock import writer_lock

READ_ONLY = "queues_read_only"
# How long one statement waits for a lock before SQLite's own (coarse) backoff gives up;
# taking the write lock is retried finely by _begin_immediate instead.
STATEMENT_BUSY_MS = 5
# A PostgreSQL connection idle this long is pinged at checkout: long enough that a busy
# loop never pays for it, short enough that an idle client finds a restart out at once.
PING_AFTER_IDLE_SECONDS = 1.0
_IDLE_SINCE = "queues_idle_since"


def normalise_url(url: str) -> str:
    """Accept the URLs users type (``postgresql://``, ``postgres://``) and pin psycopg 3.
    A PostgreSQL server is only used while it accepts writes (``target_session_attrs``,
    unless the URL sets it): of a primary and its standbys listed as several hosts, the
    connection goes to the primary, and never to a standby, where every unit of work
    would fail."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() == "postgresql" and "target_session_attrs" not in parsed.query:
        parsed = parsed.update_query_dict({"target_session_attrs": "read-write"})
    return parsed.render_as_string(hide_password=False)


def connect_params(url: str | URL) -> dict[str, Any]:
    """libpq's connection parameters for a PostgreSQL ``url``, as psycopg gets them. Several
    hosts (``?host=h1:p1&host=h2:p2``) become ``host=h1,h2 port=p1,p2``: a URL rendered for
    libpq or JDBC as SQLAlchemy holds it would keep only one of them."""
    text = url if isinstance(url, str) else url.render_as_string(hide_password=False)
    parsed = make_url(normalise_url(text))
    _, params = parsed.get_dialect()().create_connect_args(parsed)
    return dict(params)


def conninfo(url: str | URL) -> str:
    """The libpq connection string of a PostgreSQL ``url``, for a connection of its own
    outside the pool (the arrival listener's)."""
    from psycopg.conninfo import make_conninfo

    return make_conninfo("", **connect_params(url))


def is_sqlite(engine: Engine | Connection) -> bool:
    return engine.dialect.name == "sqlite"


def sqlite_file(url: str) -> str | None:
    """The absolute path of the file a SQLite ``url`` names (which connecting would create);
    None for an in-memory database or another backend."""
    parsed = make_url(url)
    return companion(parsed.database, "") if parsed.get_backend_name() == "sqlite" else None


def make_engine(
    url: str,
    *,
    sqlite_synchronous: str = "FULL",
    busy_timeout_ms: int = 30_000,
    **kwargs: Any,
) -> Engine:
    """An engine for ``url`` with the transaction behaviour the queue manager relies on."""
    url = normalise_url(url)
    if make_url(url).get_backend_name() == "sqlite":
        engine = create_engine(url, **kwargs)
        _configure_sqlite(engine, sqlite_synchronous.upper(), busy_timeout_ms)
        return engine
    kwargs.setdefault("pool_size", 5)
    kwargs.setdefault("max_overflow", 10)
    engine = create_engine(url, **kwargs)
    _ping_when_idle(engine)
    return engine


def _ping_when_idle(engine: Engine) -> None:
    """Pessimistic disconnect handling that costs nothing on a busy connection: a broken
    or long-idle connection raises DisconnectionError at checkout, and the pool replaces
    it with a new one (a server that is down then fails the checkout itself). Once the
    pool has had to drop one connection, every connection checked in before that is
    pinged too: a restarted server broke them all."""
    _suspect_since[engine] = 0.0

    @event.listens_for(engine, "invalidate")
    def _invalidated(*_args: Any) -> None:
        _suspect_since[engine] = time.monotonic()

    @event.listens_for(engine, "checkin")
    def _checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.pop(_IDLE_SINCE, None)
        if idle_since is None and not dbapi_connection.closed:
            return  # a new connection, made to a server that accepts writes (normalise_url)
        problem = _problem(engine, dbapi_connection, idle_since or 0.0)
        if problem:
            raise DisconnectionError(problem)


# When each engine last had a connection invalidated: every connection idle since then is
# suspect (see _ping_when_idle).
_suspect_since: weakref.WeakKeyDictionary[Engine, float] = weakref.WeakKeyDictionary()


def _problem(engine: Engine, dbapi_connection: Any, idle_since: float) -> str | None:
    """Why a connection idle since ``idle_since`` (time.monotonic()) must not be used, or
    None: closed, on a server that no longer accepts writes, or, once it has been idle for
    ``PING_AFTER_IDLE_SECONDS`` or since another connection was found broken, unanswered."""
    if dbapi_connection.closed:
        return "connection closed"
    if _read_only(dbapi_connection):
        return "the server no longer accepts writes"
    recent = time.monotonic() - idle_since < PING_AFTER_IDLE_SECONDS
    if recent and idle_since > _suspect_since.get(engine, 0.0):
        return None
    try:
        engine.dialect.do_ping(dbapi_connection)
    except Exception as exc:
        return f"ping failed: {exc}"
    return None


def held_connection_usable(conn: Connection, idle_since: float) -> bool:
    """Whether ``conn``, held outside the pool and idle since ``idle_since``
    (time.monotonic()), may be used again, judged as the pool judges a connection at
    checkout; one that may not is invalidated (the caller opens another). A server
    restarted while it sat idle broke it without a word: without this, the first batch
    after the restart would fail on it, and fail its clients."""
    if conn.closed or conn.invalidated:
        return False
    if conn.engine not in _suspect_since:  # SQLite: a file does not restart
        return True
    if _problem(conn.engine, conn.connection.dbapi_connection, idle_since) is None:
        return True
    conn.invalidate()
    return False


def _read_only(dbapi_connection: Any) -> bool:
    """Whether the server said it no longer accepts writes: a standby, or a primary fenced
    read-only while a failover manager promotes another. PostgreSQL reports both settings
    whenever they change, so the check costs no round trip."""
    status = dbapi_connection.info.parameter_status
    return "on" in (status("in_hot_standby"), status("default_transaction_read_only"))


def _configure_sqlite(engine: Engine, synchronous: str, busy_timeout_ms: int) -> None:
    if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
        raise ValueError(f"sqlite synchronous must be OFF, NORMAL, FULL or EXTRA, not {synchronous}")

    lock = writer_lock(engine.url.database)
    if lock is not None:
        lock.install(engine)

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from the sqlite3 module: we emit BEGIN ourselves.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={STATEMENT_BUSY_MS}")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA temp_store=MEMORY")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        if connection.get_execution_options().get(READ_ONLY, False):
            connection.exec_driver_sql("BEGIN DEFERRED")
        else:
            if lock is not None:
                lock.acquire(connection.connection.dbapi_connection)
            _begin_immediate(connection, busy_timeout_ms / 1000)


def _begin_immediate(connection: Connection, timeout: float) -> None:
    """Take the write lock, retrying every fraction of a millisecond.

    SQLite's own busy handler sleeps 1, 2, 5, 10... up to 100 ms between tries,
    which under a steady stream of short writers (publishers putting one message
    each) turns a 1 ms wait into 100. Statements keep a short busy timeout of
    their own; waiting for the lock is done here, finely, up to ``timeout``.
    """
    deadline = time.monotonic() + timeout
    pause = 0.0001
    while True:
        try:
            connection.exec_driver_sql("BEGIN IMMEDIATE")
            return
        except OperationalError as exc:
            if "locked" not in str(exc.orig) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.001)


def maintenance_warnings(engine: Engine) -> list[str]:
    """What an operator should change in the database server's settings. PostgreSQL's
    autovacuum keeps the queue table's statistics fresh: without it, a queue that was
    analysed empty and then fills is claimed with a plan that reads every message of the
    queue for each batch (five times slower at 50,000 messages)."""
    if is_sqlite(engine):
        return []
    with engine.connect() as conn:
        autovacuum = conn.exec_driver_sql("SHOW autovacuum").scalar_one()
    if autovacuum == "on":
        return []
    return [
        "autovacuum is off on this PostgreSQL server: the queue table's statistics go stale and claims "
        "slow down as queues fill; turn it on, or run ANALYZE mq_messages regularly"
    ]


_SQLITE_UNAVAILABLE = ("locked", "busy", "disk i/o", "unable to open", "disk is full", "readonly database")


def unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database cannot be reached now (as opposed to a defect).
    Hot paths use the driver's cursor directly, so driver errors arrive unwrapped too."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    error = exc.orig if isinstance(exc, DBAPIError) else exc
    if isinstance(error, sqlite3.OperationalError):
        return any(text in str(error).lower() for text in _SQLITE_UNAVAILABLE)
    # Not loaded: this process never opened a PostgreSQL connection (SQLite users never load it).
    psycopg = sys.modules.get("psycopg")
    if psycopg is None:
        return False
    # The server ends a session idle in its transaction past the limit (claim turns): a
    # lost connection like any other, not a fault of the batch that was running on it. A
    # server that stopped accepting writes refuses each one until the pool replaces the
    # connection with one to the primary (a failover: _read_only).
    lost = (
        psycopg.OperationalError
        | psycopg.InterfaceError
        | psycopg.errors.IdleInTransactionSessionTimeout
        | psycopg.errors.ReadOnlySqlTransaction
    )
    return isinstance(error, lost)
