"""MQTT sessions over HTTP, as the listener stores them; disconnect and delete carried out by a
real ``broker serve --mqtt`` (another process, as ``broker api`` beside it would be) for real
paho-mqtt clients."""

from __future__ import annotations

from broker import store
from broker.core.cluster import Member
from broker.protocol import psc
from broker.protocol.messages import command_message
from broker.store import mqtt, mqtt_requests, nodes
from queues import QueueManager
from queues.ids import now_ms
from tests.admin_api.conftest import Api, assert_problem, start_api
from tests.broker.service.mqtt.clients import MqttBroker, Paho, Received, eventually, stays_down
from tests.e2e.conftest import brokers  # noqa: F401 (the fixture of real broker processes)
from tests.e2e.processes import Brokers

SESSIONS = "/api/v1/mqtt/sessions"
CLIENTS = "/api/v1/mqtt/clients"


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
        run = mqtt.OutboundRun.new(
            mqtt.session_key("phone"), 1, [(5, "t", b"x", 1, False), (6, "t", b"y", 1, False)]
        )
        run.acknowledge(0)
        mqtt.store_runs(uow.connection, [run])
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
            "node": "",
            "in_flight": 1,
            "queued": 1,
            "queue": queue,
            "dropped": 2,
            "refused": 0,
        },
        {
            "client_id": "sensor",
            "user": "alice",
            "address": "10.0.0.7:5000",
            "since": 2,
            "protocol_version": "3.1.1",
            "clean_session": True,
            "connected": True,
            "node": "",
            "in_flight": 0,
            "queued": 0,
            "queue": mqtt.queue_for("sensor"),
            "offline_since": 0,
            "dropped": 0,
            "refused": 0,
        },
    ]


def test_the_cluster_view_and_the_node_holding_each_client(api: Api) -> None:
    now = now_ms()
    with api.qm.unit_of_work() as uow:
        for owner, node, beat_at in (
            ("a1", "a:1883", now),
            ("b1", "b:1883", now - 60_000),
            ("c1", "c:1883", 5),
        ):
            nodes.register(uow.connection, Member(owner, node, f"mqtt://{node}", 5, 1, beat_at, 2))
        nodes.declare_dead(uow.connection, "c1", None, now)
        mqtt.save_session(
            uow.connection,
            mqtt.StoredSession(
                "car", mqtt.queue_for("car"), "alice", True, 4, "10.0.0.8:1", 1, 2, owner="a1"
            ),
        )
    assert api.get("/api/v1/mqtt/nodes", "viewer").json() == [
        {"name": "a:1883", "state": "alive", "clients": 2, "processes": 1, "last_heartbeat": now,
         "started_at": 5, "address": "mqtt://a:1883"},
        {"name": "b:1883", "state": "silent", "clients": 2, "processes": 1, "last_heartbeat": now - 60_000,
         "started_at": 5, "address": "mqtt://b:1883"},
        {"name": "c:1883", "state": "dead", "clients": 0, "processes": 0, "last_heartbeat": 5,
         "started_at": 5, "address": "mqtt://c:1883"},
    ]  # fmt: skip
    assert sessions(api)["car"]["node"] == "a:1883"


def sessions(api: Api) -> dict[str, dict[str, object]]:
    return {s["client_id"]: s for s in api.get(SESSIONS, "viewer").json()}


def test_an_operator_disconnects_a_client_and_deletes_its_session(
    api: Api,
    brokers: Brokers,  # noqa: F811
) -> None:
    broker = MqttBroker(brokers)
    watcher = Paho(broker.port, "watcher")
    watcher.connect()
    watcher.subscribe(("wills/#", 1))
    device = Paho(broker.port, "dev/1", clean=False, will=("wills/dev1", b"gone", 1, False))
    gone = stays_down(device)
    assert device.connect() == (0, False)
    assert device.subscribe(("cmd/#", 1)) == [1]

    assert_problem(api.post(f"{CLIENTS}/dev%2F1/disconnect", "viewer"), 403)
    accepted = api.post(f"{CLIENTS}/dev%2F1/disconnect", "operator")
    assert accepted.status_code == 202, accepted.text
    assert (accepted.json()["client_id"], accepted.json()["connected"]) == ("dev/1", True)
    assert gone.wait(5)  # the listener polls the requests every 0.25 s
    assert watcher.receive(1) == [Received("wills/dev1", b"gone", 1, False)]  # not a DISCONNECT
    assert eventually(lambda: sessions(api)["dev/1"]["connected"] is False)
    assert_problem(api.post(f"{CLIENTS}/dev%2F1/disconnect", "operator"), 404, "MQRC_UNKNOWN_OBJECT_NAME")
    entry = api.get("/api/v1/audit", "admin").json()["items"][0]
    assert (entry["principal"], entry["status"], entry["summary"]["client_id"]) == ("otto", 404, "dev/1")

    # The persistent session is kept; deleting it while connected disconnects the client first.
    device = Paho(broker.port, "dev/1", clean=False, will=("wills/dev1", b"again", 1, False))
    gone = stays_down(device)
    assert device.connect() == (0, True)
    watcher.publish("cmd/reboot", b"now", 1)
    assert device.receive(1)[0].payload == b"now"
    assert_problem(api.delete(f"{SESSIONS}/dev%2F1", "viewer"), 403)
    deleted = api.delete(f"{SESSIONS}/dev%2F1", "operator")
    assert deleted.status_code == 204, deleted.text
    assert gone.is_set() and watcher.receive(1)[0].payload == b"again"
    assert "dev/1" not in sessions(api)
    with api.qm.reading() as conn:
        assert store.list_subscriptions(conn, store.SubscriptionFilter(queue=mqtt.queue_for("dev/1"))) == []
    assert mqtt.queue_for("dev/1") not in [q.name for q in api.qm.list_queues("SYSTEM.MQTT.*")]
    assert_problem(api.delete(f"{SESSIONS}/dev%2F1", "operator"), 404, "MQRC_UNKNOWN_OBJECT_NAME")
    returning = Paho(broker.port, "dev/1", clean=False)
    assert returning.connect() == (0, False)  # a new session: nothing of the old one
    watcher.publish("cmd/reboot", b"later", 1)
    assert returning.nothing_more()
    returning.close()
    watcher.close()
    assert broker.process.lines("mqtt session deleted by an operator")[0]["client_id"] == "dev/1"


def test_deleting_a_session_with_no_listener_running_is_503_and_withdrawn(qm: QueueManager) -> None:
    with qm.unit_of_work() as uow:
        phone = mqtt.StoredSession("phone", mqtt.queue_for("phone"), "alice", False, 4, "a:1", 1, 2)
        mqtt.save_session(uow.connection, phone)
        mqtt.set_offline(uow.connection, now_ms(), ["phone"])
    with start_api(qm, command_timeout=0.5) as api:  # how long the API waits for the broker
        problem = assert_problem(api.delete(f"{SESSIONS}/phone", "operator"), 503, "MQRC_Q_MGR_NOT_AVAILABLE")
        assert "withdrawn" in problem["detail"]
        assert "phone" in sessions(api)
    with qm.reading() as conn:
        assert mqtt_requests.pending(conn) == []
