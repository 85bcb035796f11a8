"""Counters of what the broker did, for /metrics (Prometheus) and /status.

Each routing service owns a registry (tests run several in one process). The
same numbers are kept as a plain snapshot that the service writes to
``psb_instances`` every few seconds, so that an admin API running in another
process, or on another machine, reports them too.
"""

from __future__ import annotations

import threading
import time
from collections import Counter as Totals
from collections import deque
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import CounterMetricFamily, Metric

from broker.core.effects import Outcome
from broker.service.health import Health
from queues.reasons import reason_name

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass
class Snapshot:
    """Totals since the process started, JSON-ready."""

    batches: int = 0
    messages: int = 0
    publications: int = 0
    deliveries: int = 0
    replies: int = 0
    forwards: int = 0
    dead_lettered: int = 0
    refusals: dict[str, int] = field(default_factory=dict)  # "3081 MQRCCF_NOT_AUTHORIZED" -> n
    last_errors: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=20))

    def as_dict(self) -> dict[str, Any]:
        return {
            "batches": self.batches,
            "messages": self.messages,
            "publications": self.publications,
            "deliveries": self.deliveries,
            "replies": self.replies,
            "forwards": self.forwards,
            "dead_lettered": self.dead_lettered,
            "refusals": dict(self.refusals),
            "last_errors": list(self.last_errors),
        }


class BrokerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.snapshot = Snapshot()
        self._lock = threading.Lock()
        r = self.registry
        self.routed = Counter(
            "broker_messages_routed", "Command messages routed", ["command", "completion"], registry=r
        )
        self.delivered = Counter("broker_deliveries", "Publications put on subscriber queues", registry=r)
        self.forwarded = Counter("broker_forwards", "Publications forwarded to neighbours", registry=r)
        self.refused = Counter("broker_refusals", "Refusals by reason", ["reason", "reason_name"], registry=r)
        self.dead_lettered = Counter(
            "broker_dead_lettered", "Messages put on the dead-letter queue", registry=r
        )
        self.batches = Counter("broker_batches", "Batches committed", registry=r)
        self.batch_seconds = Histogram(
            "broker_batch_seconds", "Time to route and commit one batch", buckets=LATENCY_BUCKETS, registry=r
        )
        self.latency = Histogram(
            "broker_routing_latency_seconds",
            "From a command's put to the commit of its effects",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.mqtt = MqttMetrics(r)
        self.health = Health(r)  # of the process's background work (``/ready``)

    def record(self, outcomes: Sequence[Outcome]) -> None:
        """Count a batch's outcomes: one label lookup per kind of outcome, not per message."""
        kinds: dict[tuple[str, str], int] = {}
        refusals: dict[int, int] = {}
        puts: dict[str, int] = {}
        publications = 0
        for outcome in outcomes:
            command = outcome.command or "unreadable"
            kinds[(command, outcome.completion)] = kinds.get((command, outcome.completion), 0) + 1
            publications += command == "Publish"
            for kind, count in outcome.counts.items():
                puts[kind] = puts.get(kind, 0) + count
            if outcome.reason and outcome.completion != "ok":
                refusals[outcome.reason] = refusals.get(outcome.reason, 0) + 1
        for (command, completion), count in kinds.items():
            self.routed.labels(command, completion).inc(count)
        for reason, count in refusals.items():
            self.refused.labels(str(reason), reason_name(reason)).inc(count)
        self.delivered.inc(puts.get("delivery", 0))
        self.forwarded.inc(puts.get("forward", 0))
        with self._lock:
            s = self.snapshot
            s.messages += len(outcomes)
            s.publications += publications
            s.deliveries += puts.get("delivery", 0)
            s.forwards += puts.get("forward", 0)
            s.replies += puts.get("reply", 0)
            for reason, count in refusals.items():
                label = f"{reason} {reason_name(reason)}"
                s.refusals[label] = s.refusals.get(label, 0) + count

    def record_dead_letters(self, count: int) -> None:
        if count:
            self.dead_lettered.inc(count)
            with self._lock:
                self.snapshot.dead_lettered += count

    def record_batch(self, seconds: float, latencies: list[float]) -> None:
        self.batches.inc()
        self.batch_seconds.observe(seconds)
        for latency in latencies:
            self.latency.observe(latency)
        with self._lock:
            self.snapshot.batches += 1

    def record_error(self, where: str, error: str) -> None:
        with self._lock:
            self.snapshot.last_errors.append({"at": time.time(), "where": where, "error": error})

    def as_dict(self) -> dict[str, Any]:
        with self._lock:
            return self.snapshot.as_dict()


class Tally:
    """A Prometheus counter that a hot path adds to as plain integers, summed when collected:
    a labelled Counter's increment takes a lock, which cost more per MQTT packet than the
    packet's own handling. Each thread that counts has a :meth:`part` of its own, so none
    needs a lock; its keys become labels through ``labels``."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        registry: CollectorRegistry,
        labels: Callable[[Hashable], Sequence[str]],
    ) -> None:
        self._name, self._documentation, self._labelnames = name, documentation, labelnames
        self._labels = labels
        self._parts: list[dict[Hashable, int]] = []
        registry.register(self)

    def part(self) -> dict[Hashable, int]:
        """Counts by key, for one thread alone to add to."""
        part: dict[Hashable, int] = {}
        self._parts.append(part)
        return part

    def collect(self) -> Iterator[Metric]:
        totals: Totals[tuple[str, ...]] = Totals()
        for part in list(self._parts):
            for key, value in part.copy().items():  # copied at once: its thread goes on adding
                totals[tuple(self._labels(key))] += value
        family = CounterMetricFamily(self._name, self._documentation, labels=self._labelnames)
        for labels, value in sorted(totals.items()):
            family.add_metric(labels, value)
        yield family

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self._name, self._documentation, labels=self._labelnames)


def _packet_labels(key: Hashable) -> tuple[str, str]:
    direction, kind = cast(tuple[str, type], key)
    return direction, kind.__name__.upper()


def _byte_labels(key: Hashable) -> tuple[str]:
    return (str(key),)


class MqttMetrics:
    """The MQTT listener's counters (``broker.service.mqtt``)."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.connections = Gauge("broker_mqtt_connections", "MQTT connections open", registry=r)
        self.accepted = Counter("broker_mqtt_connections_accepted", "MQTT connections accepted", registry=r)
        # Counted by each listener thread in a part of its own: keys (direction, packet class).
        self.packets = Tally(
            "broker_mqtt_packets",
            "MQTT packets by direction and type",
            ["direction", "type"],
            r,
            _packet_labels,
        )
        self.bytes = Tally("broker_mqtt_bytes", "MQTT bytes by direction", ["direction"], r, _byte_labels)
        self.refused = Counter(
            "broker_mqtt_refused",
            "Refused MQTT connections, publications and subscriptions, and malformed packets",
            ["what"],
            registry=r,
        )
        self.wills = Counter("broker_mqtt_wills", "MQTT wills published", registry=r)
        self.expired = Counter(
            "broker_mqtt_sessions_expired", "MQTT sessions removed after mqtt_session_expiry", registry=r
        )
        self.dropped = Counter(
            "broker_mqtt_dropped",
            "Messages dropped from offline MQTT sessions over mqtt_max_queued",
            registry=r,
        )
        self.slow_dropped = Counter(
            "broker_mqtt_slow_dropped",
            "QoS 0 deliveries dropped: the client's unsent output was over mqtt_max_output_bytes",
            registry=r,
        )
        self.login_failures = Counter(
            "broker_mqtt_login_failures", "MQTT logins whose user name or password was wrong", registry=r
        )
        self.throttled = Gauge(
            "broker_mqtt_throttled",
            "User names and addresses whose MQTT logins are refused unchecked now (auth_throttle_*)",
            ["key"],
            registry=r,
        )
