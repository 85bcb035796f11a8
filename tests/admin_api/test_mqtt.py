"""MQTT sessions over HTTP, as the listener stores them; disconnect and delete carried out by a
real ``broker serve --mqtt`` (another process, as ``broker api`` beside it would be) for real
paho-mqtt clients; the MQTT principals, the admin's."""

from __future__ import annotations

import json
from dataclasses import replace

from broker import store
from broker.core.cluster import Member
from broker.protocol import psc
from broker.protocol.messages import command_message
from broker.protocol.mqtt.packets import NO_PROPERTIES
from broker.store import mqtt, mqtt_requests, nodes
from queues import QueueManager
from queues.ids import now_ms
from tests.admin_api.conftest import Api, assert_problem, start_api
from tests.broker.service.mqtt.clients import MqttBroker, Paho, Received, eventually, stays_down
from tests.e2e.conftest import brokers  # noqa: F401 (the fixture of real broker processes)
from tests.e2e.processes import Brokers

SESSIONS = "/api/v1/mqtt/sessions"
PRINCIPALS = "/api/v1/mqtt/principals"
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
            mqtt.session_key("phone"),
            1,
            [(5, "t", b"x", 1, False, NO_PROPERTIES), (6, "t", b"y", 1, False, NO_PROPERTIES)],
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
            "keepalive": 0,
            "bytes_in": 0,
            "bytes_out": 0,
            "session_expiry": None,
            "receive_maximum": None,
            "topic_alias_maximum": None,
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
            "keepalive": 0,
            "bytes_in": 0,
            "bytes_out": 0,
            "session_expiry": None,
            "receive_maximum": None,
            "topic_alias_maximum": None,
        },
    ]


def test_one_session_with_its_subscriptions_keepalive_and_bytes(api: Api) -> None:
    with api.qm.unit_of_work() as uow:
        stored = mqtt.StoredSession(
            "meter/7",
            mqtt.queue_for("meter/7"),
            "alice",
            False,
            3,
            "10.0.0.9:1",
            1,
            2,
            owner="m1",
            keepalive=30,
        )
        mqtt.save_session(uow.connection, stored)
        options = 0b1100 | 9 << mqtt.ID_SHIFT  # 5.0's No Local, Retain As Published, Subscription Identifier
        mqtt.grant(uow.connection, "meter/7", [("tariff/#", 1), ("cmd/meter/7", options)])
        mqtt.record_traffic(uow.connection, "m1", {"meter/7": (1066, 13, 0)})
    found = api.get(f"{SESSIONS}/meter%2F7", "viewer").json()
    assert (found["client_id"], found["protocol_version"], found["keepalive"]) == ("meter/7", "3.1", 30)
    assert (found["bytes_in"], found["bytes_out"], found["queued"], found["in_flight"]) == (1066, 13, 0, 0)
    assert found["subscriptions"] == [
        {
            "filter": "cmd/meter/7",
            "qos": 0,
            "no_local": True,
            "retain_as_published": True,
            "subscription_identifier": 9,
        },
        {
            "filter": "tariff/#",
            "qos": 1,
            "no_local": False,
            "retain_as_published": False,
            "subscription_identifier": None,
        },
    ]
    assert sessions(api)["meter/7"] == {k: v for k, v in found.items() if k != "subscriptions"}
    assert_problem(api.get(f"{SESSIONS}/nobody", "viewer"), 404, "MQRC_UNKNOWN_OBJECT_NAME")


def test_an_mqtt5_sessions_expiry_and_its_clients_limits_are_shown(api: Api) -> None:
    stored = mqtt.StoredSession("v3", mqtt.queue_for("v3"), "alice", False, 4, "10.0.0.9:1", 1, 2)
    v5 = replace(stored, client_id="v5", queue=mqtt.queue_for("v5"), protocol_level=5, expiry=3600)
    with api.qm.unit_of_work() as uow:
        mqtt.save_session(uow.connection, replace(v5, receive_maximum=20, topic_alias_maximum=4))
        mqtt.save_session(uow.connection, stored)
    shown = api.get(f"{SESSIONS}/v5", "viewer").json()
    limits = ("session_expiry", "receive_maximum", "topic_alias_maximum")
    assert [shown[name] for name in ("protocol_version", *limits)] == ["5.0", 3600, 20, 4]
    assert [sessions(api)["v3"][name] for name in limits] == [None, None, None]


def test_an_admin_adds_sets_and_removes_principals_and_no_password_is_ever_shown(api: Api) -> None:
    for role in ("viewer", "operator"):
        assert_problem(api.get(PRINCIPALS, role), 403)
        assert_problem(api.post(PRINCIPALS, role, json={"user": "sensor1", "password": "first"}), 403)
    added = api.post(PRINCIPALS, json={"user": "sensor1", "password": "first secret"})
    assert added.status_code == 201, added.text
    assert added.json().keys() == {"user", "created_at"} and added.headers["location"].endswith("/sensor1")
    again = assert_problem(
        api.post(PRINCIPALS, json={"user": "sensor1", "password": "other"}),
        409,
        "MQRCCF_OBJECT_ALREADY_EXISTS",
    )
    assert again["detail"] == "MQTT principal sensor1 exists already"
    assert api.get(PRINCIPALS).json() == [added.json()]
    assert stored_password(api, "sensor1", "first secret")

    assert_problem(
        api.request("PUT", f"{PRINCIPALS}/sensor1/password", "operator", json={"password": "x"}), 403
    )
    changed = api.request("PUT", f"{PRINCIPALS}/sensor1/password", json={"password": " second secret "})
    assert changed.status_code == 204, changed.text
    assert stored_password(api, "sensor1", " second secret ")  # as typed, blanks included
    missing = api.request("PUT", f"{PRINCIPALS}/nobody/password", json={"password": "x"})
    assert assert_problem(missing, 404, "MQRC_UNKNOWN_OBJECT_NAME")["detail"] == "no MQTT principal nobody"
    long = "z" * 1025
    for bad in ({"password": ""}, {"password": long}, {"password": 5}, {"password": "x", "echo": 1}):
        refused = api.request("PUT", f"{PRINCIPALS}/sensor1/password", json=bad)
        assert_problem(refused, 422)
        assert long not in refused.text
    assert (
        "at most 1,024 characters"
        in api.request("PUT", f"{PRINCIPALS}/sensor1/password", json={"password": long}).text
    )
    assert_problem(api.post(PRINCIPALS, json={"user": "averyverylongname", "password": "x"}), 422)

    assert api.delete(f"{PRINCIPALS}/sensor1", "operator").status_code == 403
    assert api.delete(f"{PRINCIPALS}/sensor1").status_code == 204
    assert_problem(api.delete(f"{PRINCIPALS}/sensor1"), 404, "MQRC_UNKNOWN_OBJECT_NAME")
    assert api.get(PRINCIPALS).json() == []
    entries = api.get("/api/v1/audit", "admin").json()["items"]
    written = [(e["method"], e["status"], e["summary"]) for e in entries if "/principals" in e["path"]]
    assert ("POST", 201, {"user": "sensor1"}) in written and ("DELETE", 204, {"user": "sensor1"}) in written
    assert ("PUT", 204, {"user": "sensor1"}) in written
    assert "secret" not in json.dumps(entries)


def stored_password(api: Api, user: str, password: str) -> bool:
    with api.qm.reading() as conn:
        hashed = mqtt.password_hash(conn, user)
    return hashed is not None and password not in hashed and mqtt.verify_password(password.encode(), hashed)


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
