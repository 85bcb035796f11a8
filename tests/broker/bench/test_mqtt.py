"""Smoke test of the MQTT benchmark: ``broker bench mqtt --quick`` starts its own Mosquitto,
runs the whole workload through the load generator and prints every table, with every delivery
counted. Speed is not asserted; ``broker bench mqtt`` gives the figures."""

from __future__ import annotations

import re
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from broker.bench import mqtt as mqtt_bench
from broker.bench import mqtt_cluster
from broker.bench.mqtt import SUBSCRIBERS, Workload
from broker.protocol.mqtt import MQTT_5
from tests.conftest import PG_ADMIN_URL, PostgresDatabases

TINY = Workload(seconds=0.3, publishers=2, processes=2, idle_seconds=2.0)
# A throughput row: server, QoS, publications/s, deliveries/s, missing, duplicates.
ROW = r"^(mosquitto [\d.]+(?: \(target\))?)\s+([012])\s+([\d,]+)\s+([\d,]+)\s+(\d+)\s+(\d+)"


@pytest.mark.parametrize("protocol", ["3.1.1", "5"])
def test_the_quick_run_prints_every_table_with_deliveries_counted(protocol: str) -> None:
    """Every shape at either protocol level, the shared subscription's among them."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "broker.bench",
            "mqtt",
            "--quick",
            "--target",
            "mosquitto",
            "--protocol",
            protocol,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    assert out.startswith(f"MQTT {protocol}: ")
    rows = re.findall(ROW, out, re.M)
    assert {(server, qos) for server, qos, *_ in rows} >= {
        (server, qos) for server in ("mosquitto 2.0.11", "mosquitto 2.0.11 (target)") for qos in "012"
    }
    for _server, _qos, published, delivered, missing, duplicates in rows:
        assert int(published.replace(",", "")) > 0
        assert int(delivered.replace(",", "")) > 0
        assert (missing, duplicates) == ("0", "0")
    before = r"^latency QoS 1 at 200/s before the floods .* 2,000 deliveries, 0 missing"
    assert len(re.findall(before, out, re.M)) == 2
    assert len(re.findall(r"^idle: 50 connections \(keepalive 60\): RSS", out, re.M)) == 2
    assert len(re.findall(r"^scale: 100 connections \(keepalive 60, one subscription each\)", out, re.M)) == 2
    fanouts = r"^fan-out of one publication to all of them: QoS 0 .* \(100 of 100 .*, QoS 1 .* \(100 of 100"
    assert len(re.findall(fanouts, out, re.M)) == 2
    assert "connections/s" in out and "fan-out time QoS 1" in out
    assert "QoS 1 deliveries/s" in out and "target >= 1.0x" in out
    assert len(re.findall(r"^latency QoS 1 at 200/s after the floods .* 0 missing", out, re.M)) == 2
    floods = re.findall(
        r"^(flood QoS [01]|20 x 100 kB beside a stalled subscriber)\s+[\d,]+\s+[\d,]+\s+(\S+)", out, re.M
    )
    assert len(floods) == 6 and all(loss == "0.00" for _, loss in floods)  # two servers, three floods
    assert (
        len(re.findall(r"^a new client beside a CONNECT flood of [\d,]+ clients/s .* 0 failed\)", out, re.M))
        == 2
    )
    churns = r"^churn: 500 clients connected, subscribed, published and left in .* 0 failed\): RSS"
    assert len(re.findall(churns, out, re.M)) == 2
    assert "churn RSS growth" in out and "new client's p99 step" in out
    assert "generator headroom" in out
    shared = re.findall(
        r"^shared subscription: 4 subscribers on \$share/bench/bench/<run>/#.*\n(.*)\n(.*)$", out, re.M
    )
    assert len(shared) == 2
    members = [re.match(ROW, row) for pair in shared for row in pair]
    assert [(m[2], m[5], m[6]) if m else None for m in members] == [("0", "0", "0"), ("1", "0", "0")] * 2
    assert all(m and int(m[4].replace(",", "")) > 0 for m in members)  # deliveries/s
    assert len(re.findall(r"^  shared QoS [01] deliveries/s .* every run: met$", out, re.M)) == 2


def test_every_delivery_is_counted_at_every_qos() -> None:
    with mqtt_bench.mosquitto() as server:
        rows = [mqtt_bench.throughput(server, qos, TINY, TINY.processes) for qos in (0, 1, 2)]
    for row in rows:
        assert row.publications > 0
        assert row.expected == row.publications * SUBSCRIBERS
        assert (row.distinct, row.missing, row.duplicates) == (row.expected, 0, 0)
        assert row.publisher_cpu > 0 and row.subscriber_cpu > 0
        assert row.publish_seconds > 0 and row.deliver_seconds > 0


def test_deliveries_a_server_drops_are_reported_missing() -> None:
    """Mosquitto with its per-client queue cut to one message drops QoS 1 deliveries to
    subscribers that lag: the run says how many, and its rate counts only what arrived."""
    load = Workload(seconds=0.5, publishers=2, processes=1, window=200, idle_seconds=1.0)
    with mqtt_bench.mosquitto(max_queued=1, max_inflight=1) as server:
        row = mqtt_bench.throughput(server, 1, load, 1)
    assert row.expected == row.publications * SUBSCRIBERS > 0
    assert row.missing > 0
    assert row.distinct + row.missing == row.expected


def test_the_servers_take_turns_and_each_repeats_a_throughput_run_back_to_back(monkeypatch) -> None:
    """Idle memory first on every server (before any traffic), then the latencies (before any
    flood), the floods and the CONNECT floods, the latencies again, the throughput runs QoS by
    QoS with each server's runs of a QoS back to back (the stability target is about
    consecutive runs on one server), the shared subscription's alike, and the churn last
    (its memory figure sees them all); every one at the workload's protocol level."""
    calls: list[tuple[str, str, Any]] = []
    levels: set[int] = set()

    def record(kind: str) -> Any:
        def call(server: Any, *args: Any, shared: bool = False) -> str:
            if kind == "throughput":
                levels.add(args[1].protocol)
                calls.append(("shared" if shared else kind, server.name, args[0]))
                return "shared" if shared else kind
            levels.add(args[0].protocol if kind == "latency" else args[-1])
            calls.append((kind, server.name, -1))
            return kind

        return call

    def flood(port: int, pid: int, name: str, load: Any, run_id: str, level: int) -> str:
        levels.add(level)
        calls.append(("flood", name, load.label))
        return "flood"

    def connect_flood(port: int, name: str, run_id: str, seconds: float, level: int) -> str:
        levels.add(level)
        calls.append(("connect flood", name, -1))
        return "connect flood"

    for kind in ("idle", "throughput", "latency", "churn"):
        monkeypatch.setattr(mqtt_bench, kind, record(kind))
    monkeypatch.setattr(mqtt_bench.mqtt_flood, "run", flood)
    monkeypatch.setattr(mqtt_bench.mqtt_churn, "connect_flood", connect_flood)
    servers: Any = [
        SimpleNamespace(name="anchor", port=1, pid=1),
        SimpleNamespace(name="target", port=2, pid=2),
    ]
    floods = mqtt_bench.mqtt_flood.QUICK_LOADS[:2]
    results = mqtt_bench.measure(servers, Workload(repeat=2, floods=floods, protocol=MQTT_5))
    names = ("anchor", "target")
    rounds = [("throughput", name, qos) for qos in (0, 1, 2) for name in names for _ in range(2)]
    shared_rounds = [("shared", name, qos) for qos in (0, 1) for name in names for _ in range(2)]
    assert calls == [
        ("idle", "anchor", -1),
        ("idle", "target", -1),
        ("latency", "anchor", -1),
        ("latency", "target", -1),
        *(("flood", name, load.label) for load in floods for name in names),
        ("connect flood", "anchor", -1),
        ("connect flood", "target", -1),
        ("latency", "anchor", -1),
        ("latency", "target", -1),
        *rounds,
        *shared_rounds,
        ("churn", "anchor", -1),
        ("churn", "target", -1),
    ]
    assert levels == {MQTT_5}
    assert [r["server"] for r in results] == ["anchor", "target"]
    assert all(r["throughput"] == [["throughput"] * 2] * 3 for r in results)
    assert all(r["shared"] == [["shared"] * 2] * 2 for r in results)
    assert all(r["floods"] == ["flood"] * 2 for r in results)


def test_a_cluster_of_two_nodes_is_measured_and_fails_over(postgres: PostgresDatabases) -> None:
    """``--nodes``: throughput with every delivery counted, the connect rate, and the failover
    of every persistent subscriber of the node killed."""
    tiny = Workload(seconds=0.3, publishers=2, processes=2, idle_seconds=2.0, repeat=1, connections=40)
    with mqtt_cluster.cluster(PG_ADMIN_URL, 2) as servers:
        run = mqtt_cluster.measure(servers, tiny)
    assert run.nodes == 2 and run.missing == 0 and run.deliveries_per_second > 0
    assert run.connections == 40 and run.connects_per_second > 0 and run.subscribes_per_second > 0
    assert run.storm.clients == 40 and run.storm.per_second > 0 and run.storm.cpu_us_per_client > 0
    assert run.failover_clients == 40 and 0 < run.failover_seconds < 60
    assert "40 clients in" in mqtt_cluster.lines([run])[-1]
    anchor = mqtt_cluster.Storm(40, run.storm.per_second * 4, run.storm.cpu_us_per_client / 10)
    ratio = mqtt_cluster.lines([run], anchor)[-1]
    assert ratio.startswith("  ratio, 2 node(s) / Mosquitto: 0.25x the rate, 10.0x")
