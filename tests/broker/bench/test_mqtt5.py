"""``broker bench mqtt --protocol 5``: the floods, the CONNECT flood, the churn, the connection
scale and the shared subscription speak MQTT 5.0 (Mosquitto's connection log says so), and
against the broker itself every delivery is counted, each shared one once in its group."""

from __future__ import annotations

import asyncio
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from broker.bench import mqtt as mqtt_bench
from broker.bench import mqtt_churn, mqtt_flood, mqtt_scale
from broker.bench.mqtt_runs import MOSQUITTO, Server, Workload, running
from broker.bench.process_stats import rss_kb
from broker.bench.processes import free_port
from broker.protocol.mqtt import MQTT_5
from tests.broker.service.mqtt.clients import MqttBroker
from tests.e2e.conftest import brokers  # noqa: F401 (the fixture the broker's test runs on)
from tests.e2e.processes import Brokers

SHARED = Workload(seconds=0.3, publishers=2, processes=2, idle_seconds=2.0, shared=3, protocol=MQTT_5)
STALLED = mqtt_flood.QUICK_LOADS[-1]


def every_shape(server: Any) -> list[Any]:
    """One of each shape at MQTT 5.0, small, against ``server`` (name, port, pid)."""

    def rss() -> int:
        return rss_kb(server.pid)

    floods = (mqtt_flood.QUICK_LOADS[1], STALLED)
    return [
        *(
            mqtt_flood.run(server.port, server.pid, server.name, load, f"f{i}", MQTT_5)
            for i, load in enumerate(floods)
        ),
        mqtt_churn.connect_flood(server.port, server.name, "cf", 0.3, MQTT_5),
        mqtt_churn.churn(server.port, rss, server.name, "ch", 100, MQTT_5),
        asyncio.run(mqtt_scale.measure("127.0.0.1", server.port, 30, rss, server.name, MQTT_5)),
        *(mqtt_bench.throughput(server, qos, SHARED, SHARED.processes, shared=True) for qos in (0, 1)),
    ]


def test_every_shape_connects_at_mqtt_5(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "mosquitto.conf"
    config.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous true\nlog_dest stdout\nlog_type notice\n"
        "connection_messages true\n"
    )
    log = tmp_path / "mosquitto.log"
    with log.open("wb") as out:
        process = subprocess.Popen([MOSQUITTO, "-c", str(config)], stdout=out, stderr=out)
    with running(Server("mosquitto", port, process, log)) as server:
        every_shape(server)
    levels = re.findall(r"New client connected from \S+ as (\S+) \(p(\d)", log.read_text())
    clients = {client for client, _ in levels}
    assert {"newcomer-f0", "probe-f0", "stalled-f1", "scale-publisher"} <= clients
    assert any(client.startswith("flood-cf-") for client in clients)
    assert any(client.startswith("churn-ch-") for client in clients)
    assert sum(client.startswith("bench-sub-") for client in clients) >= 2 * SHARED.shared
    assert {level for client, level in levels if client != "bench-probe"} == {"5"}


def test_every_shape_at_mqtt_5_against_the_broker(brokers: Brokers) -> None:  # noqa: F811
    broker = MqttBroker(brokers, BROKER_MQTT_ANONYMOUS="bench")
    server = SimpleNamespace(name="broker", port=broker.port, pid=broker.process.pid)
    *floods, connect_flood, churn, scale, shared_0, shared_1 = every_shape(server)
    for flood in floods:
        assert flood.published > 0 and flood.distinct == flood.expected, flood.label
        assert flood.round_trips_ms and flood.unanswered == 0
    assert connect_flood.errors == 0 and connect_flood.alone.connack and connect_flood.flooded.puback
    assert churn.cycles == 100 and churn.errors == 0
    assert [f.received for f in scale.fanouts] == [30, 30]
    for run in (shared_0, shared_1):
        assert run.publications > 0 and run.expected == run.publications
        assert (run.distinct, run.missing, run.duplicates) == (run.publications, 0, 0)
