"""Smoke test of the network benchmark: three real brokers, and every count adds up.

Timings are not asserted; ``broker bench network`` gives the release figures.
"""

from __future__ import annotations

from broker.bench import network as network_bench
from broker.bench import route
from tests.conftest import PG_ADMIN_URL


def test_the_network_benchmark_delivers_every_copy_on_both_paths_and_streams() -> None:
    results = network_bench.run(
        20, ("sqlite",), pg_url=PG_ADMIN_URL, batch_size=8, rate=20, stream_seconds=1.0
    )
    (row,) = results["throughput"]
    expected = 20 * len(route.SUBSCRIBERS)
    assert (row["single"]["deliveries"], row["network"]["deliveries"]) == (expected, expected)
    assert row["ratio"] > 0
    (latency,) = results["latency"]
    assert (latency["publications"], latency["rate"]) == (20, 20)
    assert 0 <= latency["p50_ms"] <= latency["p99_ms"] <= latency["max_ms"]
    assert "network" in network_bench.report(results)
