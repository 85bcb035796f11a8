"""The MQTT listener on each event loop the ``event_loop`` setting offers: the same QoS 1 and 2
exchanges with a real client, and the log says which loop serves."""

from __future__ import annotations

import pytest

from tests.broker.service.mqtt.clients import MqttBroker, Paho, Received, eventually
from tests.e2e.processes import Brokers


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_the_listener_serves_on_the_loop_the_setting_names(brokers: Brokers, loop: str) -> None:
    broker = MqttBroker(brokers, BROKER_EVENT_LOOP=loop)
    assert eventually(lambda: bool(broker.process.lines("mqtt listener started")))
    [started] = broker.process.lines("mqtt listener started")
    assert started["event_loop"] == loop
    sub, pub = Paho(broker.port, "sub", clean=False), Paho(broker.port, "pub")
    assert sub.connect() == (0, False)
    assert sub.subscribe(("t/#", 2)) == [2]
    assert pub.connect() == (0, False)
    for qos in (0, 1, 2):
        pub.publish(f"t/{qos}", f"at {qos}".encode(), qos)
    got = sorted(sub.receive(3), key=lambda r: r.qos)
    assert got == [Received(f"t/{qos}", f"at {qos}".encode(), qos, False) for qos in (0, 1, 2)]
