"""A client that does not read: its QoS 0 deliveries are dropped past its output bound, its
QoS 1/2 ones wait on its session queue, and nobody else waits for it."""

from __future__ import annotations

import socket
import time

from broker.protocol.mqtt import (
    ConnAck,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
)
from broker.store import mqtt
from tests.broker.service.mqtt.clients import MqttBroker, Paho, Raw, eventually
from tests.broker.service.mqtt.flood import Publisher, connect, subscribe
from tests.broker.service.mqtt.test_flood import rss_mb
from tests.e2e.processes import Brokers

BOUND = 65536
FLOOD = 200  # QoS 0 publications of 32 KiB: more than the kernel's buffers and the bound
PROMPT_SECONDS = 3.0


def _flooded(broker: MqttBroker, pub: Paho, fast: Paho) -> None:
    """Enough QoS 0 to fill the slow client's socket and pass the bound; the fast client
    gets every one of them. Each is received before the next is put: the bound applies to
    the fast client too, and a loaded machine could leave it behind by more than 64 KiB."""
    payload = bytes(32 * 1024)
    for n in range(FLOOD):
        pub.publish("load/0", n.to_bytes(4, "big") + payload, 0)
        (got,) = fast.receive(1, timeout=30)
        assert got.payload[:4] == n.to_bytes(4, "big")
    assert eventually(lambda: bool(broker.process.lines("mqtt deliveries dropped: client not reading")), 30)


def _read_everything(slow: Raw) -> list[Publish]:
    """Read until quiet, acknowledging as a client does (QoS 2: PUBREC, then PUBCOMP)."""
    received: list[Publish] = []
    while True:
        try:
            packet = slow.next(timeout=3.0)
        except TimeoutError:
            return received
        if isinstance(packet, Publish):
            received.append(packet)
            if packet.qos == 1:
                slow.send(PubAck(packet.packet_id or 0))
            elif packet.qos == 2:
                slow.send(PubRec(packet.packet_id or 0))
        elif isinstance(packet, PubRel):
            slow.send(PubComp(packet.packet_id))


def test_a_client_that_does_not_read_stalls_nobody_and_gets_its_qos_1_and_2_later(brokers: Brokers) -> None:
    broker = MqttBroker(brokers, BROKER_MQTT_MAX_OUTPUT_BYTES=str(BOUND), BROKER_MQTT_MAX_INFLIGHT="2")
    slow = Raw(broker.port, receive_buffer=4096)
    assert slow.connect("slow") == ConnAck(False, 0)
    slow.send(Subscribe(1, (("load/#", 2),)))
    assert slow.next() == SubAck(1, (2,))
    fast = Paho(broker.port, "fast")
    fast.connect()
    assert fast.subscribe(("load/#", 2)) == [2]
    pub = Paho(broker.port, "pub")
    pub.connect()

    _flooded(broker, pub, fast)
    for qos in (1, 2, 0, 1, 2):  # the fast client gets each at once, whatever the slow one does
        sent = time.monotonic()
        pub.publish(f"load/{qos}", f"late {qos} {sent}".encode(), qos)
        (got,) = fast.receive(1)
        assert (got.topic, got.qos) == (f"load/{qos}", qos)
        assert time.monotonic() - sent < PROMPT_SECONDS

    queue = mqtt.queue_for("slow")
    assert broker.qm.depth(queue) >= 2  # beyond its window of 2, they wait on its session queue
    received = _read_everything(slow)
    late = [p for p in received if p.payload.startswith(b"late")]
    assert [(p.topic, p.qos) for p in late if p.qos] == [("load/1", 1), ("load/2", 2)] * 2
    flood = [p for p in received if p.topic == "load/0" and not p.payload.startswith(b"late")]
    assert 0 < len(flood) < FLOOD  # some got through before the bound, the rest were dropped
    assert broker.qm.depth(queue) == 0
    slow.close()
    fast.close()
    pub.close()


def test_the_output_bound_holds_to_within_one_message_whatever_the_batch(brokers: Brokers) -> None:
    """A publisher flat out, so that the broker routes in large batches: what waits unsent for
    the client that does not read never passes the bound by more than one message, and the
    broker's memory comes back once that client has gone."""
    broker = MqttBroker(brokers, BROKER_MQTT_MAX_OUTPUT_BYTES=str(BOUND))
    payload = 32 * 1024
    before = rss_mb(broker.process.pid)
    stalled = connect(broker.port, "stalled")
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    subscribe(stalled, "big/#")
    publisher = Publisher(broker.port, "big-publisher", "big/x", payload=payload)
    publisher.run(2.0)
    assert publisher.error is None and publisher.sent > 100
    assert eventually(lambda: bool(broker.process.lines("mqtt deliveries dropped: client not reading")), 30)
    unsent = [
        line["unsent_bytes"] for line in broker.process.lines("mqtt deliveries dropped: client not reading")
    ]
    assert max(unsent) <= BOUND + payload + 64, unsent  # the bound, one message and its header
    stalled.close()
    assert eventually(lambda: rss_mb(broker.process.pid) < before + 30, 10), (
        before,
        rss_mb(broker.process.pid),
    )
