"""The state store on both dialects: what the routing loop persists, and how two processes keep in step.

Two ``StateStore`` instances on one database stand for two processes (a broker and the admin API, or
two brokers): each reads and writes through its own connection, so everything one learns of the
other's changes comes through the tables and the versioned change log.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
from sqlalchemy import Engine, delete, select, update

from broker import brokerpath, psc, rfh2, store
from broker.authority import AclRule, Permission, PrincipalKind
from broker.client import command_message
from broker.effects import AddSubscription, DeleteRetained, RemoveSubscription, SetRetained
from broker.options import PubOpt, RegOpt
from broker.retained import RetainedPublication
from broker.schema import changes, meta
from broker.state import BrokerConfig, BrokerState
from broker.store import SubscriptionFilter
from broker.subscription import Identity, Subscription, SubscriptionKey
from queues.message import MQFMT_STRING, MQMT_DATAGRAM, MQPER_PERSISTENT, derive
from tests.conftest import DIALECTS
from tests.e2e.harness import emptied_database, shared_database
from tests.statements import recorded

# One database per dialect for the module, emptied before each test (see tests.e2e.harness).
shared = pytest.fixture(scope="module", params=DIALECTS)(shared_database)
engine = pytest.fixture(emptied_database)

QMGR = "QM1"
NOW = 1_767_225_600_000


def sub(
    topic: str,
    queue: str = "SUBQ",
    *,
    user: str = "alice",
    sub_point: str = "",
    correl_id: bytes | None = None,
    seq: int = 1,
    **fields: object,
) -> Subscription:
    return Subscription(
        key=SubscriptionKey(Identity(QMGR, queue, correl_id), sub_point, topic, None),
        user_id=user,
        options=int(RegOpt.PersAsPub),
        created_at=NOW,
        seq=seq,
        **fields,  # type: ignore[arg-type]
    )


def published(
    topic: str,
    body: bytes = b"payload",
    *,
    sub_point: str = "",
    folders: tuple[str, ...] = (),
    msg_id: bytes = b"P".ljust(24, b"\x00"),
    expiry: int = -1,
) -> RetainedPublication:
    """A retained publication exactly as the broker would have taken it off a stream queue."""
    command = psc.Publish(
        topics=(topic,),
        sub_point=sub_point or None,
        options=PubOpt.RetainPub,
        pub_time="20260101000000",
        seq_num="7",
        q_mgr_name=None,
        q_name=None,
        correl_id=None,
        folder="",
    )
    message = derive(
        command_message(command, payload=body, payload_format=MQFMT_STRING, folders=folders),
        msg_id=msg_id,
        correl_id=b"C".ljust(24, b"\x00"),
        msg_type=MQMT_DATAGRAM,
        user_id="alice",
        persistence=MQPER_PERSISTENT,
        priority=4,
        expiry=expiry,
        put_appl_name="publisher",
        put_date="20260101",
        put_time="00000000",
    )
    headers = rfh2.decode(message.body, message.encoding, message.format)
    parsed = psc.parse(headers.folders[0])
    assert isinstance(parsed, psc.Publish)
    path = None
    for folder in headers.folders:
        if rfh2.folder_name(folder) == brokerpath.FOLDER:
            path = brokerpath.parse(folder)
    return RetainedPublication(sub_point, topic, message, parsed, headers, NOW, path=path)


class Process:
    """One process's StateStore and its view of the state."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.store = store.StateStore(BrokerConfig(QMGR))
        with engine.begin() as conn:
            self.state = self.store.load(conn)

    def write(self, *effects: object) -> None:
        with self.engine.begin() as conn:
            self.store.write(conn, effects)  # type: ignore[arg-type]
        self.state.apply_all(effects)  # type: ignore[arg-type]

    def refresh(self) -> BrokerState:
        with self.engine.begin() as conn:
            self.state = self.store.refresh(conn, self.state)
        return self.state


@pytest.fixture
def a(engine: Engine) -> Process:
    return Process(engine)


@pytest.fixture
def b(engine: Engine) -> Process:
    return Process(engine)


@pytest.fixture
def statements(engine: Engine) -> Iterator[list[str]]:
    """Every statement on a broker-state table, as sent to the database."""
    with recorded(engine, containing="psb_") as seen:
        yield seen


def subscriptions_of(state: BrokerState) -> list[Subscription]:
    return sorted(state.subscriptions(), key=lambda s: s.seq)


def retained_of(state: BrokerState) -> list[RetainedPublication]:
    return sorted(state.all_retained(), key=lambda p: (p.sub_point, p.topic))


def version(engine: Engine) -> int:
    with engine.connect() as conn:
        return store.current_version(conn)


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
    assert "FROM psb_subscriptions WHERE psb_subscriptions.key_hash IN" in statements[2]
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


# -- listings ----------------------------------------------------------------------------------


@pytest.fixture
def listed(a: Process) -> list[Subscription]:
    subs = [
        sub("Sport/Soccer", "Q1", user="alice", seq=1),
        sub("Sport/Tennis", "Q2", user="bob", seq=2),
        sub("News/Today", "Q1", user="bob", seq=3),
        sub("Sport/#", "Q3", user="alice", sub_point="Pounds", seq=4),
        sub("Sport_Extra/x", "Q2", user="carol", seq=5),
        sub("Weather/Soccer", "Q2", user="carol", seq=6),
        sub("Sport/Soccer", "Q4", user="dave", correl_id=b"\x07" * 24, seq=7),
    ]
    a.write(*(AddSubscription(s) for s in subs))
    return subs


def page(
    engine: Engine, where: SubscriptionFilter, after: int = 0, limit: int = 100
) -> list[tuple[int, str]]:
    with engine.connect() as conn:
        found = store.list_subscriptions(conn, where, after_id=after, limit=limit)
    return [(i, f"{s.key.topic}@{s.identity.queue}") for i, s in found]


def test_listing_filters(engine: Engine, listed: list[Subscription]) -> None:
    everything = page(engine, SubscriptionFilter())
    assert [t for _, t in everything] == [f"{s.key.topic}@{s.identity.queue}" for s in listed]
    names = lambda where: [t for _, t in page(engine, where)]  # noqa: E731
    assert names(SubscriptionFilter(topic="Sport/#")) == [
        "Sport/Soccer@Q1",
        "Sport/Tennis@Q2",
        "Sport/#@Q3",
        "Sport/Soccer@Q4",
    ]
    assert names(SubscriptionFilter(topic="+/Soccer")) == [
        "Sport/Soccer@Q1",
        "Weather/Soccer@Q2",
        "Sport/Soccer@Q4",
    ]
    assert names(SubscriptionFilter(topic="Sport_Extra/#")) == ["Sport_Extra/x@Q2"]
    assert names(SubscriptionFilter(queue="Q2")) == [
        "Sport/Tennis@Q2",
        "Sport_Extra/x@Q2",
        "Weather/Soccer@Q2",
    ]
    assert names(SubscriptionFilter(user_id="bob")) == ["Sport/Tennis@Q2", "News/Today@Q1"]
    assert names(SubscriptionFilter(sub_point="Pounds")) == ["Sport/#@Q3"]
    assert names(SubscriptionFilter(topic="Sport/#", user_id="alice", sub_point="")) == ["Sport/Soccer@Q1"]
    assert names(SubscriptionFilter(q_mgr="QM2")) == []


def test_listing_pages_by_key(engine: Engine, listed: list[Subscription]) -> None:
    where = SubscriptionFilter(topic="+/Soccer")
    first = page(engine, where, limit=2)
    assert [t for _, t in first] == ["Sport/Soccer@Q1", "Weather/Soccer@Q2"]
    second = page(engine, where, after=first[-1][0], limit=2)
    assert [t for _, t in second] == ["Sport/Soccer@Q4"]
    assert page(engine, where, after=second[-1][0], limit=2) == []
    # Pages of one: the filter skips non-matching rows between the pages.
    ids = []
    cursor = 0
    while found := page(engine, SubscriptionFilter(topic="Weather/#"), after=cursor, limit=1):
        cursor = found[-1][0]
        ids.append(found[0][1])
    assert ids == ["Weather/Soccer@Q2"]


def test_count_and_get_subscription(engine: Engine, listed: list[Subscription]) -> None:
    with engine.connect() as conn:
        assert store.count_subscriptions(conn) == 7
        first_id = store.list_subscriptions(conn, SubscriptionFilter(queue="Q4"))[0][0]
        assert store.get_subscription(conn, first_id) == listed[6]
        assert store.get_subscription(conn, first_id + 1000) is None


def test_retained_listing_filters_and_pages(engine: Engine, a: Process) -> None:
    topics = ["Sport/Soccer/A", "Sport/Tennis/B", "News/C", "Sport/Soccer/D", "Sport_X/E"]
    a.write(
        *(SetRetained(published(t, t.encode())) for t in topics),
        SetRetained(published("Sport/Golf", sub_point="Pounds")),
    )
    with engine.connect() as conn:
        listed = lambda *args, **kw: [p.topic for _, p in store.list_retained(conn, *args, **kw)]  # noqa: E731
        assert listed("Sport/#") == ["Sport/Soccer/A", "Sport/Tennis/B", "Sport/Soccer/D", "Sport/Golf"]
        assert listed("Sport/#", "") == ["Sport/Soccer/A", "Sport/Tennis/B", "Sport/Soccer/D"]
        assert listed("Sport/#", "Pounds") == ["Sport/Golf"]
        assert listed("+/Soccer/+") == ["Sport/Soccer/A", "Sport/Soccer/D"]
        assert listed("Sport_X/#") == ["Sport_X/E"]
        first = store.list_retained(conn, "+/Soccer/+", limit=1)
        assert [p.topic for _, p in first] == ["Sport/Soccer/A"]
        assert listed("+/Soccer/+", after_id=first[0][0], limit=1) == ["Sport/Soccer/D"]
        ((_, pub),) = store.list_retained(conn, "News/C")
    assert pub.rfh2.payload == b"News/C"


# -- ACL rules and groups ----------------------------------------------------------------------


def test_acl_rules_add_update_remove(engine: Engine) -> None:
    with engine.begin() as conn:
        first = store.add_acl_rule(
            conn, AclRule("bob", PrincipalKind.USER, "Sport/#", Permission.PUBLISH, True)
        )
        second = store.add_acl_rule(
            conn, AclRule("ops", PrincipalKind.GROUP, "News", Permission.SUBSCRIBE, False)
        )
    assert first.rule_id is not None and second.rule_id == first.rule_id + 1
    assert version(engine) == 2
    with engine.connect() as conn:
        assert store.list_acl_rules(conn) == [first, second]

    changed = AclRule("bob", PrincipalKind.USER, "Sport/Tennis", Permission.SUBSCRIBE, False)
    with engine.begin() as conn:
        assert store.update_acl_rule(conn, first.rule_id, changed)
        assert not store.update_acl_rule(conn, 9999, changed)
    with engine.connect() as conn:
        assert store.list_acl_rules(conn) == [replace(changed, rule_id=first.rule_id), second]
    assert version(engine) == 3

    with engine.begin() as conn:
        assert store.remove_acl_rule(conn, second.rule_id or 0)
        assert not store.remove_acl_rule(conn, second.rule_id or 0)
    with engine.connect() as conn:
        assert store.list_acl_rules(conn) == [replace(changed, rule_id=first.rule_id)]
    assert version(engine) == 4


def test_groups(engine: Engine) -> None:
    with engine.begin() as conn:
        assert store.set_group_member(conn, "traders", "bob", True)
        assert store.set_group_member(conn, "traders", "alice", True)
        assert store.set_group_member(conn, "mqm", "root", True)
        assert not store.set_group_member(conn, "traders", "bob", True)
        assert not store.set_group_member(conn, "traders", "zed", False)
    assert version(engine) == 3  # no-op changes take no version
    with engine.connect() as conn:
        assert store.list_groups(conn) == {"mqm": ["root"], "traders": ["alice", "bob"]}
        authority = store.load_authority(conn, default_allow=False, admin_group="traders")
    assert authority.is_admin("bob")
    assert not authority.is_admin("root")
    assert not authority.decide("bob", Permission.PUBLISH, "x").allowed
    with engine.begin() as conn:
        assert store.set_group_member(conn, "traders", "bob", False)
        assert store.list_groups(conn) == {"mqm": ["root"], "traders": ["alice"]}


def test_instances(engine: Engine) -> None:
    with engine.begin() as conn:
        store.write_instance(conn, "host:1:1", "router", NOW, {"batches": 1})
        store.write_instance(conn, "host:1:1", "router", NOW, {"batches": 2})
        store.write_instance(conn, "host:2:2", "api", NOW + 1, {})
        conn.execute(
            update(store.instances).where(store.instances.c.instance == "host:2:2").values(heartbeat_at=NOW)
        )
    with engine.connect() as conn:
        everything = store.list_instances(conn)
        alive = store.list_instances(conn, alive_within_ms=60_000)
    assert [(i["instance"], i["role"], i["stats"]) for i in everything] == [
        ("host:1:1", "router", {"batches": 2}),
        ("host:2:2", "api", {}),
    ]
    assert [i["instance"] for i in alive] == ["host:1:1"]
