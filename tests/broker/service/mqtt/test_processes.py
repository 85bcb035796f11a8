"""Several MQTT listener processes on one port (``mqtt_processes``): a client id taken over on
another process closes the first connection there, and the session carries on."""

from __future__ import annotations

from broker.protocol.mqtt import ConnAck, PubAck, Publish, SubAck, Subscribe
from tests.broker.service.mqtt.clients import MqttBroker, Paho, Raw, eventually
from tests.e2e.processes import Brokers

ATTEMPTS = 40  # the kernel spreads connections over the two processes: one lands elsewhere soon


def _holder(broker: MqttBroker, client_id: str) -> int:
    """The pid of the listener process that connected ``client_id`` last."""
    connected = [e for e in broker.process.lines("mqtt client connected") if e.get("client_id") == client_id]
    return int(connected[-1]["pid"])


def _payloads(raw: Raw, count: int) -> list[bytes]:
    """The next ``count`` publications, each acknowledged (the window is one message)."""
    got = []
    while len(got) < count:
        packet = raw.next()
        if isinstance(packet, Publish):
            got.append(packet.payload)
            raw.send(PubAck(packet.packet_id or 0))
    return got


def test_a_client_id_taken_over_on_another_process_keeps_its_session(brokers: Brokers) -> None:
    broker = MqttBroker(brokers, BROKER_MQTT_PROCESSES="2", BROKER_MQTT_MAX_INFLIGHT="1")
    assert eventually(lambda: len(broker.process.lines("mqtt listener started")) == 2, 60)
    first = Raw(broker.port)
    assert first.connect("device", clean=False) == ConnAck(False, 0)
    first.send(Subscribe(1, (("cmd/#", 1),)))
    assert first.next() == SubAck(1, (1,))
    pub = Paho(broker.port, "pub")
    pub.connect()
    for n in range(3):
        pub.publish("cmd/x", f"m{n}".encode(), 1)
    assert first.next() == Publish("cmd/x", b"m0", 1, False, packet_id=1)  # m1, m2: beyond the window

    holder = _holder(broker, "device")
    for _ in range(ATTEMPTS):  # one landing on the same process takes over there: try again
        second = Raw(broker.port)
        assert second.connect("device", clean=False) == ConnAck(True, 0)
        if _holder(broker, "device") != holder:
            break
        first = second
    else:
        raise AssertionError(f"no connection landed on the second process in {ATTEMPTS} attempts")

    assert first.closed_by_broker()
    assert _payloads(second, 3) == [b"m0", b"m1", b"m2"]  # m0 again (not acknowledged), then the rest
    pub.publish("cmd/y", b"after", 1)
    assert _payloads(second, 1) == [b"after"]  # its subscription moved with it
    second.close()
    pub.close()
