"""Clients that publish flat out: the broker reads them no faster than it routes (TCP slows them),
so another client's round trips stay short, memory stays bounded, and the subscribers that read
receive everything the broker accepted."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from tests.broker.service.mqtt.clients import MqttBroker
from tests.broker.service.mqtt.flood import Counter, Probe, Publisher, connect, subscribe
from tests.e2e.processes import Brokers

FLOOD_SECONDS = 3.0
SUBSCRIBERS = 3
ROUND_TRIP_BOUND = 2.0  # seconds: generous for a loaded CI machine; unbounded queueing takes tens
RSS_BOUND_MB = 250
LOSS = 0.01  # at most this share of what the broker accepted may be missing at QoS 0
DRAIN_SECONDS = 60.0
OUTPUT_BOUND = 1024 * 1024  # the stalled client's: passed within the flood, whatever the machine


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def flood(broker: MqttBroker, publishers: list[Publisher]) -> tuple[list[Counter], float, float]:
    """Run ``publishers`` at once beside counting subscribers and a probe; returns the
    subscribers, the probe's longest round trip and the broker's largest RSS meanwhile."""
    counters = [Counter(broker.port, f"count-{n}", "flood/#") for n in range(SUBSCRIBERS)]
    for counter in counters:
        counter.start()
    probe = Probe(broker.port, "probe")
    probe.start()
    threads = [threading.Thread(target=p.run, args=(FLOOD_SECONDS,), daemon=True) for p in publishers]
    for thread in threads:
        thread.start()
    largest = 0.0
    while any(thread.is_alive() for thread in threads):
        largest = max(largest, rss_mb(broker.process.pid))
        time.sleep(0.2)
    for thread in threads:
        thread.join()
    longest = probe.stop()
    for publisher in publishers:
        assert publisher.error is None, publisher.error
    return counters, longest, largest


def received_all(counters: list[Counter], accepted: int) -> None:
    deadline = time.monotonic() + DRAIN_SECONDS
    while min(c.count for c in counters) < accepted and time.monotonic() < deadline:
        time.sleep(0.1)
    for counter in counters:
        counter.stop()
        assert counter.count <= accepted
        assert counter.count >= accepted * (1 - LOSS), (counter.count, accepted)


@pytest.mark.parametrize("qos", [0, 1, 2])
def test_a_publisher_flat_out_is_slowed_not_buffered(brokers: Brokers, qos: int) -> None:
    broker = MqttBroker(brokers)
    publisher = Publisher(broker.port, "flood", "flood/x", qos=qos, window=1000)
    counters, longest, largest = flood(broker, [publisher])

    assert publisher.sent > 1000  # it did flood
    accepted = publisher.sent if qos == 0 else publisher.acknowledged
    if qos:
        assert publisher.acknowledged == publisher.sent
    received_all(counters, accepted)
    assert longest < ROUND_TRIP_BOUND, longest
    assert largest < RSS_BOUND_MB, largest
    probe = Probe(broker.port, "after")  # and it answers at once afterwards
    probe.start()
    time.sleep(0.3)
    assert probe.stop() < 1.0


def test_a_hundred_publishers_at_once(brokers: Brokers) -> None:
    broker = MqttBroker(brokers)
    publishers = [Publisher(broker.port, f"flood-{n}", f"flood/{n}") for n in range(100)]
    counters, longest, largest = flood(broker, publishers)

    received_all(counters, sum(p.sent for p in publishers))
    assert longest < ROUND_TRIP_BOUND, longest
    assert largest < RSS_BOUND_MB, largest


def test_large_payloads_reach_the_reader_beside_one_that_never_reads(brokers: Brokers) -> None:
    """100 kB publications: the client that reads gets them all; the one that does not read
    loses QoS 0 ones past its output bound, and holds no more than that bound of the broker's
    memory."""
    broker = MqttBroker(brokers, BROKER_MQTT_MAX_OUTPUT_BYTES=str(OUTPUT_BOUND))
    stalled = connect(broker.port, "stalled")  # subscribed, and never reads
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    subscribe(stalled, "flood/#")
    publisher = Publisher(broker.port, "flood", "flood/x", payload=100_000)
    counters, longest, largest = flood(broker, [publisher])

    received_all(counters, publisher.sent)
    assert largest < RSS_BOUND_MB, largest
    assert longest < ROUND_TRIP_BOUND, longest
    assert broker.process.lines("mqtt deliveries dropped: client not reading")
    stalled.close()
