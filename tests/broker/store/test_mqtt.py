"""MQTT sessions in SQL: when each went offline, which are offline, what was dropped, each
connection's keepalive and bytes; and the MQTT principals."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from sqlalchemy import Engine, text

import migrations
from broker.protocol.mqtt.packets import NEVER_EXPIRES, NO_PROPERTIES, Properties, Will
from broker.store import mqtt
from queues import make_engine
from queues.reasons import Reason
from tests.conftest import PostgresDatabases


def test_offline_since_counts_from_the_first_going_and_is_cleared_by_a_connection(engine: Engine) -> None:
    with engine.begin() as conn:
        for client_id in ("sensor", "phone"):
            mqtt.save_session(
                conn, mqtt.StoredSession(client_id, mqtt.queue_for(client_id), "alice", False, 4, "a:1", 1, 1)
            )
        mqtt.set_offline(conn, 100, ["sensor"])
        mqtt.set_offline(conn, 200)  # a listener starting: only the sessions still online
        assert [(s.client_id, s.offline_since) for s in mqtt.offline_sessions(conn)] == [
            ("phone", 200),
            ("sensor", 100),
        ]
        assert [s.client_id for s in mqtt.expired_sessions(conn, 1_150, 1)] == ["sensor"]
        assert mqtt.expired_sessions(conn, 1_150, 0) == []  # no expiry: kept
        mqtt.count_dropped(conn, "sensor", 3)
        mqtt.count_dropped(conn, "sensor", 4)
        mqtt.save_session(
            conn, mqtt.StoredSession("sensor", mqtt.queue_for("sensor"), "alice", False, 4, "a:2", 1, 300)
        )
        stored = mqtt.find_session(conn, "sensor")
        assert stored is not None and (stored.online, stored.offline_since, stored.dropped) == (True, 0, 7)
        assert [s.client_id for s in mqtt.offline_sessions(conn)] == ["phone"]


def test_an_mqtt5_session_expires_by_its_own_interval(engine: Engine) -> None:
    with engine.begin() as conn:
        for client_id, expiry in (
            ("v3", None),
            ("v5-short", 10),
            ("v5-long", 100),
            ("v5-never", NEVER_EXPIRES),
        ):
            session = mqtt.StoredSession(client_id, mqtt.queue_for(client_id), "alice", False, 5, "a:1", 1, 1)
            mqtt.save_session(conn, replace(session, expiry=expiry))
        mqtt.set_offline(conn, 1_000)
        mqtt.set_expiry(conn, "v5-long", 50)  # as its DISCONNECT said
        gone = {
            now: [s.client_id for s in mqtt.expired_sessions(conn, now, 30)]
            for now in (11_001, 31_001, 51_001)
        }
        assert gone == {
            11_001: ["v5-short"],
            31_001: ["v3", "v5-short"],
            51_001: ["v3", "v5-long", "v5-short"],
        }
        stored = mqtt.find_session(conn, "v5-never")
        assert stored is not None and stored.expiry == NEVER_EXPIRES
        assert not mqtt.expired(stored, 10**15, 30)
        assert [s.client_id for s in mqtt.expired_sessions(conn, 10**15, 0)] == ["v5-long", "v5-short"]


def run(client_id: str, seq: int, *messages: tuple[int, str]) -> mqtt.OutboundRun:
    """A run of QoS 1 messages (packet id, topic) to ``client_id``."""
    key = mqtt.session_key(client_id)
    return mqtt.OutboundRun.new(
        key, seq, [(p, topic, topic.encode() * 3, 1, False, NO_PROPERTIES) for p, topic in messages]
    )


def test_outbound_runs_of_many_sessions_in_one_statement_resent_in_seq_order(engine: Engine) -> None:
    with engine.begin() as conn:
        assert mqtt.last_outbound_seq(conn) == 0
        mqtt.store_runs(
            conn,
            [
                run("phone", 7, (3, "third"), (4, "fourth")),
                run("sensor", 8, (3, "other")),
                run("phone", 6, (9, "first"), (1, "second")),
            ],
        )
        assert mqtt.last_outbound_seq(conn) == 8
        assert [run.seq for run in mqtt.load_runs_of(conn, ["phone", "nobody"])["phone"]] == [6, 7]
        assert [r.topic for r in mqtt.unacknowledged(conn, "phone")] == ["first", "second", "third", "fourth"]
        assert mqtt.unacknowledged(conn, "sensor") == [
            mqtt.OutboundRow(3, "other", b"otherotherother", 1, False, False)
        ]


def test_a_run_keeps_its_bitmaps_and_goes_with_its_last_message(engine: Engine) -> None:
    """Acknowledged and PUBREC'd messages are bits of their run's row: a reconnection resends
    the others, PUBREL for those PUBREC'd; the row goes when none is left in flight."""
    with engine.begin() as conn:
        first, second = run("phone", 1, (1, "a"), (2, "b"), (3, "c")), run("phone", 2, (4, "d"))
        mqtt.store_runs(conn, [first, second])
        assert first.acknowledge(1) and not first.acknowledge(1)
        assert first.release(2) and not first.release(2)
        assert second.acknowledge(0)
        mqtt.update_runs(conn, [first])
        mqtt.delete_runs(conn, [second])
        (stored,) = mqtt.load_runs(conn, "phone")
        assert (stored.seq, stored.pending, stored.is_acked(1), stored.is_released(2)) == (1, 2, True, True)
        assert [(r.packet_id, r.released) for r in mqtt.unacknowledged(conn, "phone")] == [
            (1, False),
            (3, True),
        ]
        listed = {s.client_id: s.in_flight for s in mqtt.list_sessions(conn)}
        assert listed == {}  # no session row: in flight is counted per session listed
        mqtt.save_session(
            conn, mqtt.StoredSession("phone", mqtt.queue_for("phone"), "alice", False, 4, "a:1", 1, 1)
        )
        assert [s.in_flight for s in mqtt.list_sessions(conn)] == [2]
        assert stored.acknowledge(0) and stored.acknowledge(2) and stored.pending == 0
        mqtt.delete_runs(conn, [stored])
        assert mqtt.load_runs(conn, "phone") == []
        assert [s.in_flight for s in mqtt.list_sessions(conn)] == [0]


def test_new_messages_are_one_run_unless_their_payloads_are_over_the_limit() -> None:
    seqs = iter(range(1, 100))
    key = mqtt.session_key("phone")

    def messages(*sizes: int) -> list[mqtt.OutboundMessage]:
        return [(n, "t", bytes(size), 1, False, NO_PROPERTIES) for n, size in enumerate(sizes, 1)]

    def shape(runs: list[mqtt.OutboundRun]) -> list[tuple[int, list[int]]]:
        return [(run.seq, [m[0] for m in run.messages]) for run in runs]

    assert shape(mqtt.new_runs(key, messages(3, 3, 3), lambda: next(seqs), limit=10)) == [(1, [1, 2, 3])]
    assert shape(mqtt.new_runs(key, messages(6, 6, 20, 1), lambda: next(seqs), limit=10)) == [
        (2, [1]),
        (3, [2]),
        (4, [3]),  # one message over the limit is a run of its own
        (5, [4]),
    ]
    assert shape(mqtt.new_runs(key, messages(4, 4, 4, 4), lambda: next(seqs), limit=10)) == [
        (6, [1, 2]),
        (7, [3, 4]),
    ]


def test_messages_pack_and_unpack_as_they_were() -> None:
    messages: list[mqtt.OutboundMessage] = [
        (1, "a/b", b"", 1, False, NO_PROPERTIES),
        (65535, "späť/ü/#x", bytes(range(256)) * 300, 2, True, NO_PROPERTIES),
        (7, "", b"\x00", 1, True, Properties(user_properties=(("k", "v"),), message_expiry_interval=9)),
        (8, "a/b", b"after", 1, False, NO_PROPERTIES),
    ]
    assert mqtt.unpack_messages(mqtt.pack_messages(messages)) == messages
    assert mqtt.unpack_messages(b"") == []


def test_received_ids_of_many_sessions_in_one_call(engine: Engine) -> None:
    """Several ids per session in one call: one execution per session (PostgreSQL's array) or
    per row (SQLite) must reach each id named and no other."""
    clients = ("phone", "sensor", "meter")
    with engine.begin() as conn:
        mqtt.record_received(conn, [(c, p) for c in clients for p in range(1, 8)])
        mqtt.forget_received(conn, [("meter", 1), ("meter", 2), ("phone", 7), ("sensor", 4), ("phone", 1)])
        awaiting = {c: sorted(mqtt.awaiting_release(conn, c)) for c in clients}
    assert awaiting == {
        "phone": [2, 3, 4, 5, 6],
        "sensor": [1, 2, 3, 5, 6, 7],
        "meter": [3, 4, 5, 6, 7],
    }


def test_sessions_are_paged_by_client_id_and_counted(engine: Engine) -> None:
    with engine.begin() as conn:
        assert mqtt.count_sessions(conn) == (0, 0)
        for client_id in ("c", "a", "d", "b"):
            mqtt.save_session(
                conn, mqtt.StoredSession(client_id, mqtt.queue_for(client_id), "alice", False, 4, "a:1", 1, 1)
            )
        mqtt.set_offline(conn, 100, ["b"])
        assert [s.client_id for s in mqtt.list_sessions(conn, limit=3)] == ["a", "b", "c"]
        assert [s.client_id for s in mqtt.list_sessions(conn, after="b", limit=3)] == ["c", "d"]
        assert mqtt.count_sessions(conn) == (3, 4)


def test_a_connection_records_its_keepalive_and_starts_its_byte_counts_afresh(engine: Engine) -> None:
    """The listener writes each connection's bytes to the sessions its member holds, in one
    statement; one taken over by another member is left alone, and a new connection starts
    from nothing. One session shown alone reads as in the list, in-flight count included."""
    with engine.begin() as conn:
        for client_id, owner, level in (("sensor", "m1", 3), ("phone", "m2", 4)):
            queue = mqtt.queue_for(client_id)
            stored = mqtt.StoredSession(
                client_id, queue, "alice", False, level, "a:1", 1, 1, owner=owner, keepalive=30
            )
            mqtt.save_session(conn, stored)
        mqtt.record_traffic(conn, "m1", {"sensor": (120, 4500, 3), "phone": (7, 8, 0), "nobody": (1, 1, 0)})
        mqtt.store_runs(conn, [run("sensor", 1, (1, "a"), (2, "b"))])
        listed = {
            s.client_id: (s.version, s.keepalive, s.bytes_in, s.bytes_out) for s in mqtt.list_sessions(conn)
        }
        assert listed == {"sensor": ("3.1", 30, 120, 4500), "phone": ("3.1.1", 30, 0, 0)}
        shown = mqtt.show_session(conn, "sensor")
        assert shown is not None and (shown.in_flight, shown.bytes_out) == (2 + 3, 4500)  # stored + held
        assert mqtt.show_session(conn, "nobody") is None
        mqtt.save_session(
            conn,
            mqtt.StoredSession(
                "sensor", mqtt.queue_for("sensor"), "alice", False, 4, "a:2", 1, 9, owner="m1"
            ),
        )
        again = mqtt.find_session(conn, "sensor")
        assert again is not None and (again.keepalive, again.bytes_in, again.bytes_out) == (0, 0, 0)
        shown = mqtt.show_session(conn, "sensor")
        assert shown is not None and shown.in_flight == 2  # what its last connection held is gone


def test_principals_are_added_once_changed_and_removed_by_name(engine: Engine) -> None:
    with engine.begin() as conn:
        mqtt.add_principal(conn, "sensor1", mqtt.hash_password(b"first"), 5)
        with pytest.raises(mqtt.PrincipalExists, match="MQTT principal sensor1 exists already") as exists:
            mqtt.add_principal(conn, "sensor1", mqtt.hash_password(b"other"), 6)
        assert exists.value.reason == Reason.MQRCCF_OBJECT_ALREADY_EXISTS
        assert mqtt.verify_password(b"first", mqtt.password_hash(conn, "sensor1") or "")  # kept
        mqtt.change_password(conn, "sensor1", mqtt.hash_password(b"second"))
        assert mqtt.verify_password(b"second", mqtt.password_hash(conn, "sensor1") or "")
        assert mqtt.list_principals(conn) == [("sensor1", 5)] and mqtt.has_principal(conn, "sensor1")
        for change in (
            lambda: mqtt.change_password(conn, "nobody", mqtt.hash_password(b"x")),
            lambda: mqtt.delete_principal(conn, "nobody"),
        ):
            with pytest.raises(mqtt.NoSuchPrincipal, match="no MQTT principal nobody") as missing:
                change()
            assert missing.value.reason == Reason.MQRC_UNKNOWN_OBJECT_NAME
        mqtt.delete_principal(conn, "sensor1")
        assert mqtt.list_principals(conn) == [] and not mqtt.has_principal(conn, "sensor1")
        mqtt.set_password(conn, "sensor1", b"third", 7)  # broker mqtt passwd: adds it again
        assert mqtt.list_principals(conn) == [("sensor1", 7)]


def test_the_sessions_of_a_dead_member_are_released_with_their_wills_and_only_theirs(engine: Engine) -> None:
    will = Will("status/sensor", b"gone", 1, True)
    holders = {"sensor": ("dead", will), "meter": ("dead", None), "phone": ("alive", None)}
    with engine.begin() as conn:
        for client_id, (owner, kept) in holders.items():
            mqtt.save_session(
                conn,
                mqtt.StoredSession(
                    client_id,
                    mqtt.queue_for(client_id),
                    "alice",
                    False,
                    4,
                    "a:1",
                    1,
                    1,
                    owner=owner,
                    will=kept,
                ),
            )
        mqtt.set_offline(conn, 400, ["phone"], owner="dead")  # not the holder: nothing changes
        assert mqtt.find_session(conn, "sensor").will == will  # type: ignore[union-attr]
        released = mqtt.release_owner(conn, "dead", 500)
        assert sorted((s.client_id, s.will) for s in released) == [("meter", None), ("sensor", will)]
        assert [(s.client_id, s.offline_since, s.will) for s in mqtt.offline_sessions(conn)] == [
            ("meter", 500, None),
            ("sensor", 500, None),
        ]
        assert mqtt.release_owner(conn, "dead", 600) == []
        assert mqtt.find_session(conn, "phone").online  # type: ignore[union-attr]


def test_a_will_published_is_forgotten_and_a_disconnect_forgets_it_too(engine: Engine) -> None:
    will = Will("status/x", b"", 0, False)
    with engine.begin() as conn:
        for client_id in ("x", "y"):
            mqtt.save_session(
                conn,
                mqtt.StoredSession(
                    client_id, mqtt.queue_for(client_id), "alice", False, 4, "a:1", 1, 1, will=will
                ),
            )
        mqtt.clear_will(conn, "x")
        mqtt.set_offline(conn, 5, ["y"])
        assert [s.will for s in mqtt.find_sessions(conn, ["x", "y"]).values()] == [None, None]


def test_keyed_deletions_and_updates_are_never_prepared_on_postgresql(postgres: PostgresDatabases) -> None:
    """psycopg prepares a statement from its fifth execution, and PostgreSQL then runs it on a
    generic plan, which for a small table is a whole-table scan that stays as the table grows
    with dead rows. The writes that find runs and received ids by key are planned each time;
    the insertions, which need no plan, are prepared as usual."""
    url = postgres.create()
    engine = make_engine(url, pool_size=1, max_overflow=0)  # one server session: one set of statements
    try:
        migrations.upgrade(engine)
        with engine.begin() as conn:
            for seq in range(1, 9):
                written = run("phone", seq, (seq, "a"), (seq + 100, "b"))
                mqtt.store_runs(conn, [written])
                written.acknowledge(0)
                mqtt.update_runs(conn, [written])
                mqtt.delete_runs(conn, [written])
                mqtt.record_received(conn, [("phone", seq)])
                mqtt.forget_received(conn, [("phone", seq)])
            assert mqtt.unacknowledged(conn, "phone") == []
            assert mqtt.awaiting_release(conn, "phone") == []
            prepared = conn.execute(text("SELECT statement FROM pg_prepared_statements")).scalars().all()
    finally:
        engine.dispose()
        postgres.drop(url)
    kinds = {
        (statement.split()[0], table)
        for statement in prepared
        for table in _RUNS_AND_IDS
        if table in statement
    }
    assert kinds == {("INSERT", "psb_mqtt_outbound_runs"), ("INSERT", "psb_mqtt_inbound")}


_RUNS_AND_IDS = ("psb_mqtt_outbound_runs", "psb_mqtt_inbound")


def test_vacuum_lets_the_churned_tables_use_the_space_of_their_deleted_rows_again(
    postgres: PostgresDatabases,
) -> None:
    """Runs stored and deleted, then as many again: with a VACUUM between, the second lot
    takes the first lot's pages and the table does not grow; without one it doubles."""
    url = postgres.create()
    engine = make_engine(url)

    def churn(first: int) -> int:
        with engine.begin() as conn:
            runs = [run("phone", seq, (1, "a" * 200)) for seq in range(first, first + 2000)]
            mqtt.store_runs(conn, runs)
            mqtt.delete_runs(conn, runs)
            mqtt.record_received(conn, [("phone", n) for n in range(first, first + 2000)])
            mqtt.forget_received(conn, [("phone", n) for n in range(first, first + 2000)])
        with engine.connect() as conn:
            sizes = [text(f"SELECT pg_relation_size('{table}')") for table in _RUNS_AND_IDS]
            return sum(conn.execute(size).scalar_one() for size in sizes)

    try:
        migrations.upgrade(engine)
        once = churn(1)
        assert churn(10_000) >= 1.8 * once  # no VACUUM between: new pages
        mqtt.vacuum(engine)
        settled = churn(20_000)
        mqtt.vacuum(engine)
        assert churn(30_000) == settled  # the pages of the lot before, used again
    finally:
        engine.dispose()
        postgres.drop(url)


def test_vacuum_takes_the_session_tables_once_a_wave_of_clients_has_left_dead_rows(
    postgres: PostgresDatabases,
) -> None:
    """Sessions of 2,000 clients saved and ended leave as many dead rows: the next vacuum takes
    that table as well as the two it always takes; the other session tables, with no dead rows,
    are left alone."""
    url = postgres.create()
    engine = make_engine(url)

    def vacuumed() -> set[str]:
        names = [table.name for table in mqtt.CHURN_TABLES]
        statement = text("SELECT relname, last_vacuum FROM pg_stat_user_tables WHERE relname = ANY(:n)")
        with engine.connect() as conn:
            return {name for name, last in conn.execute(statement, {"n": names}) if last is not None}

    def dead_rows() -> int:
        with engine.connect() as conn:
            statement = text("SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'psb_mqtt_sessions'")
            return int(conn.execute(statement).scalar_one())

    try:
        migrations.upgrade(engine)
        clients = [f"wave-{n}" for n in range(2000)]
        with engine.begin() as conn:
            wave = [mqtt.StoredSession(c, mqtt.queue_for(c), "alice", True, 4, "a:1", 1, 1) for c in clients]
            mqtt.save_sessions(conn, wave, existing=())
        with engine.begin() as conn:
            mqtt.delete_sessions(conn, clients)
            conn.execute(text("SELECT pg_stat_force_next_flush()"))
        for _ in range(50):  # the server's statistics take their time
            if dead_rows() >= mqtt.CHURNED:
                break
            time.sleep(0.1)
        assert dead_rows() >= mqtt.CHURNED and vacuumed() == set()
        mqtt.vacuum(engine)
        assert vacuumed() == {"psb_mqtt_sessions"}
    finally:
        engine.dispose()
        postgres.drop(url)
