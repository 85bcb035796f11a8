"""MQTT sessions in SQL: when each went offline, which are offline, what was dropped."""

from __future__ import annotations

from sqlalchemy import Engine

from broker.store import mqtt


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
