"""The MQTT benchmark's hostile shapes: one publisher flat out, and large payloads beside a
subscriber that never reads.

**Flood**: one publisher writes PUBLISHes as fast as the server takes them (QoS 0: as fast as
its socket takes them; QoS 1 / 2: ``window`` unacknowledged, paho's default of 20) for a
measuring window of ``seconds``, to ``readers`` subscribers on ``bench/#`` that read at full
speed. Meanwhile a probe client publishes QoS 1 to its own subscription and times each round
trip. Reported: the publications the server accepted, the deliveries the readers received
within the window (the rate) and after a drain (what is missing then is lost), the probe's
round trips, how long a new client waits, right after the window, to be connected, subscribed
and answered, the server's resident memory at the end, and its CPU time per delivery.

**Large payloads**: ``count`` publications of ``payload`` bytes at QoS 0 to one subscriber
that reads at full speed, beside one that is subscribed and never reads (a 4 KiB receive
buffer): what the reader received, how long it took, and the server's memory.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import socket
import time
from contextlib import closing, nullcontext
from dataclasses import dataclass
from typing import Any

from broker.bench.mqtt_load import (
    FILTER,
    ProbeSpec,
    PublisherSpec,
    SubscriberSpec,
    first_answer,
    probe_process,
    publisher_process,
    subscriber_process,
)
from broker.bench.process_stats import cpu_seconds, rss_kb
from broker.protocol.mqtt import MQTT_311, PROTOCOL_NAMES, Connect, Subscribe, encode

READY_SECONDS = 300.0
RESULT_SECONDS = 900.0
DRAIN_SECONDS = 10.0  # after the window: how long the readers may go without a delivery
FLOOD_WINDOW = 20  # unacknowledged QoS 1 / 2 PUBLISHes: paho-mqtt's default
STALLED_BUFFER = 4096


@dataclass(frozen=True, slots=True)
class FloodLoad:
    label: str
    qos: int
    seconds: float = 0.0  # the measuring window (0: ``count`` publications, however long)
    count: int = 2**62
    payload: int = 64
    readers: int = 10
    stalled: bool = False  # beside the readers, a subscriber that never reads


@dataclass(frozen=True, slots=True)
class Flood:
    server: str
    label: str
    qos: int
    payload: int
    readers: int
    published: int  # publications the server accepted
    window_seconds: float  # from the first publication to the end of the window
    in_window: int  # deliveries the readers received within the window
    distinct: int  # distinct deliveries the readers received, after the drain
    round_trips_ms: tuple[float, ...]  # the probe's, during the flood
    unanswered: int  # the probe's round trips not answered when it stopped
    new_client_seconds: float  # a client arriving as the window ends: CONNECT to its delivery back
    rss_end_kb: int
    server_cpu: float  # seconds, over the run

    @property
    def expected(self) -> int:
        return self.published * self.readers

    @property
    def loss(self) -> float:
        return 1 - self.distinct / self.expected if self.expected else 0.0

    @property
    def deliveries_per_second(self) -> float:
        return self.in_window / self.window_seconds if self.window_seconds > 0 else 0.0

    @property
    def cpu_per_delivery_us(self) -> float:
        return 1e6 * self.server_cpu / self.distinct if self.distinct else float("nan")

    def percentile_ms(self, fraction: float) -> float:
        ordered = sorted(self.round_trips_ms)
        if not ordered:
            return float("nan")
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def stalled_subscriber(port: int, client_id: str, level: int = MQTT_311) -> socket.socket:
    """A subscriber on ``bench/#`` with a 4 KiB receive buffer that never reads after SUBACK."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, STALLED_BUFFER)
    sock.connect(("127.0.0.1", port))
    connect = Connect(PROTOCOL_NAMES[level], level, client_id, True, 0)
    sock.sendall(encode(connect, level) + encode(Subscribe(1, ((FILTER, 0),)), level))
    sock.settimeout(30)
    sock.recv(64)  # CONNACK and SUBACK, or the start of them: enough to know it is served
    return sock


def run(port: int, pid: int, server: str, load: FloodLoad, run_id: str, level: int = MQTT_311) -> Flood:
    """One flood against the server on ``port`` (process ``pid``), every client at protocol
    ``level``."""
    ctx = multiprocessing.get_context("spawn")
    results: Any = ctx.Queue()
    ready: Any = ctx.Queue()
    done, stop_probe = ctx.Event(), ctx.Event()
    published_total, window_end = ctx.Value("q", 0), ctx.Value("d", 0.0)
    readers = SubscriberSpec(
        "127.0.0.1", port, load.qos, tuple(range(load.readers)), run_id, DRAIN_SECONDS, protocol=level
    )
    workers = [
        ctx.Process(
            target=subscriber_process, args=(readers, ready, done, published_total, results, window_end)
        ),
        ctx.Process(
            target=probe_process,
            args=(
                ProbeSpec("127.0.0.1", port, f"probe-{run_id}", protocol=level),
                ready,
                stop_probe,
                results,
            ),
        ),
    ]
    cpu_before = cpu_seconds(pid)
    with closing(stalled_subscriber(port, f"stalled-{run_id}", level)) if load.stalled else nullcontext():
        try:
            for worker in workers:
                worker.start()
            _wait_ready(ready, load.readers + 1)
            start_at = time.time() + 0.5
            if load.seconds:
                window_end.value = start_at + load.seconds
            publisher = PublisherSpec(
                "127.0.0.1",
                port,
                load.qos,
                (0,),
                load.count,
                start_at,
                FLOOD_WINDOW,
                seconds=load.seconds,
                payload_size=load.payload,
                protocol=level,
            )
            workers.append(ctx.Process(target=publisher_process, args=(publisher, results)))
            workers[-1].start()
            published = _expect(results, "publisher")
            new_client = asyncio.run(first_answer("127.0.0.1", port, f"newcomer-{run_id}", level))
            published_total.value = published.published
            done.set()
            received = _expect(results, "subscriber")
            stop_probe.set()
            probe = _expect(results, "probe")
        finally:
            done.set()
            stop_probe.set()
            for worker in (w for w in workers if w.pid is not None):
                worker.join(10)
                if worker.is_alive():
                    worker.kill()
        rss = rss_kb(pid)
    errors = [r.error for r in (published, *received, probe) if r.error]
    if errors:
        raise RuntimeError(f"{server} {load.label}: {'; '.join(errors)}")
    window_end_at = window_end.value or max(r.last for r in received)
    return Flood(
        server,
        load.label,
        load.qos,
        load.payload,
        load.readers,
        published.published,
        window_end_at - published.started,
        sum(r.in_window for r in received) if load.seconds else sum(r.distinct for r in received),
        sum(r.distinct for r in received),
        tuple(probe.round_trips_ms),
        probe.unanswered,
        new_client,
        rss,
        cpu_seconds(pid) - cpu_before,
    )


def _wait_ready(ready: Any, count: int) -> None:
    for _ in range(count):
        try:
            answer = ready.get(timeout=READY_SECONDS)
        except queue.Empty:
            raise RuntimeError(f"the flood's clients were not ready in {READY_SECONDS:.0f} s") from None
        if answer != "ready":
            return  # a client failed: its result says why


def _expect(results: Any, kind: str) -> Any:
    """The next result of ``kind`` (a publisher's, the subscribers' list, the probe's)."""
    deadline = time.monotonic() + RESULT_SECONDS
    while True:
        try:
            found, value = results.get(timeout=max(1.0, deadline - time.monotonic()))
        except queue.Empty:
            raise RuntimeError(f"no {kind} result after {RESULT_SECONDS:.0f} s") from None
        if found == kind:
            return value
        if getattr(value, "error", "") or any(
            getattr(v, "error", "") for v in (value if isinstance(value, list) else ())
        ):
            raise RuntimeError(f"the flood's {found} failed: {value}")


LOADS = (
    FloodLoad("flood QoS 0", 0, seconds=8.0),
    FloodLoad("flood QoS 1", 1, seconds=8.0),
    FloodLoad("flood QoS 2", 2, seconds=8.0),
    FloodLoad(
        "512 x 100 kB beside a stalled subscriber", 0, count=512, payload=100_000, readers=1, stalled=True
    ),
    FloodLoad(
        "50 x 1 MB beside a stalled subscriber", 0, count=50, payload=1_000_000, readers=1, stalled=True
    ),
)
QUICK_LOADS = (
    FloodLoad("flood QoS 0", 0, seconds=0.5, readers=2),
    FloodLoad("flood QoS 1", 1, seconds=0.5, readers=2),
    FloodLoad(
        "20 x 100 kB beside a stalled subscriber", 0, count=20, payload=100_000, readers=1, stalled=True
    ),
)

# The targets, for the report.
LOSS_TARGET = 0.01
PROBE_P99_TARGET_MS = 100.0
RSS_TARGET_MB = 150.0
NEW_CLIENT_TARGET_SECONDS = 1.0
