"""Session expiry, the queued-message limit of offline sessions and the byte counts of each
connection, on a real ``broker serve --mqtt`` (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from pathlib import Path

import paho.mqtt.client as paho
import pytest
from sqlalchemy import text

from broker.protocol.mqtt import (
    MQTT_31,
    MQTT_311,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PubAck,
    Publish,
    SubAck,
    Subscribe,
    encode,
)
from broker.service.mqtt.housekeeping import period
from broker.store import mqtt as sessions
from tests.broker.cli.test_tokens import run
from tests.broker.service.mqtt.clients import PASSWORD, MqttBroker, Paho, Raw, eventually
from tests.conftest import PostgresDatabases
from tests.e2e.processes import Brokers


def test_a_session_offline_longer_than_the_expiry_goes_with_its_subscriptions_and_messages(
    brokers: Brokers,
) -> None:
    broker = MqttBroker(brokers, BROKER_MQTT_SESSION_EXPIRY="2")
    left(broker, "gone", "fleet/#")
    stays = Paho(broker.port, "stays", clean=False)
    stays.connect()
    stays.subscribe(("fleet/#", 1))
    pub = Paho(broker.port, "pub")
    pub.connect()
    pub.publish("fleet/1", b"queued for gone", 1)
    assert [m.payload for m in stays.receive(1)] == [b"queued for gone"]
    queue = sessions.queue_for("gone")
    assert broker.qm.depth(queue) == 1

    assert eventually(lambda: _stored(broker, "gone") is None, timeout=15)
    # the queue is deleted by the commit that removes the session
    assert queue not in {q.name for q in broker.qm.list_queues("SYSTEM.MQTT.*")}
    assert _stored(broker, "stays") is not None  # connected: never expires
    expired = broker.process.lines("mqtt session expired")
    assert [line["client_id"] for line in expired] == ["gone"]

    again = Paho(broker.port, "gone", clean=False)
    assert again.connect() == (0, False)
    pub.publish("fleet/2", b"after the expiry", 1)
    assert [m.payload for m in stays.receive(1)] == [b"after the expiry"]
    assert again.nothing_more()  # its broker subscription went with it


def test_an_offline_session_keeps_its_newest_messages_and_counts_the_dropped(
    brokers: Brokers, capsys: pytest.CaptureFixture[str]
) -> None:
    broker = MqttBroker(brokers, BROKER_MQTT_MAX_QUEUED="3")
    left(broker, "device", "meter/#")
    pub = Paho(broker.port, "pub")
    pub.connect()
    for number in range(1, 6):
        pub.publish(f"meter/{number}", f"reading {number}".encode(), 1)

    assert eventually(lambda: (s := _stored(broker, "device")) is not None and s.dropped == 2, timeout=15)
    code, out, _ = run(brokers.url, capsys, "mqtt", "sessions", "--json")
    assert code == 0 and {s["client_id"]: s["dropped"] for s in json.loads(out)} == {"device": 2, "pub": 0}
    assert (
        broker.process.lines("mqtt messages dropped: too many queued for an offline session")[0]["dropped"]
        == 2
    )
    device = Paho(broker.port, "device", clean=False)
    assert device.connect() == (0, True)
    assert [m.payload for m in device.receive(3)] == [b"reading 3", b"reading 4", b"reading 5"]
    assert device.nothing_more()


def test_the_pass_runs_four_times_per_expiry_at_most_once_a_minute() -> None:
    assert period(0, 0) == 60  # MQTT 5.0 sessions expire by their own interval
    assert period(2, 0) == 0.5
    assert period(40, 0) == 10
    assert period(86_400, 0) == 60
    assert period(0, 1000) == 5
    assert period(2, 1000) == 0.5


def test_each_connection_s_keepalive_and_bytes_reach_its_session_row(broker: MqttBroker) -> None:
    """The listener counts each connection's bytes exactly as they cross the socket and writes
    them to its session's row every few seconds: the counts of a client still connected, then
    its last ones once it has gone, and those of a client that came and went between two
    writes. A 3.1 client's version and keepalive are recorded too."""
    meter = Paho(broker.port, "meter", clean=False, keepalive=30)
    assert meter.connect() == (0, False)
    assert meter.subscribe(("tariff/#", 1)) == [1]
    meter.publish("readings/1", b"x" * 1000, 1)
    connect = Connect(
        "MQTT", MQTT_311, "meter", False, 30, None, username="alice", password=PASSWORD.encode()
    )
    sent: list[Packet] = [
        connect,
        Subscribe(1, (("tariff/#", 1),)),
        Publish("readings/1", b"x" * 1000, 1, packet_id=2),
    ]
    answered: list[Packet] = [ConnAck(False, 0), SubAck(1, (1,)), PubAck(2)]
    expected = (size(*sent), size(*answered))
    assert eventually(lambda: traffic(broker, "meter") == expected, timeout=15), traffic(broker, "meter")
    stored = _stored(broker, "meter")
    assert stored is not None and (stored.version, stored.keepalive, stored.online) == ("3.1.1", 30, True)

    meter.publish("readings/2", b"y", 1)
    meter.close()
    last = (expected[0] + size(Publish("readings/2", b"y", 1, packet_id=3), Disconnect()), expected[1] + 4)
    assert eventually(lambda: traffic(broker, "meter") == last, timeout=15), traffic(broker, "meter")

    brief = Paho(broker.port, "brief", clean=False, keepalive=0, protocol=paho.MQTTv31)
    assert brief.connect() == (0, False)
    brief.close()
    hello = Connect("MQIsdp", MQTT_31, "brief", False, 0, None, username="alice", password=PASSWORD.encode())
    assert eventually(lambda: traffic(broker, "brief") == (size(hello, Disconnect()), 4), timeout=15)
    stored = _stored(broker, "brief")
    assert stored is not None and (stored.version, stored.keepalive, stored.online) == ("3.1", 0, False)


def test_a_clean_session_s_deliveries_in_flight_are_counted_though_never_stored(broker: MqttBroker) -> None:
    """A session that ends with its connection keeps what is in flight to it in memory alone:
    its listener writes how many with its bytes, and the operators' listing counts them; none
    once they are acknowledged."""
    device = Raw(broker.port)
    assert device.connect("device", clean=True) == ConnAck(False, 0)
    device.send(Subscribe(1, (("cmd/#", 1),)))
    assert device.next() == SubAck(1, (1,))
    publisher = Paho(broker.port, "console")
    publisher.connect()
    for n in range(3):
        publisher.publish(f"cmd/{n}", b"go", 1)
    sent = [device.next() for _ in range(3)]
    assert all(isinstance(p, Publish) and p.qos == 1 for p in sent)
    with broker.qm.reading() as conn:
        assert sessions.unacknowledged(conn, "device") == []  # nothing stored

    assert eventually(lambda: in_flight(broker, "device") == 3, timeout=15), in_flight(broker, "device")
    device.send(*(PubAck(p.packet_id or 0) for p in sent if isinstance(p, Publish)))
    assert eventually(lambda: in_flight(broker, "device") == 0, timeout=15), in_flight(broker, "device")


def in_flight(broker: MqttBroker, client_id: str) -> int | None:
    stored = _stored(broker, client_id)
    return None if stored is None else stored.in_flight


def size(*packets: Packet) -> int:
    return sum(len(encode(packet)) for packet in packets)


def traffic(broker: MqttBroker, client_id: str) -> tuple[int, int] | None:
    stored = _stored(broker, client_id)
    return None if stored is None else (stored.bytes_in, stored.bytes_out)


def left(broker: MqttBroker, client_id: str, topic: str) -> None:
    """A persistent session subscribed to ``topic`` whose client has gone."""
    client = Paho(broker.port, client_id, clean=False)
    client.connect()
    client.subscribe((topic, 1))
    client.close()


def _stored(broker: MqttBroker, client_id: str) -> sessions.StoredSession | None:
    with broker.qm.reading() as conn:
        return next((s for s in sessions.list_sessions(conn) if s.client_id == client_id), None)


def test_on_postgresql_the_tables_every_batch_churns_are_vacuumed_every_second(
    postgres: PostgresDatabases, tmp_path: Path
) -> None:
    url = postgres.create()
    brokers = Brokers(url, tmp_path)
    try:
        broker = MqttBroker(brokers)

        def vacuumed() -> dict[str, int]:
            with broker.qm.engine.connect() as conn:
                statistics = "SELECT relname, vacuum_count FROM pg_stat_user_tables"
                rows = conn.execute(text(f"{statistics} WHERE relname LIKE 'psb_mqtt_%'"))
                return {row.relname: row.vacuum_count for row in rows}

        assert eventually(lambda: vacuumed()["psb_mqtt_outbound_runs"] >= 2, timeout=15)
        counts = vacuumed()
        assert counts["psb_mqtt_inbound"] >= 1
        assert counts["psb_mqtt_sessions"] == 0  # only the tables every batch churns
    finally:
        brokers.close()
        postgres.drop(url)
