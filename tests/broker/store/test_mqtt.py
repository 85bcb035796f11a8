"""MQTT sessions in SQL: when each went offline, which are offline, what was dropped."""

from __future__ import annotations

import subprocess

from sqlalchemy import Engine

from broker.store import mqtt
from queues.owners import machine_key, owner_name


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
        assert [s.client_id for s in mqtt.offline_sessions(conn, before=150)] == ["sensor"]
        mqtt.count_dropped(conn, "sensor", 3)
        mqtt.count_dropped(conn, "sensor", 4)
        mqtt.save_session(
            conn, mqtt.StoredSession("sensor", mqtt.queue_for("sensor"), "alice", False, 4, "a:2", 1, 300)
        )
        stored = mqtt.find_session(conn, "sensor")
        assert stored is not None and (stored.online, stored.offline_since, stored.dropped) == (True, 0, 7)
        assert [s.client_id for s in mqtt.offline_sessions(conn)] == ["phone"]


def test_outbound_messages_of_many_sessions_in_one_statement_resent_in_seq_order(engine: Engine) -> None:
    def row(packet_id: int, topic: str) -> mqtt.OutboundRow:
        return mqtt.OutboundRow(packet_id, topic, b"x", 1, False, False)

    with engine.begin() as conn:
        assert mqtt.last_outbound_seq(conn) == 0
        mqtt.store_outbound(
            conn,
            [
                mqtt.new_outbound("phone", 7, row(3, "second")),
                mqtt.new_outbound("sensor", 8, row(3, "other")),
                mqtt.new_outbound("phone", 6, row(9, "first")),
            ],
        )
        assert mqtt.last_outbound_seq(conn) == 8
        assert [r.topic for r in mqtt.unacknowledged(conn, "phone")] == ["first", "second"]
        mqtt.forget_outbound(conn, [("phone", 9), ("sensor", 3)])
        mqtt.release_outbound(conn, [("phone", 3)])
        assert [(r.packet_id, r.released) for r in mqtt.unacknowledged(conn, "phone")] == [(3, True)]
        assert mqtt.unacknowledged(conn, "sensor") == []


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


def test_sessions_held_by_a_listener_process_that_died_are_released(engine: Engine) -> None:
    ended = subprocess.Popen(["true"])
    ended.wait()
    dead = f"mqtt:host:1/{ended.pid}@{machine_key()}"
    elsewhere = f"mqtt:host:1/{ended.pid}@000000000000"  # another machine: never judged here
    holders = {"sensor": dead, "meter": dead, "phone": owner_name("mqtt"), "car": elsewhere, "old": ""}
    with engine.begin() as conn:
        for client_id, owner in holders.items():
            mqtt.save_session(
                conn,
                mqtt.StoredSession(
                    client_id, mqtt.queue_for(client_id), "alice", False, 4, "a:1", 1, 1, owner=owner
                ),
            )
        assert mqtt.find_session(conn, "sensor").owner == dead  # type: ignore[union-attr]
        assert mqtt.release_dead(conn, 500) == 2
        assert [(s.client_id, s.offline_since) for s in mqtt.offline_sessions(conn)] == [
            ("meter", 500),
            ("sensor", 500),
        ]
        assert mqtt.release_dead(conn, 600) == 0
