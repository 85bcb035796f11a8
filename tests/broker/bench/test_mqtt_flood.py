"""The flood workload against the broker itself, at a tenth of its size: every delivery counted,
the probe answered meanwhile, a new client served at the window's end."""

from __future__ import annotations

from broker.bench import mqtt_flood
from tests.broker.service.mqtt.clients import MqttBroker
from tests.e2e.conftest import brokers  # noqa: F401 (the fixture the test runs on)
from tests.e2e.processes import Brokers


def test_a_flood_and_large_payloads_beside_a_stalled_subscriber(brokers: Brokers) -> None:  # noqa: F811
    broker = MqttBroker(brokers, BROKER_MQTT_ANONYMOUS="bench")
    pid = broker.process.pid
    for load in mqtt_flood.QUICK_LOADS:
        flood = mqtt_flood.run(broker.port, pid, "broker", load, f"t{load.qos}{load.payload}")
        assert flood.published > 0
        assert flood.distinct == flood.expected, load.label  # readers that read lose nothing
        assert flood.round_trips_ms and flood.unanswered == 0
        assert 0 < flood.new_client_seconds < 10
        assert flood.rss_end_kb > 0 and flood.server_cpu > 0
