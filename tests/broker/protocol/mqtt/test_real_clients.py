"""The codec against bytes a real MQTT client writes: Mosquitto's ``mosquitto_pub`` and
``mosquitto_sub`` (3.1 and 3.1.1) talk to a one-connection server made of this codec, which
answers as a broker would. Every packet the clients send must decode to what their command line
asked for, and every answer encoded here must satisfy them (they exit 0 only if it does)."""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Callable

import pytest

from broker.protocol.mqtt import (
    CONNACK_ACCEPTED,
    MQTT_31,
    MQTT_311,
    ConnAck,
    Connect,
    Decoder,
    Disconnect,
    Packet,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Will,
    encode,
)

VERSIONS = {"mqttv31": (MQTT_31, "MQIsdp"), "mqttv311": (MQTT_311, "MQTT")}


def answer(packet: Packet) -> list[Packet]:
    """What a broker says to each packet of these two clients."""
    if isinstance(packet, Connect):
        return [ConnAck(False, CONNACK_ACCEPTED)]
    if isinstance(packet, Publish) and packet.qos == 1:
        return [PubAck(packet.packet_id)]  # type: ignore[arg-type]
    if isinstance(packet, Publish) and packet.qos == 2:
        return [PubRec(packet.packet_id)]  # type: ignore[arg-type]
    if isinstance(packet, PubRel):
        return [PubComp(packet.packet_id)]
    if isinstance(packet, Subscribe):
        return [
            SubAck(packet.packet_id, tuple(q for _, q in packet.topics)),
            Publish(packet.topics[0][0], b"to you", qos=1, packet_id=7),
        ]
    return []


def converse(command: Callable[[int], list[str]]) -> list[Packet]:
    """Run the client against a one-connection server; the packets it sent, in order."""
    received: list[Packet] = []
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(30)

        def serve() -> None:
            connection, _ = listener.accept()
            decoder = Decoder()
            with connection:
                while data := connection.recv(65536):
                    for packet in decoder.feed(data):
                        received.append(packet)
                        for reply in answer(packet):
                            connection.sendall(encode(reply))
                        if isinstance(packet, Disconnect):
                            return

        server = threading.Thread(target=serve)
        server.start()
        done = subprocess.run(command(listener.getsockname()[1]), capture_output=True, text=True, timeout=30)
        server.join(30)
    assert done.returncode == 0, done.stderr
    return received


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("qos", [0, 1, 2])
def test_mosquitto_pub(version: str, qos: int) -> None:
    level, name = VERSIONS[version]
    packets = converse(
        lambda port: (
            f"mosquitto_pub -h 127.0.0.1 -p {port} -V {version} -i codec-test -k 42 -u alice -P s3cret "
            "--will-topic wills/codec --will-payload gone --will-qos 1 --will-retain "
            f"-t a/ü/b -m hello -q {qos} -r"
        ).split()
    )
    connect, publish, *rest = packets
    assert connect == Connect(
        name, level, "codec-test", True, 42, Will("wills/codec", b"gone", 1, True), "alice", b"s3cret"
    )
    assert publish == Publish("a/ü/b", b"hello", qos, True, False, publish.packet_id)
    assert (publish.packet_id is None) == (qos == 0)
    assert rest == ([PubRel(publish.packet_id)] if qos == 2 else []) + [Disconnect()]  # type: ignore[arg-type]


@pytest.mark.parametrize("version", VERSIONS)
def test_mosquitto_sub(version: str) -> None:
    level, name = VERSIONS[version]
    packets = converse(
        lambda port: (
            f"mosquitto_sub -h 127.0.0.1 -p {port} -V {version} -i codec-sub -t sport/+/score/# -q 2 -C 1"
        ).split()
    )
    connect, subscribe, *rest = packets
    assert connect == Connect(name, level, "codec-sub", True, 60)
    assert isinstance(subscribe, Subscribe)
    assert subscribe.topics == (("sport/+/score/#", 2),)
    assert rest == [PubAck(7), Disconnect()]
