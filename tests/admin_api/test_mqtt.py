"""MQTT sessions over HTTP, as the listener stores them."""

from __future__ import annotations

from broker.client import command_message
from broker.protocol import psc
from broker.store import mqtt
from queues.ids import now_ms
from tests.admin_api.conftest import Api

SESSIONS = "/api/v1/mqtt/sessions"


def test_sessions_listed_with_what_is_in_flight_and_queued(api: Api) -> None:
    queue = mqtt.queue_for("phone")
    api.qm.define_queue(queue)
    with api.qm.unit_of_work() as uow:
        for client_id, clean in (("phone", False), ("sensor", True)):
            mqtt.save_session(
                uow.connection,
                mqtt.StoredSession(
                    client_id, mqtt.queue_for(client_id), "alice", clean, 4, "10.0.0.7:5000", 1, 2
                ),
            )
        mqtt.store_outbound(uow.connection, "phone", [mqtt.OutboundRow(5, "t", b"x", 1, False, False)])
        uow.put(queue, command_message(psc.parse("<psc><Command>Publish</Command><Topic>t</Topic></psc>")))
        mqtt.set_offline(uow.connection, now_ms(), ["phone"])
        mqtt.count_dropped(uow.connection, "phone", 2)
    found = api.get(SESSIONS, "viewer").json()
    assert found[0].pop("offline_since") >= now_ms() - 60_000  # when set_offline ran
    assert found == [
        {
            "client_id": "phone",
            "user": "alice",
            "address": "10.0.0.7:5000",
            "since": 2,
            "protocol_version": "3.1.1",
            "clean_session": False,
            "connected": False,
            "in_flight": 1,
            "queued": 1,
            "queue": queue,
            "dropped": 2,
        },
        {
            "client_id": "sensor",
            "user": "alice",
            "address": "10.0.0.7:5000",
            "since": 2,
            "protocol_version": "3.1.1",
            "clean_session": True,
            "connected": True,
            "in_flight": 0,
            "queued": 0,
            "queue": mqtt.queue_for("sensor"),
            "offline_since": 0,
            "dropped": 0,
        },
    ]
