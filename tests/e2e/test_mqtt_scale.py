"""A thousand MQTT clients on one ``broker serve --mqtt``, each with one subscription: every
one of them gets a publication at QoS 0 and at QoS 1 (the benchmark's connection-scale run,
``broker bench mqtt --connections``, at a tenth of its size)."""

from __future__ import annotations

import asyncio

from broker.bench import mqtt_scale
from broker.bench.process_stats import rss_kb
from tests.broker.service.mqtt.clients import MqttBroker
from tests.e2e.processes import Brokers

CLIENTS = 1_000


def test_a_publication_reaches_every_one_of_a_thousand_subscribers(brokers: Brokers) -> None:
    broker = MqttBroker(brokers, BROKER_MQTT_ANONYMOUS="guest")
    scale = asyncio.run(
        mqtt_scale.measure("127.0.0.1", broker.port, CLIENTS, lambda: rss_kb(broker.process.pid), "broker")
    )
    assert [(f.qos, f.received) for f in scale.fanouts] == [(0, CLIENTS), (1, CLIENTS)]
    assert scale.rss_after_kb > scale.rss_before_kb > 0
