"""broker.store.state_store and changes on both dialects: what the routing loop persists, and
how two processes keep in step.

Two ``StateStore`` instances on one database stand for two processes (a broker and the admin API, or
two brokers): each reads and writes through its own connection, so everything one learns of the
other's changes comes through the tables and the versioned change log.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace

from sqlalchemy import Engine, delete, select, update

from broker import store
from broker.core.authority import AclRule, Permission, PrincipalKind
from broker.core.effects import AddSubscription, DeleteRetained, RemoveSubscription, SetRetained
from broker.core.subscription import Identity, Subscription, SubscriptionKey
from broker.protocol import brokerpath
from broker.protocol.options import RegOpt
from broker.store.schema import changes, meta
from tests.broker.store.records import (
    NOW,
    Process,
    published,
    retained_of,
    sub,
    subscriptions_of,
    version,
)

# -- round trips -------------------------------------------------------------------------------


def test_subscription_round_trip_keeps_every_field(engine: Engine, a: Process) -> None:
    full = Subscription(
        key=SubscriptionKey(Identity("QM2", "FAR.QUEUE", b"\x01" * 24), "Pounds", "Sport/+/Results", "x > 1"),
        user_id="bob",
        options=int(RegOpt.CorrelAsId | RegOpt.InformIfRet | RegOpt.Pers | RegOpt.VariableUserId),
        created_at=NOW,
        seq=42,
        sub_name="results-feed",
        sub_user_data="desk 4",
        expires_at=NOW + 60_000,
        temporary=True,
        members=("member-1", "member-2"),
        exclusive="member-1",
        origin="QM3",
    )
    plain = sub("Sport/Soccer", seq=43)
    a.write(AddSubscription(full), AddSubscription(plain))

    loaded = Process(engine).state
    assert subscriptions_of(loaded) == [full, plain]
    assert loaded.named("results-feed") == full
    assert loaded.of_identity(Identity("QM2", "FAR.QUEUE", b"\x01" * 24)) == [full]
    assert loaded.match("Pounds", "Sport/Tennis/Results") == [full]
    assert loaded.next_seq() == 44


def test_retained_round_trip_decodes_headers_and_path(engine: Engine, a: Process) -> None:
    usr = "<usr><Desk>4</Desk></usr>"
    path = brokerpath.render(brokerpath.BrokerPath(b"O".ljust(24, b"\x00"), ("QM2", "QM3")))
    local = published("Sport/Soccer/State/LatestScore/Team1 Team2", b"2-1", folders=(usr,), expiry=600)
    forwarded = published("Sport/Golf", b"par", sub_point="Pounds", folders=(path,))
    a.write(SetRetained(local), SetRetained(forwarded))

    loaded = Process(engine).state
    assert retained_of(loaded) == [local, forwarded]
    got = loaded.retained("", "Sport/Soccer/State/LatestScore/Team1 Team2")
    assert got is not None
    assert got.message == local.message
    assert got.rfh2.folders[1] == usr
    assert got.rfh2.payload == b"2-1"
    assert got.publish.seq_num == "7"
    assert got.path is None
    assert got.expires_at == NOW + 60_000
    held = loaded.retained("Pounds", "Sport/Golf")
    assert held is not None
    assert held.path == brokerpath.BrokerPath(b"O".ljust(24, b"\x00"), ("QM2", "QM3"))
    assert held.origin_msg_id == b"O".ljust(24, b"\x00")


def test_last_change_per_key_wins_within_one_write(engine: Engine, a: Process) -> None:
    first = sub("A", sub_user_data="first")
    second = replace(first, sub_user_data="second")
    gone = sub("B", seq=2)
    a.write(
        AddSubscription(first), AddSubscription(gone), AddSubscription(second), RemoveSubscription(gone.key)
    )
    a.write(SetRetained(published("R", b"1")), SetRetained(published("R", b"2")), DeleteRetained("", "X"))

    loaded = Process(engine).state
    assert subscriptions_of(loaded) == [second]
    assert [p.rfh2.payload for p in retained_of(loaded)] == [b"2"]


def test_write_without_state_changes_touches_nothing(
    engine: Engine, a: Process, statements: list[str]
) -> None:
    with engine.begin() as conn:
        a.store.write(conn, [])
    assert statements == []
    assert a.store.version == 0


# -- two processes -----------------------------------------------------------------------------


def test_subscription_written_by_one_process_reaches_the_other_incrementally(
    engine: Engine, a: Process, b: Process, statements: list[str]
) -> None:
    unchanged = sub("Old", seq=1)
    a.write(AddSubscription(unchanged), SetRetained(published("Kept")))
    b.refresh()
    statements.clear()

    added = sub("Sport/#", "OTHERQ", seq=2)
    a.write(AddSubscription(added))
    statements.clear()
    state = b.refresh()

    assert subscriptions_of(state) == [unchanged, added]
    assert [s.key.topic for s in state.match("", "Sport/Soccer")] == ["Sport/#"]
    # One version check, one change-log read, one read of the one changed row: nothing else.
    assert len(statements) == 3, statements
    assert statements[0].startswith("SELECT psb_meta.version")
    assert "FROM psb_changes" in statements[1]
    among = "= ANY" if engine.dialect.name == "postgresql" else "IN"
    assert f"FROM psb_subscriptions WHERE psb_subscriptions.key_hash {among}" in statements[2]
    assert not any("psb_retained" in s or "psb_acl_rules" in s for s in statements)
    assert b.store.version == version(engine)


def test_refresh_without_changes_is_one_query(a: Process, b: Process, statements: list[str]) -> None:
    a.write(AddSubscription(sub("X")))
    b.refresh()
    statements.clear()
    assert b.refresh() is b.state
    assert len(statements) == 1
    assert statements[0].startswith("SELECT psb_meta.version")


def test_deletions_reach_the_other_process(a: Process, b: Process) -> None:
    kept, dropped = sub("Keep", seq=1), sub("Drop", seq=2)
    a.write(
        AddSubscription(kept),
        AddSubscription(dropped),
        SetRetained(published("R1")),
        SetRetained(published("R2")),
    )
    b.refresh()
    assert len(b.state) == 2

    a.write(RemoveSubscription(dropped.key), DeleteRetained("", "R1"))
    state = b.refresh()

    assert subscriptions_of(state) == [kept]
    assert state.match("", "Drop") == []
    assert [p.topic for p in retained_of(state)] == ["R2"]
    assert state.retained("", "R1") is None


def test_changed_subscription_replaces_the_old_one(a: Process, b: Process) -> None:
    original = sub("T", sub_user_data="v1", sub_name="named")
    a.write(AddSubscription(original))
    b.refresh()
    altered = replace(original, sub_user_data="v2", options=int(RegOpt.NonPers))
    a.write(AddSubscription(altered))
    state = b.refresh()
    assert subscriptions_of(state) == [altered]
    assert state.named("named") == altered


def test_acl_changes_rebuild_the_authority(engine: Engine, a: Process, b: Process) -> None:
    assert b.state.authority.decide("bob", Permission.PUBLISH, "Sport/Soccer").allowed
    with engine.begin() as conn:
        rule = store.add_acl_rule(
            conn, AclRule("bob", PrincipalKind.USER, "Sport", Permission.PUBLISH, False)
        )
    state = b.refresh()
    decision = state.authority.decide("bob", Permission.PUBLISH, "Sport/Soccer")
    assert (decision.allowed, decision.rule) == (False, rule)
    assert state.authority.decide("carol", Permission.PUBLISH, "Sport/Soccer").allowed

    with engine.begin() as conn:
        assert store.remove_acl_rule(conn, rule.rule_id or 0)
    assert b.refresh().authority.decide("bob", Permission.PUBLISH, "Sport/Soccer").allowed


def test_group_membership_changes_rebuild_the_authority(engine: Engine, b: Process) -> None:
    with engine.begin() as conn:
        store.add_acl_rule(conn, AclRule("blocked", PrincipalKind.GROUP, "#", Permission.SUBSCRIBE, False))
    assert b.refresh().authority.decide("eve", Permission.SUBSCRIBE, "a").allowed
    with engine.begin() as conn:
        assert store.set_group_member(conn, "blocked", "eve", True)
    assert not b.refresh().authority.decide("eve", Permission.SUBSCRIBE, "a").allowed
    with engine.begin() as conn:
        assert store.set_group_member(conn, "blocked", "eve", False)
    assert b.refresh().authority.decide("eve", Permission.SUBSCRIBE, "a").allowed


def test_a_gap_in_the_change_log_forces_a_full_reload(
    engine: Engine, a: Process, b: Process, statements: list[str]
) -> None:
    a.write(AddSubscription(sub("One", seq=1)))
    a.write(AddSubscription(sub("Two", seq=2)))
    a.write(SetRetained(published("R")))
    with engine.begin() as conn:  # what prune_changes does to entries b has not read yet
        conn.execute(delete(changes).where(changes.c.version == 1))
    statements.clear()

    state = b.refresh()

    assert [s.key.topic for s in subscriptions_of(state)] == ["One", "Two"]
    assert [p.topic for p in retained_of(state)] == ["R"]
    assert any("FROM psb_subscriptions ORDER BY psb_subscriptions.seq" in s for s in statements)
    assert b.store.version == 3


def test_an_emptied_change_log_forces_a_full_reload(engine: Engine, a: Process, b: Process) -> None:
    a.write(AddSubscription(sub("One")))
    with engine.begin() as conn:
        conn.execute(delete(changes))
    assert [s.key.topic for s in subscriptions_of(b.refresh())] == ["One"]


def test_own_write_advances_the_version_only_when_nobody_else_wrote(
    engine: Engine, a: Process, b: Process
) -> None:
    assert (a.store.version, b.store.version) == (0, 0)
    a.write(AddSubscription(sub("ByA", seq=1)))
    assert a.store.version == 1  # nothing to re-read: it wrote version 1 itself
    b.write(AddSubscription(sub("ByB", "QB", seq=2)))
    assert b.store.version == 0  # version 1 is someone else's: it must still read it

    state = b.refresh()
    assert [s.key.topic for s in subscriptions_of(state)] == ["ByA", "ByB"]
    assert b.store.version == 2
    with engine.connect() as conn:
        logged = [(r.version, r.entity) for r in conn.execute(select(changes).order_by(changes.c.version))]
    assert logged == [(1, store.SUBSCRIPTION), (2, store.SUBSCRIPTION)]


def test_concurrent_writers_take_versions_in_commit_order(engine: Engine) -> None:
    """The second writer waits for the first one's version row until it commits, so a reader that
    has seen version n has seen every change logged under n or below."""
    order: list[tuple[str, int]] = []
    first_holds = threading.Event()

    def second() -> None:
        first_holds.wait(10)
        with engine.begin() as conn:
            order.append(("second", store.log_changes(conn, [(store.ACL, b"\x02" * 24)])))

    thread = threading.Thread(target=second)
    thread.start()
    with engine.begin() as conn:
        order.append(("first", store.log_changes(conn, [(store.ACL, b"\x01" * 24)])))
        first_holds.set()
        time.sleep(0.3)  # the second writer is blocked meanwhile
        assert order == [("first", 1)]
    thread.join(10)
    assert order == [("first", 1), ("second", 2)]
    assert version(engine) == 2


def test_prune_forgets_only_old_entries(engine: Engine, a: Process) -> None:
    a.write(AddSubscription(sub("Old")))
    with engine.begin() as conn:
        conn.execute(update(changes).values(changed_at=NOW))
    a.write(AddSubscription(sub("New", seq=2)))
    with engine.begin() as conn:
        assert store.prune_changes(conn, NOW + store.CHANGE_LOG_RETENTION_MS + 1) == 1
        assert [r.version for r in conn.execute(select(changes))] == [2]
        assert conn.execute(select(meta.c.version)).scalar_one() == 2
