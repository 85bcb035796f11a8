"""Engines: how a pooled PostgreSQL connection that the server dropped is found out.

A connection idle for ``PING_AFTER_IDLE_SECONDS`` is pinged before it is handed out, and
one the driver knows is broken is replaced, so a restarted server costs an idle client
nothing; a connection in constant use is never pinged (the round trip it would cost is
one of a streaming batch's few). SQLite has no connections to lose: its engine only gets
its pragmas.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import Engine, text

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

    def counted(dbapi_connection: object) -> bool:
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
