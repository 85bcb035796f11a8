"""Connection-level faults close the offending connection, and only it."""

from __future__ import annotations

import pytest

from broker.protocol.mqtt import CONNACK_UNACCEPTABLE_VERSION, ConnAck, Connect, PingReq, Publish
from tests.broker.service.mqtt.clients import MqttBroker, Paho, Raw, Received, protocol_error

CONNECT_LEVEL_6 = bytes([0x10, 13, 0, 4]) + b"MQTT" + bytes([6, 2, 0, 60, 0, 1]) + b"x"
FAULTS = {
    "packet before CONNECT": lambda raw: raw.send(PingReq()),
    "second CONNECT": lambda raw: (raw.connect("twice"), raw.send(Connect("MQTT", 4, "twice", True, 60))),
    "oversize packet": lambda raw: (raw.connect("big"), raw.send_bytes(b"\x30\xff\xff\xff\x7f")),
    "PUBREL with flags 0": lambda raw: (raw.connect("flags"), raw.send_bytes(b"\x60\x02\x00\x01")),
    "reserved packet type 0": lambda raw: (raw.connect("zero"), raw.send_bytes(b"\x00\x00")),
    "QoS 3": lambda raw: (raw.connect("qos3"), raw.send_bytes(b"\x36\x05\x00\x01a\x00\x01")),
    "wildcard in a topic name": lambda raw: (raw.connect("wild"), raw.send_bytes(b"\x30\x03\x00\x01#")),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_the_connection_is_closed_and_others_carry_on(broker: MqttBroker, fault: str) -> None:
    bystander = Paho(broker.port, "bystander")
    bystander.connect()
    bystander.subscribe(("news", 1))
    raw = Raw(broker.port)
    FAULTS[fault](raw)
    assert protocol_error(raw)
    other = Paho(broker.port, "other")
    other.connect()
    other.publish("news", b"still here", 1)
    assert bystander.receive(1) == [Received("news", b"still here", 1, False)]


def test_an_unacceptable_protocol_level_gets_connack_1_then_close(broker: MqttBroker) -> None:
    raw = Raw(broker.port)
    raw.send_bytes(CONNECT_LEVEL_6)
    assert raw.next() == ConnAck(False, CONNACK_UNACCEPTABLE_VERSION)
    assert protocol_error(raw)


def test_publications_before_connack_are_handled_once_the_session_is_open(broker: MqttBroker) -> None:
    sub = Paho(broker.port, "sub")
    sub.connect()
    sub.subscribe(("early", 1))
    raw = Raw(broker.port)
    raw.send(
        Connect("MQTT", 4, "eager", True, 60, username="alice", password=b"s3cret"),
        Publish("early", b"pipelined", 1, packet_id=1),
    )
    assert raw.next() == ConnAck(False, 0)
    assert raw.next().packet_id == 1  # type: ignore[union-attr]
    assert sub.receive(1) == [Received("early", b"pipelined", 1, False)]
