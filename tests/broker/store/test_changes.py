"""The state's version as the MQTT gateway checks it before every batch (``broker.store.changes``)."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, select, text

from broker.core.effects import AddSubscription
from broker.store import changes
from broker.store.schema import meta
from queues import sql
from queues.database import unavailable
from tests.broker.store.records import Process, sub


def test_the_version_now_is_read_outside_any_transaction_and_the_connection_stays_idle(
    engine: Engine, a: Process
) -> None:
    """On PostgreSQL an idle connection reads the version in autocommit mode: it sees what
    another connection committed a moment before, and is left idle, out of autocommit, for the
    next unit of work. SQLite's gateway connection cannot (it reads through a reading unit)."""
    with engine.connect() as held:
        if held.dialect.name == "sqlite":
            assert not sql.can_commit_together(held)
            return
        before = changes.version_now(held)
        a.write(AddSubscription(sub("Sport/#")))
        assert changes.version_now(held) == before + 1
        driver = held.connection.driver_connection
        assert driver is not None
        assert (driver.info.transaction_status.name, driver.autocommit) == ("IDLE", False)
        with held.begin():
            assert held.execute(select(meta.c.version)).scalar_one() == before + 1


def test_a_connection_the_server_dropped_is_invalidated_not_reset(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """The server ends the connection (an outage, a failover): the read fails as the database
    being unavailable, and the connection is discarded rather than handed back to the pool,
    whose reset of it would fail again and log a traceback."""
    with engine.connect() as held:
        if held.dialect.name == "sqlite":
            assert not sql.can_commit_together(held)
            return
        driver = held.connection.driver_connection
        assert driver is not None
        with engine.connect() as other:
            other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": driver.info.backend_pid})
            other.commit()
        with pytest.raises(Exception) as lost:
            changes.version_now(held)
        assert unavailable(lost.value)
        assert held.invalidated
    assert "Exception during reset" not in caplog.text
