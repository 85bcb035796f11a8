"""Operators' requests to the MQTT listeners in SQL: written by one process, taken by exactly
one listener, lapsed when nobody takes them; and what the API and the CLI call on top."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import Engine

from broker.store import mqtt, mqtt_requests
from broker.store.mqtt_requests import DELETE, DISCONNECT, ListenerNotAnswering, NoSuchSession
from queues import QueueManager
from queues.ids import now_ms


@pytest.fixture
def qm(engine: Engine) -> QueueManager:
    return QueueManager(engine)


def save(qm: QueueManager, client_id: str, *, online: bool = True) -> None:
    with qm.unit_of_work() as uow:
        session = mqtt.StoredSession(client_id, mqtt.queue_for(client_id), "alice", False, 4, "a:1", 5, 6)
        mqtt.save_session(uow.connection, session)
        if not online:
            mqtt.set_offline(uow.connection, now_ms(), [client_id])


def test_a_request_is_taken_once_and_lapses_when_nobody_wants_it(qm: QueueManager) -> None:
    with qm.unit_of_work() as uow:
        first = mqtt_requests.request(uow.connection, "sensor", DISCONNECT, "x" * 200, now_ms())
        mqtt_requests.request(uow.connection, "phone", DISCONNECT, "old", now_ms() - 60_000)
        mqtt_requests.request(uow.connection, "tablet", DISCONNECT, "recent", now_ms())
    taken = mqtt_requests.take_requests(qm, lambda r: r.client_id == "sensor")
    assert [(r.id, r.client_id, len(r.reason)) for r in taken] == [(first, "sensor", 128)]
    assert mqtt_requests.take_requests(qm, lambda r: r.client_id == "sensor") == []  # taken: gone
    with qm.reading() as conn:  # the lapsed one for the phone went with the look; the tablet's waits
        assert [r.client_id for r in mqtt_requests.pending(conn)] == ["tablet"]
    with qm.unit_of_work() as uow:  # a second listener that looked at the same rows takes nothing
        stale = mqtt_requests.pending(uow.connection)
        assert mqtt_requests.take(uow.connection, stale) == stale
        assert mqtt_requests.take(uow.connection, stale) == []


def test_disconnect_asks_for_a_connected_client_only(qm: QueueManager) -> None:
    save(qm, "sensor")
    save(qm, "phone", online=False)
    assert mqtt_requests.disconnect(qm, "sensor", "by alice").client_id == "sensor"
    for client_id in ("phone", "nobody"):
        with pytest.raises(NoSuchSession) as refused:
            mqtt_requests.disconnect(qm, client_id, "by alice")
        assert refused.value.reason == 2085 and "no connected MQTT client" in str(refused.value)
    with qm.reading() as conn:
        assert [(r.client_id, r.action, r.reason) for r in mqtt_requests.pending(conn)] == [
            ("sensor", DISCONNECT, "by alice")
        ]


def test_delete_session_waits_for_a_listener_and_is_withdrawn_without_one(qm: QueueManager) -> None:
    save(qm, "sensor", online=False)
    with pytest.raises(NoSuchSession):
        mqtt_requests.delete_session(qm, "nobody", "by alice", timeout=0.1)
    with pytest.raises(ListenerNotAnswering) as unanswered:
        mqtt_requests.delete_session(qm, "sensor", "by alice", timeout=0.3)
    assert unanswered.value.reason == 2059 and "withdrawn" in str(unanswered.value)
    with qm.reading() as conn:
        assert mqtt_requests.pending(conn) == []

    def listener() -> None:  # takes the request, then deletes the session as the gateway does
        while not (taken := mqtt_requests.take_requests(qm, lambda r: r.action == DELETE)):
            time.sleep(0.05)
        with qm.unit_of_work() as uow:
            mqtt.delete_session(uow.connection, taken[0].client_id)

    thread = threading.Thread(target=listener)
    thread.start()
    assert mqtt_requests.delete_session(qm, "sensor", "by alice", timeout=10).client_id == "sensor"
    thread.join(10)
    with qm.reading() as conn:
        assert mqtt.find_session(conn, "sensor") is None


def test_refusals_are_counted_per_session(qm: QueueManager) -> None:
    save(qm, "sensor")
    with qm.unit_of_work() as uow:
        mqtt.count_refused(uow.connection, {"sensor": 2})
        mqtt.count_refused(uow.connection, {"sensor": 0, "unknown": 5})
        mqtt.count_refused(uow.connection, {"sensor": 1})
    with qm.reading() as conn:
        assert [s.refused for s in mqtt.list_sessions(conn)] == [3]
