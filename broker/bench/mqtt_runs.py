"""The servers and the runs of the MQTT benchmark: Debian's Mosquitto and ``broker serve
--mqtt`` started on free ports, and one run of publisher and subscriber processes against one
of them. The benchmark (``broker.bench.mqtt``) and its cluster part (``mqtt_cluster``) both
run on these."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import queue
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from broker.bench import mqtt_churn, mqtt_flood, processes
from broker.bench.mqtt_load import (
    Connection,
    PublisherResult,
    PublisherSpec,
    SubscriberResult,
    SubscriberSpec,
    publisher_process,
    subscriber_process,
)
from broker.bench.options import log_file
from broker.bench.processes import free_port
from broker.bench.scratch import scratch_database
from broker.protocol.mqtt import MQTT_5, MQTT_311

MOSQUITTO = "/usr/sbin/mosquitto"
LEVELS = {"3.1.1": MQTT_311, "5": MQTT_5}  # the protocol levels the benchmark's clients speak
PROTOCOLS = {level: name for name, level in LEVELS.items()}
SUBSCRIBERS = 10
READY_SECONDS = 60.0
SUBSCRIBED_SECONDS = 300.0  # a server still busy with the previous run's backlog answers late
RUN_SECONDS = 900.0
UNLIMITED = 2**62  # publications per publisher when a run is timed
MAX_INFLIGHT = 65535  # every packet id: the broker's counterpart of Mosquitto's max_inflight_messages 0


@dataclass(frozen=True, slots=True)
class Throughput:
    server: str
    qos: int
    publications: int
    expected: int  # deliveries: publications x subscribers
    received: int  # every PUBLISH the subscribers got
    distinct: int  # distinct (subscriber, publication) pairs
    publish_seconds: float
    deliver_seconds: float
    publisher_cpu: float
    subscriber_cpu: float
    server_cpu: float = 0.0  # seconds, over the run

    @property
    def deliveries_per_second(self) -> float:
        return rate(self.distinct, self.deliver_seconds)

    @property
    def cpu_per_delivery_us(self) -> float:
        return 1e6 * self.server_cpu / self.distinct if self.distinct else float("nan")

    @property
    def missing(self) -> int:
        return self.expected - self.distinct

    @property
    def duplicates(self) -> int:
        return self.received - self.distinct

    @property
    def generator_cores(self) -> float:
        """The load generator's CPU over the run: what it left of the machine for the server."""
        seconds = max(self.publish_seconds, self.deliver_seconds)
        return (self.publisher_cpu + self.subscriber_cpu) / seconds if seconds > 0 else 0.0


def rate(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


# --- the servers --------------------------------------------------------------------------------


@dataclass
class Server:
    """One MQTT server process on 127.0.0.1:``port``."""

    name: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_SECONDS
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}; see {self.log}")
            try:
                asyncio.run(_probe(self.port))
                return
            except (OSError, RuntimeError, TimeoutError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.name} did not accept MQTT in {READY_SECONDS:.0f} s") from None
                time.sleep(0.2)

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        processes.stop(self.process)


@contextmanager
def running(server: Server) -> Iterator[Server]:
    """The server once it answers CONNECT, stopped afterwards whatever happened."""
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


async def _probe(port: int) -> None:
    connection = await Connection.open("127.0.0.1", port, "bench-probe")
    await connection.close()


def mosquitto_version() -> str:
    out = subprocess.run([MOSQUITTO, "-h"], capture_output=True, text=True, check=False).stdout
    words = out.split()
    return words[2] if len(words) > 2 and words[1] == "version" else "?"


@contextmanager
def mosquitto(label: str = "mosquitto", *, max_queued: int = 0, max_inflight: int = 0) -> Iterator[Server]:
    """Mosquitto on a free port; 0 is "no limit" for both of its per-client queues."""
    with tempfile.TemporaryDirectory(prefix="broker-bench-mosquitto-") as directory:
        port = free_port()
        config = Path(directory) / "mosquitto.conf"
        config.write_text(
            f"listener {port} 127.0.0.1\n"
            "allow_anonymous true\n"
            "persistence false\n"
            f"max_queued_messages {max_queued}\n"  # over it, QoS 1 / 2 deliveries are dropped
            f"max_inflight_messages {max_inflight}\n"
            "set_tcp_nodelay true\n"
            "log_dest none\n"
        )
        with log_file().open("ab") as out:
            process = subprocess.Popen([MOSQUITTO, "-c", str(config)], stdout=out, stderr=out)
        name = label.replace("mosquitto", f"mosquitto {mosquitto_version()}")
        with running(Server(name, port, process, log_file())) as server:
            yield server


@contextmanager
def broker(kind: str, pg_url: str, processes: int = 1) -> Iterator[Server]:
    """``broker serve --mqtt`` on a throw-away database, with ``processes`` listener processes;
    anonymous MQTT clients act as ``bench``, and each may have as many QoS 1/2 messages in
    flight as MQTT's packet ids allow."""
    with scratch_database(kind, pg_url, "mqtt") as url:
        port = free_port()
        env = {key: value for key, value in os.environ.items() if not key.startswith("BROKER_")}
        env["BROKER_MQTT_ANONYMOUS"] = "bench"
        env["BROKER_MQTT_MAX_INFLIGHT"] = str(MAX_INFLIGHT)  # as Mosquitto's: no limit but MQTT's
        argv = [sys.executable, "-m", "broker.cli", "--db", url, "--qmgr", "QM1", "--log-format", "json"]
        argv += ["serve", "--mqtt", f"127.0.0.1:{port}", "--mqtt-processes", str(processes)]
        with log_file().open("ab") as out:
            process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=out)
        name = f"broker ({kind})" if processes == 1 else f"broker ({kind}, {processes} processes)"
        with running(Server(name, port, process, log_file())) as server:
            yield server


# --- the workloads ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Workload:
    seconds: float = 2.0  # publishing time of each throughput run
    publishers: int = 4
    processes: int = 2
    window: int = 100
    rate: int = 1_000
    latency_seconds: float = 10.0
    idle: int = 2_000
    idle_seconds: float = 3.0  # how long subscribers wait for stragglers once publishing is over
    repeat: int = 3  # throughput runs per QoS; all are shown, what any run missed is counted
    connections: int = 0  # the connection-scale figures with this many clients (0: none)
    mqtt_processes: tuple[int, ...] = (1,)  # the broker with each of these listener process counts
    nodes: tuple[int, ...] = ()  # an MQTT cluster of each of these node counts (broker.bench.mqtt_cluster)
    floods: tuple[mqtt_flood.FloodLoad, ...] = mqtt_flood.LOADS
    connect_flood_seconds: float = mqtt_churn.PROBE_SECONDS  # each probe phase (0: no CONNECT flood)
    churn: int = 100_000  # connect-and-leave cycles for the churn memory figure (0: none)
    protocol: int = MQTT_311  # the protocol level of every client
    shared: int = 10  # subscribers in the shared subscription's group (0: no shared runs)


def run_id() -> str:
    return f"{time.time_ns():x}"


def split(items: Sequence[int], parts: int) -> list[tuple[int, ...]]:
    groups = [tuple(items[i::parts]) for i in range(parts)]
    return [group for group in groups if group]


def run_clients(
    server: Server,
    qos: int,
    publishers: Sequence[PublisherSpec],
    subscribers: SubscriberSpec,
    processes: int,
    ports: Sequence[int] = (),
    members: int = SUBSCRIBERS,
) -> tuple[list[PublisherResult], list[SubscriberResult]]:
    """``members`` subscribers connected and subscribed first, then every publisher process
    started together. ``ports``: the subscriber processes connect to these in turn (the nodes
    of a cluster)."""
    ctx = multiprocessing.get_context("spawn")
    results: Any = ctx.Queue()
    ready: Any = ctx.Queue()
    done = ctx.Event()
    published_total = ctx.Value("q", 0)
    arrived = ctx.Value("q", 0) if subscribers.share else None
    workers = []
    groups = split(range(members), processes)
    for index, group in enumerate(groups):
        port = ports[index % len(ports)] if ports else subscribers.port
        spec = SubscriberSpec(**{**asdict(subscribers), "subscribers": group, "port": port})
        workers.append(
            ctx.Process(
                target=subscriber_process, args=(spec, ready, done, published_total, results, None, arrived)
            )
        )
    try:
        for worker in workers:
            worker.start()
        for _ in range(members):
            try:
                if ready.get(timeout=SUBSCRIBED_SECONDS) != "ready":
                    break  # a subscriber process failed: its result says why
            except queue.Empty:
                raise RuntimeError(
                    f"{server.name}: subscribers not ready in {SUBSCRIBED_SECONDS:.0f} s"
                ) from None
        start_at = time.time() + 0.5
        for publisher in publishers:
            timed = PublisherSpec(**{**asdict(publisher), "start_at": start_at})
            workers.append(ctx.Process(target=publisher_process, args=(timed, results)))
            workers[-1].start()
        published, received = _collect(results, done, published_total, len(publishers), len(groups))
    finally:
        for worker in (w for w in workers if w.pid is not None):
            worker.join(5)
            if worker.is_alive():
                worker.kill()
    errors = [r.error for r in published if r.error] + [r.error for r in received if r.error]
    if errors:
        raise RuntimeError(f"{server.name} QoS {qos}: {'; '.join(errors)}")
    return published, received


def _collect(
    results: Any, done: Any, published_total: Any, publisher_count: int, subscriber_count: int
) -> tuple[list[PublisherResult], list[SubscriberResult]]:
    """Every process's result; once the publishers are in, the subscribers are told how many
    publications to expect."""
    published: list[PublisherResult] = []
    received: list[SubscriberResult] = []
    batches = 0
    deadline = time.monotonic() + RUN_SECONDS
    while len(published) < publisher_count or batches < subscriber_count:
        try:
            kind, value = results.get(timeout=max(1.0, deadline - time.monotonic()))
        except queue.Empty:
            raise RuntimeError(f"no result after {RUN_SECONDS:.0f} s") from None
        if kind == "publisher":
            published.append(value)
            if len(published) == publisher_count or value.error:
                published_total.value = sum(r.published for r in published)
                done.set()
        else:
            received += value
            batches += 1
            if any(r.error for r in value):
                done.set()
    return published, received


def fastest(runs: Sequence[Throughput]) -> Throughput:
    return max(runs, key=lambda run: rate(run.distinct, run.deliver_seconds))
