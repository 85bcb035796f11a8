"""``/metrics``: what Prometheus scrapes from any API process, router or not.

Queue depths and the routers' counters are read from the database at scrape
time, so ``broker api`` alone (another process, another machine) reports them:
depth per queue, and each live router's totals as published in
``psb_instances``, labelled by instance (Prometheus sums them; a restarted
router starts a new series, which ``rate()`` handles). When the API runs inside
the router's process (``broker serve --api``) that router's own registry is
exposed as well: its routing-latency and batch histograms exist only there.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from admin_api.commands import ROUTER_ALIVE_MS, ROUTER_ROLE
from broker import store
from broker.service.metrics import BrokerMetrics
from queues import QueueManager
from queues.ids import now_ms

_COUNTERS = (
    ("batches", "Batches committed"),
    ("messages", "Command messages routed"),
    ("publications", "Publications routed"),
    ("deliveries", "Publications put on subscriber queues"),
    ("replies", "Replies sent"),
    ("forwards", "Publications forwarded to neighbours"),
    ("dead_lettered", "Messages put on the dead-letter queue"),
)


class DatabaseCollector(Collector):
    """Queue depths and router counters, read when scraped."""

    def __init__(self, qm: QueueManager) -> None:
        self._qm = qm

    def collect(self) -> Iterator[Metric]:
        queues = self._qm.list_queues()
        with self._qm.reading() as conn:
            routers = [
                i
                for i in store.list_instances(conn, alive_within_ms=ROUTER_ALIVE_MS)
                if i["role"] == ROUTER_ROLE
            ]
        depth = GaugeMetricFamily("broker_queue_depth", "Messages on the queue", labels=["queue"])
        max_depth = GaugeMetricFamily("broker_queue_max_depth", "MAXDEPTH of the queue", labels=["queue"])
        for queue in queues:
            depth.add_metric([queue.name], queue.depth)
            max_depth.add_metric([queue.name], queue.max_depth)
        yield depth
        yield max_depth
        yield from _router_families(routers, now_ms())


def _router_families(routers: list[dict[str, Any]], now: int) -> Iterator[Metric]:
    for name, text in _COUNTERS:
        family = CounterMetricFamily(
            f"broker_router_{name}", f"{text} (per live router)", labels=["instance"]
        )
        for router in routers:
            family.add_metric([router["instance"]], router["stats"].get(name, 0))
        yield family
    refusals = CounterMetricFamily(
        "broker_router_refusals",
        "Commands refused or partly refused, by reason (per live router)",
        labels=["instance", "reason", "reason_name"],
    )
    age = GaugeMetricFamily(
        "broker_router_heartbeat_age_seconds", "Seconds since the router last reported", labels=["instance"]
    )
    for router in routers:
        for label, count in router["stats"].get("refusals", {}).items():
            reason, _, reason_name = label.partition(" ")
            refusals.add_metric([router["instance"], reason, reason_name], count)
        age.add_metric([router["instance"]], max(0, now - router["heartbeat_at"]) / 1000)
    yield refusals
    yield age


def registry(qm: QueueManager, metrics: BrokerMetrics | None) -> CollectorRegistry:
    combined = CollectorRegistry()
    combined.register(DatabaseCollector(qm))
    if metrics is not None:
        combined.register(metrics.registry)  # a registry is itself a collector
    return combined
