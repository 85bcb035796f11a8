"""SIGKILL the broker 20 times while persistent-session clients publish and receive at QoS 1
and 2: no QoS 1 publication is lost, no QoS 2 one is lost or delivered twice.

The publisher keeps the QoS 1 / 2 flows exactly as MQTT says (``StrictPublisher``: paho-mqtt
2.2 does not, in one case); the subscriber is paho-mqtt, whose receiving side keeps its QoS 2
state across reconnections.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import paho.mqtt.client as paho

from tests.broker.service.mqtt.clients import PASSWORD, MqttBroker, StrictPublisher, eventually

KILLS = 20
PER_ROUND = 0.4  # seconds of publishing between two kills


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
    publisher = StrictPublisher(broker.port, "survivor-pub")
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
    publisher.stop()
    subscriber.client.loop_stop()
