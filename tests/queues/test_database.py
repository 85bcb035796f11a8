"""Engines: how a pooled PostgreSQL connection that the server dropped is found out.

A connection idle for ``PING_AFTER_IDLE_SECONDS`` is pinged before it is handed out, and
one the driver knows is broken is replaced, so a restarted server costs an idle client
nothing; a connection in constant use is never pinged (the round trip it would cost is
one of a streaming batch's few). SQLite has no connections to lose: its engine only gets
its pragmas.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from queues import database, make_engine
from tests.conftest import PostgresDatabases


@pytest.fixture
def pg_engine(postgres: PostgresDatabases) -> Iterator[Engine]:
    url = postgres.create()
    engine = make_engine(url, pool_size=2)
    yield engine
    engine.dispose()
    postgres.drop(url)


def backend_pid(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def terminate(engine: Engine, pid: int) -> None:
    """Drop one server connection, as a server restart drops them all."""
    url = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


def pings(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the pings the pool makes from now on."""
    made: list[int] = []
    ping = engine.dialect.do_ping

    def counted(dbapi_connection: Any) -> bool:
        made.append(1)
        return ping(dbapi_connection)

    monkeypatch.setattr(engine.dialect, "do_ping", counted)
    return made


def test_a_connection_idle_for_a_while_is_pinged_and_replaced_if_the_server_dropped_it(
    pg_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid = backend_pid(pg_engine)
    terminate(pg_engine, pid)
    made = pings(pg_engine, monkeypatch)
    monkeypatch.setattr(database, "PING_AFTER_IDLE_SECONDS", 0.0)  # idle long enough
    assert backend_pid(pg_engine) != pid  # no error: the ping failed, a new connection served
    assert made


def test_a_busy_connection_is_not_pinged(pg_engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    pid = backend_pid(pg_engine)
    made = pings(pg_engine, monkeypatch)
    assert backend_pid(pg_engine) == pid  # checked out again at once: the same connection
    assert not made


def test_a_broken_connection_is_reported_once_then_replaced_with_every_other_it_outlived(
    pg_engine: Engine,
) -> None:
    """Used just before the server dropped it, a connection fails its next statement
    (MQ's 2009 to the application); from then on the pool pings whatever it holds. The
    failure comes through the driver's own cursor, as on the hot paths, so SQLAlchemy
    never sees it and cannot invalidate the pool itself."""
    with pg_engine.connect() as first, pg_engine.connect() as second:
        pids = [int(c.execute(text("SELECT pg_backend_pid()")).scalar_one()) for c in (first, second)]
        first.rollback()
        second.rollback()
    for pid in pids:
        terminate(pg_engine, pid)
    with pytest.raises(psycopg.OperationalError), pg_engine.connect() as conn:
        driver = conn.connection.driver_connection
        assert driver is not None
        driver.execute("SELECT 1")
    with pg_engine.connect() as conn, pg_engine.connect() as other:
        fresh = {int(c.execute(text("SELECT pg_backend_pid()")).scalar_one()) for c in (conn, other)}
    assert not fresh & set(pids)


def test_a_held_connection_the_server_dropped_while_it_sat_idle_is_found_out_and_invalidated(
    pg_engine: Engine,
) -> None:
    """A connection held outside the pool (the MQTT gateway's) is judged as the pool judges
    one at checkout: after a restart, its first batch must not be the one that finds out."""
    conn = pg_engine.connect()
    try:
        pid = int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
        conn.rollback()
        idle_since = time.monotonic() - database.PING_AFTER_IDLE_SECONDS
        assert database.held_connection_usable(conn, idle_since)  # pinged: it answers
        terminate(pg_engine, pid)
        assert database.held_connection_usable(conn, time.monotonic())  # busy: not pinged
        assert not database.held_connection_usable(conn, idle_since)
        assert conn.invalidated
    finally:
        conn.close()


def test_a_held_connection_is_pinged_once_another_was_found_broken(pg_engine: Engine) -> None:
    held = pg_engine.connect()
    try:
        pid = int(held.execute(text("SELECT pg_backend_pid()")).scalar_one())
        held.rollback()
        used = time.monotonic()
        terminate(pg_engine, pid)
        with pg_engine.connect() as other:
            other.invalidate()  # as a pooled connection the restart broke is
        assert not database.held_connection_usable(held, used)
    finally:
        held.close()


def test_a_held_sqlite_connection_is_never_pinged(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/broker.db")
    try:
        made = pings(engine, monkeypatch)
        with engine.connect() as conn:
            assert database.held_connection_usable(conn, 0.0)
        assert not made
    finally:
        engine.dispose()


def test_sqlite_engines_are_left_as_they_were(tmp_path: object) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/broker.db")
    try:
        with engine.connect() as conn:
            assert conn.execute(text("PRAGMA journal_mode")).scalar_one() == "wal"
    finally:
        engine.dispose()


def test_the_operator_is_told_when_postgresql_runs_without_autovacuum(pg_engine: Engine) -> None:
    with pg_engine.connect() as conn:
        autovacuum = conn.exec_driver_sql("SHOW autovacuum").scalar_one()
    warnings = database.maintenance_warnings(pg_engine)
    if autovacuum == "on":
        assert warnings == []
    else:
        (warning,) = warnings
        assert warning.startswith("autovacuum is off") and "ANALYZE mq_messages" in warning


def test_sqlite_needs_no_maintenance_advice(tmp_path: object) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/q.db")
    assert database.maintenance_warnings(engine) == []
    engine.dispose()


def test_a_postgresql_url_asks_for_a_server_that_accepts_writes_unless_it_says_otherwise() -> None:
    assert database.normalise_url("postgresql://u@h/db") == (
        "postgresql+psycopg://u@h/db?target_session_attrs=read-write"
    )
    assert database.normalise_url("postgres://u@h/db?target_session_attrs=any").endswith("=any")
    assert database.normalise_url("sqlite:///broker.db") == "sqlite:///broker.db"


@pytest.mark.parametrize(
    "hosts", ["host=h1:5432&host=h2:5433", "host=h1,h2&port=5432,5433"], ids=["repeated", "lists"]
)
def test_a_connection_of_its_own_keeps_every_host_and_the_password(hosts: str) -> None:
    """Rendered as a URL, SQLAlchemy's ``host=h1:p1&host=h2:p2`` would reach libpq as one host."""
    params = conninfo_to_dict(database.conninfo(f"postgresql://app:s3%40cret@/broker?{hosts}"))
    assert params == {
        "host": "h1,h2",
        "port": "5432,5433",
        "dbname": "broker",
        "user": "app",
        "password": "s3@cret",
        "target_session_attrs": "read-write",
    }


def naming_hosts(url: str, *ports: int) -> str:
    """``url`` with its server given as several hosts of 127.0.0.1, on ``ports`` in that order."""
    parsed = make_url(url)
    hosts = tuple(f"127.0.0.1:{port}" for port in ports)
    return parsed.set(host=None, port=None, query={**parsed.query, "host": hosts}).render_as_string(
        hide_password=False
    )


def test_of_several_hosts_the_engine_connects_to_the_one_that_answers(
    postgres: PostgresDatabases,
) -> None:
    url = postgres.create()
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        nobody = unused.getsockname()[1]  # nothing listens here once it is closed
    engine = make_engine(naming_hosts(url, nobody, make_url(url).port or 5432))
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT current_database()")).scalar_one() == make_url(url).database
    finally:
        engine.dispose()
        postgres.drop(url)


def test_a_pooled_connection_to_a_server_that_stopped_accepting_writes_is_replaced(
    pg_engine: Engine,
) -> None:
    """A primary fenced read-only (or a standby) says so as the setting changes: the pool
    drops the connection at its next checkout, with no round trip, and connects again to a
    server that accepts writes."""
    with pg_engine.connect() as conn:
        fenced = int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
        conn.execute(text("SET default_transaction_read_only = on"))
        conn.commit()
    with pg_engine.begin() as conn:
        assert int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one()) != fenced
        conn.execute(text("CREATE TEMPORARY TABLE written (a integer)"))


def test_a_write_refused_as_read_only_is_an_outage_not_a_defect(pg_engine: Engine) -> None:
    """ "cannot execute ... in a read-only transaction": the server is a standby or fenced; the
    work waits for the primary as it waits for a server that does not answer."""
    with pg_engine.connect() as conn:
        conn.execute(text("SET TRANSACTION READ ONLY"))
        with pytest.raises(DBAPIError) as refused:
            conn.execute(text("CREATE TEMPORARY TABLE written (a integer)"))
    assert isinstance(refused.value.orig, psycopg.errors.ReadOnlySqlTransaction)
    assert database.unavailable(refused.value)
    assert database.unavailable(refused.value.orig)  # as the hot paths' driver cursors raise it


def test_a_server_shutting_down_is_an_outage_not_a_defect(pg_engine: Engine) -> None:
    """The primary stopped (``pg_ctl stop``, a failover manager demoting it) ends each session
    with ADMIN_SHUTDOWN, as ``pg_terminate_backend`` does."""
    with psycopg.connect(database.conninfo(pg_engine.url)) as conn:
        terminate(pg_engine, conn.info.backend_pid)
        with pytest.raises(psycopg.errors.AdminShutdown) as ended:
            conn.execute("SELECT 1")
    assert database.unavailable(ended.value)
