"""SIGKILL the broker 20 times while persistent-session clients publish and receive at QoS 1
and 2: no QoS 1 publication is lost, no QoS 2 one is lost or delivered twice.

The publisher is a raw client that keeps the QoS 1 / 2 flows exactly as MQTT says: after each
reconnection it sends again, in order, PUBLISH (DUP=1) for what is not acknowledged and PUBREL
for what is PUBREC'd. (paho-mqtt 2.2 does not, in one case: a PUBREL being resent when the
connection drops again is sent the next time as a PUBLISH, a new message for any server.) The
subscriber is paho-mqtt, whose receiving side keeps its QoS 2 state across reconnections.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, OrderedDict
from dataclasses import replace
from typing import Any

import paho.mqtt.client as paho

from broker.protocol.mqtt import ConnAck, PubAck, PubComp, Publish, PubRec, PubRel
from tests.broker.service.mqtt.clients import PASSWORD, MqttBroker, Raw, eventually

KILLS = 20
PER_ROUND = 0.4  # seconds of publishing between two kills


class Publisher:
    """A persistent-session publisher that reconnects by itself and finishes every flow."""

    def __init__(self, port: int, client_id: str) -> None:
        self.port = port
        self.client_id = client_id
        self.pending: OrderedDict[int, tuple[Publish, bool]] = OrderedDict()  # id -> (packet, PUBREC'd)
        self.lock = threading.Lock()
        self.raw: Raw | None = None
        self.next_id = 1
        self.stopping = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def publish(self, topic: str, payload: bytes, qos: int) -> None:
        with self.lock:
            packet = Publish(topic, payload, qos, packet_id=self.next_id)
            self.next_id += 1
            self.pending[packet.packet_id] = (packet, False)  # type: ignore[index]
            self._send(packet)

    def _send(self, *packets: Any) -> None:
        if self.raw is not None:
            try:
                self.raw.send(*packets)
            except OSError:
                self.raw = None

    def _run(self) -> None:
        while not self.stopping:
            try:
                raw = Raw(self.port)
                if raw.connect(self.client_id, clean=False) != ConnAck(True, 0) and self.next_id > 1:
                    raise AssertionError("the session was lost")
                with self.lock:
                    self.raw = raw
                    for packet, released in self.pending.values():
                        self._send(PubRel(packet.packet_id) if released else replace(packet, dup=True))  # type: ignore[arg-type]
                while True:
                    self._acknowledged(raw.next(timeout=60))
            except (OSError, ConnectionError):
                with self.lock:
                    self.raw = None
                time.sleep(0.2)

    def _acknowledged(self, packet: Any) -> None:
        with self.lock:
            if isinstance(packet, PubAck | PubComp):
                self.pending.pop(packet.packet_id, None)
            elif isinstance(packet, PubRec) and packet.packet_id in self.pending:
                self.pending[packet.packet_id] = (self.pending[packet.packet_id][0], True)
                self._send(PubRel(packet.packet_id))

    def done(self) -> bool:
        with self.lock:
            return not self.pending


class Subscriber:
    """paho-mqtt with a persistent session, reconnecting by itself after each kill."""

    def __init__(self, port: int, client_id: str) -> None:
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=False)
        self.client.username_pw_set("alice", PASSWORD)
        self.client.reconnect_delay_set(min_delay=1, max_delay=1)
        self.received: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.subscribed = threading.Event()
        self.client.on_message = self._on_message
        self.client.on_subscribe = lambda *_: self.subscribed.set()
        self.client.connect("127.0.0.1", port, keepalive=30)
        self.client.loop_start()

    def _on_message(self, _c: Any, _u: Any, msg: Any) -> None:
        with self.lock:
            self.received[msg.payload.decode()] += 1

    def counts(self) -> Counter[str]:
        with self.lock:
            return Counter(self.received)


def test_no_qos1_lost_and_no_qos2_lost_or_doubled_across_20_kills(broker: MqttBroker) -> None:
    subscriber = Subscriber(broker.port, "survivor-sub")
    subscriber.client.subscribe([("q1/#", 1), ("q2/#", 2)])
    assert subscriber.subscribed.wait(10)
    publisher = Publisher(broker.port, "survivor-pub")
    assert eventually(lambda: publisher.raw is not None)
    expected: dict[str, int] = {}
    for _ in range(KILLS):
        deadline = time.monotonic() + PER_ROUND
        while time.monotonic() < deadline:
            number = len(expected)
            qos = 1 + number % 2
            publisher.publish(f"q{qos}/{number}", str(number).encode(), qos)
            expected[str(number)] = qos
            time.sleep(0.01)
        broker.restart(kill=True)
    assert eventually(publisher.done, timeout=60)
    assert eventually(lambda: set(subscriber.counts()) >= set(expected), timeout=120), sorted(
        set(expected) - set(subscriber.counts()), key=int
    )[:20]
    time.sleep(2)  # anything sent twice has arrived by now
    counts = subscriber.counts()
    assert [n for n, qos in expected.items() if qos == 2 and counts[n] != 1] == []
    assert broker.process.starts == KILLS + 1
    publisher.stopping = True
    subscriber.client.loop_stop()
