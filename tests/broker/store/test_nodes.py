"""The members of an MQTT cluster in SQL: heartbeats, a death declared and sessions released
exactly once, the guard that keeps a dead member from committing, and the bridges' leases."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

import migrations
from broker.core.cluster import Member
from broker.store import mqtt, nodes
from queues import make_engine
from tests.conftest import PostgresDatabases


def member(owner: str, node: str = "a:1883") -> Member:
    return Member(owner, node, "127.0.0.1:1883", 10, 1, 10, 0)


def session(client_id: str, owner: str) -> mqtt.StoredSession:
    return mqtt.StoredSession(
        client_id, mqtt.queue_for(client_id), "alice", False, 4, "a:1", 1, 1, owner=owner
    )


def test_a_member_beats_until_declared_dead_once(engine: Engine) -> None:
    with engine.begin() as conn:
        nodes.register(conn, member("x"))
        nodes.register(conn, member("y", "b:1883"))
        assert nodes.beat(conn, "x", 3, 20)
        assert nodes.member(conn, "x") == Member("x", "a:1883", "127.0.0.1:1883", 10, 2, 20, 3)
        assert not nodes.declare_dead(conn, "x", 1, 30)  # it beat since beat 1 was seen
        assert nodes.declare_dead(conn, "x", 2, 30)
        assert not nodes.declare_dead(conn, "x", 2, 31)  # declared once
        assert not nodes.beat(conn, "x", 3, 40)  # its lease is lost
        assert nodes.holds(conn, "y") and not nodes.holds(conn, "x")
        assert [(m.owner, m.dead_at) for m in nodes.members(conn)] == [("x", 30), ("y", 0)]


def test_a_beat_records_the_members_counters_and_a_beat_without_keeps_them(engine: Engine) -> None:
    with engine.begin() as conn:
        nodes.register(conn, member("x"))
        assert nodes.member(conn, "x").counters == ()  # type: ignore[union-attr]
        assert nodes.beat(conn, "x", 1, 20, {"messages/sent": 7, "bytes/sent": 3_000_000_000})
        assert nodes.member(conn, "x").counters == (("bytes/sent", 3_000_000_000), ("messages/sent", 7))  # type: ignore[union-attr]
        assert nodes.beat(conn, "x", 1, 30)
        assert nodes.member(conn, "x").counters == (("bytes/sent", 3_000_000_000), ("messages/sent", 7))  # type: ignore[union-attr]


def test_a_dead_members_sessions_are_released_once_and_older_runs_of_its_node_pruned(engine: Engine) -> None:
    with engine.begin() as conn:
        for owner in ("old", "x"):
            nodes.register(conn, member(owner))
            nodes.declare_dead(conn, owner, None, 5)
        assert nodes.release(conn, "old", 6) is not None
        mqtt.save_session(conn, session("held", "x"))
        assert mqtt.find_session(conn, "held").node == "a:1883"  # type: ignore[union-attr]
        released = nodes.release(conn, "x", 7)
        assert released is not None and released.owner == "x"
        assert nodes.release(conn, "x", 8) is None  # exactly one caller releases
        assert [m.owner for m in nodes.members(conn)] == ["x"]  # the earlier run's row is gone
        # a released member holds nothing, even a session its row still names
        assert mqtt.find_session(conn, "held").node == ""  # type: ignore[union-attr]
        nodes.register(conn, member("gone", "b:1883"))
        nodes.declare_dead(conn, "gone", None, 9)
        nodes.register(conn, member("y", "c:1883"))
        nodes.declare_dead(conn, "y", None, 9 + nodes.FORGOTTEN_MS)
        nodes.release(conn, "gone", 10)
        nodes.release(conn, "y", 10 + nodes.FORGOTTEN_MS)  # a day after "x" and "gone" died
        assert [m.owner for m in nodes.members(conn)] == ["y"]


def test_the_guard_passes_while_alive_and_fails_the_transaction_once_declared_dead(engine: Engine) -> None:
    with engine.begin() as conn:
        nodes.register(conn, member("x"))
        nodes.guard(conn, "x")
    with engine.begin() as conn:
        assert nodes.declare_dead(conn, "x", None, 9)
    with pytest.raises(Exception, match=r"(?i)null"), engine.begin() as conn:
        mqtt.save_session(conn, session("late", "x"))
        nodes.guard(conn, "x")
    with engine.connect() as conn:
        assert mqtt.find_session(conn, "late") is None  # rolled back with the guard
    with pytest.raises(Exception, match=r"(?i)null"), engine.begin() as conn:
        nodes.guard(conn, "never-registered")


@pytest.fixture
def pg_engine(postgres: PostgresDatabases) -> Iterator[Engine]:
    """A migrated PostgreSQL database, for what only concurrent writers can show."""
    url = postgres.create()
    engine = make_engine(url)
    migrations.upgrade(engine)
    yield engine
    engine.dispose()
    postgres.drop(url)


def test_a_batch_holding_the_guard_is_never_declared_dead_under_it(pg_engine: Engine) -> None:
    """PostgreSQL, where writers run side by side: the guard's key-share lock keeps the
    declaration off until the batch ends (skipped, not waited for). SQLite runs one write
    transaction at a time, so there the batch's own write lock does the same."""
    engine = pg_engine
    with engine.begin() as conn:
        nodes.register(conn, member("x"))
    with engine.begin() as batch:
        nodes.guard(batch, "x")
        with engine.begin() as other:
            assert not nodes.declare_dead(other, "x", None, 9)
    with engine.begin() as other:
        assert nodes.declare_dead(other, "x", None, 10)


def test_a_lease_is_held_while_its_holder_lives(engine: Engine) -> None:
    bridge = nodes.BRIDGE + "estate"
    with engine.begin() as conn:
        nodes.register(conn, member("x"))
        nodes.register(conn, member("y", "b:1883"))
        assert nodes.take_lease(conn, bridge, "x")
        assert nodes.take_lease(conn, bridge, "x")  # again: still its own
        assert not nodes.take_lease(conn, bridge, "y")
        assert nodes.take_lease(conn, nodes.SESSION_LIMITS, "y")  # another lease, another holder
        assert nodes.lease_holder(conn, bridge) == "x"
        nodes.declare_dead(conn, "x", None, 5)
        assert nodes.take_lease(conn, bridge, "y")
        nodes.free_lease(conn, bridge, "x")  # not x's any more: nothing changes
        assert nodes.lease_holder(conn, bridge) == "y"
        nodes.free_lease(conn, bridge, "y")
        assert nodes.lease_holder(conn, bridge) == ""
