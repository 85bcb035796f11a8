"""Bridges to a real Mosquitto (started by each test on a free port) from a real ``broker
serve --mqtt``, on SQLite and PostgreSQL: topics in, out and both with prefixes, no loop,
QoS 1 across a restart of the Mosquitto."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.service.config import ConfigError
from broker.service.mqtt.bridging import BridgeConfig, BridgeTopic, parse, to_local, to_remote
from tests.broker.service.mqtt.clients import Mosquitto, MqttBroker, Paho
from tests.e2e.processes import Brokers


@pytest.fixture
def mosquitto(tmp_path: Path) -> Iterator[Mosquitto]:
    (tmp_path / "mosquitto").mkdir()
    server = Mosquitto(tmp_path / "mosquitto")
    server.start()
    try:
        yield server
    finally:
        if server.process is not None and server.process.poll() is None:
            server.stop()


def bridged(brokers: Brokers, mosquitto: Mosquitto, tmp_path: Path) -> MqttBroker:
    path = tmp_path / "bridges.conf"
    path.write_text(
        "# the estate's Mosquitto\n"
        "connection estate\n"
        f"address 127.0.0.1:{mosquitto.port}\n"
        "topic sensors/# in 1 plant/ site/\n"
        "topic commands/# out 1 hq/ site/\n"
        'topic chat/# both 1 "" ""\n'
    )
    return MqttBroker(brokers, BROKER_MQTT_BRIDGES=str(path))


def test_topics_cross_in_out_and_both_with_their_prefixes_and_never_come_back(
    brokers: Brokers, mosquitto: Mosquitto, tmp_path: Path
) -> None:
    broker = bridged(brokers, mosquitto, tmp_path)
    local = Paho(broker.port, "local")
    local.connect()
    local.subscribe(("#", 1))
    remote = Paho(mosquitto.port, "remote", user=None)
    remote.connect()
    remote.subscribe(("#", 1))
    time.sleep(1.0)  # the bridge connects and subscribes

    remote.publish("site/sensors/t1", b"21.5", 1)
    assert [(m.topic, m.payload, m.qos) for m in local.receive(1)] == [("plant/sensors/t1", b"21.5", 1)]
    local.publish("hq/commands/valve", b"open", 1)
    assert [(m.topic, m.payload) for m in remote.receive(2)] == [
        ("site/sensors/t1", b"21.5"),  # its own
        ("site/commands/valve", b"open"),
    ]
    assert [m.topic for m in local.receive(1)] == ["hq/commands/valve"]  # its own
    remote.publish("chat/from-remote", b"hello", 1)
    local.publish("chat/from-local", b"hi", 1)
    assert sorted(m.topic for m in local.receive(2)) == ["chat/from-local", "chat/from-remote"]
    assert sorted(m.topic for m in remote.receive(2)) == ["chat/from-local", "chat/from-remote"]
    remote.publish("site/other", b"not bridged", 1)
    assert [m.topic for m in remote.receive(1)] == ["site/other"]
    assert local.nothing_more(wait=1.5) and remote.nothing_more(wait=0.1)  # no echo, no loop


def test_qos1_crosses_a_restart_of_the_mosquitto(
    brokers: Brokers, mosquitto: Mosquitto, tmp_path: Path
) -> None:
    broker = bridged(brokers, mosquitto, tmp_path)
    remote = Paho(mosquitto.port, "remote", user=None, clean=False)
    remote.connect()
    remote.subscribe(("site/commands/#", 1))
    remote.close()
    local = Paho(broker.port, "local")
    local.connect()
    time.sleep(1.0)
    mosquitto.stop()
    for number in range(5):
        local.publish(f"hq/commands/{number}", f"command {number}".encode(), 1)
    time.sleep(1.0)  # the bridge has them and cannot send them
    mosquitto.start()
    remote = Paho(mosquitto.port, "remote", user=None, clean=False)
    remote.connect()
    got = remote.receive(5, timeout=30)
    assert sorted(m.payload for m in got) == [f"command {n}".encode() for n in range(5)]
    assert all(m.qos == 1 for m in got)


def test_bridge_files_in_mosquittos_syntax() -> None:
    found = parse(
        "connection a\naddress h:1884\ntopic x/# in 2 l/ r/\ntopic y out\nremote_username u\n"
        "remote_password p\nlocal_username bridger\n\nconnection b\naddress h2\ntopic z\n"
    )
    assert found == [
        BridgeConfig(
            "a",
            "h",
            1884,
            (BridgeTopic("x/#", "in", 2, "l/", "r/"), BridgeTopic("y", "out", 0)),
            "u",
            "p",
            "",
            "bridger",
        ),
        BridgeConfig("b", "h2", 1883, (BridgeTopic("z"),)),
    ]
    topics = found[0].topics
    assert to_local(topics, "r/x/1") == ("l/x/1", 2)
    assert to_local(topics, "y") is None  # out only
    assert to_remote(topics, "y") == ("y", 0)
    assert to_remote(topics, "l/x/1") is None  # in only
    for bad in ("address h", "connection a\ntopic x sideways", "connection a\naddress h\n", "connection a b"):
        with pytest.raises(ConfigError):
            parse(bad)
