"""``broker bench mqtt --nodes 1,2,3``: the broker as an MQTT cluster of N nodes, each a ``broker
serve --mqtt`` with its own node name and port, on one throw-away PostgreSQL database.

For each node count: QoS 1 throughput (the workload's publishers and its 10 subscribers spread
over the nodes, the fastest of ``--repeat`` runs) with the nodes' CPU per delivery; the
connect rate (``--connections`` clients, 1,000 if not given, spread over the nodes, each
CONNECT then one SUBSCRIBE); and, with two nodes or more, the failover: as many persistent QoS 1
subscribers on the first node, which is killed (SIGKILL); each reconnects at once to another
node, and the figure is the time from the kill to the last one's CONNACK with its session. On
one machine the nodes share its cores: the rates say what one machine does, the CPU per
delivery what each node costs, which is what predicts nodes on machines of their own.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from broker.bench.mqtt_load import Connection, PublisherSpec, SubscriberSpec
from broker.bench.mqtt_runs import (
    MAX_INFLIGHT,
    SUBSCRIBERS,
    UNLIMITED,
    Server,
    Throughput,
    Workload,
    fastest,
    run_clients,
    run_id,
    running,
    split,
)
from broker.bench.options import log_file
from broker.bench.process_stats import cpu_seconds, quiet
from broker.bench.processes import free_port
from broker.bench.scratch import scratch_database
from broker.protocol.mqtt.packets import SubAck, Subscribe

NODE_TIMEOUT = 5.0  # the default node_timeout: the failover figure is the default's
STEP = 200  # clients connecting at once
MIN_CONNECTIONS = 1_000
FAILOVER_TOPIC = "failover/data"


@dataclass(frozen=True, slots=True)
class ClusterRun:
    nodes: int
    publications_per_second: float
    deliveries_per_second: float
    missing: int
    cpu_us_per_delivery: float  # every node's CPU time over the run's deliveries
    connections: int
    connects_per_second: float
    subscribes_per_second: float
    storm: Storm  # new clients each CONNECT then SUBSCRIBE, as after an outage
    failover_clients: int
    failover_seconds: float  # SIGKILL of the first node -> the last client resumed (nan: one node)


@dataclass(frozen=True, slots=True)
class Storm:
    """A reconnect storm: ``clients`` new clients, ``STEP`` at a time, each a CONNECT then a
    SUBSCRIBE to a topic of its own, answered (rate), and the servers' CPU per client."""

    clients: int
    per_second: float
    cpu_us_per_client: float


@contextmanager
def cluster(pg_url: str, count: int) -> Iterator[list[Server]]:
    """``count`` nodes on one scratch PostgreSQL database."""
    with scratch_database("postgresql", pg_url, "mqtt_cluster") as url, ExitStack() as stack:
        yield [stack.enter_context(_node(url, number)) for number in range(1, count + 1)]


@contextmanager
def _node(url: str, number: int) -> Iterator[Server]:
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("BROKER_")}
    env |= {
        "BROKER_MQTT_ANONYMOUS": "bench",
        "BROKER_MQTT_MAX_INFLIGHT": str(MAX_INFLIGHT),
        "BROKER_NODE_NAME": f"node{number}",
        "BROKER_NODE_TIMEOUT": str(NODE_TIMEOUT),
    }
    argv = [sys.executable, "-m", "broker.cli", "--db", url, "--log-format", "json"]
    argv += ["serve", "--mqtt", f"127.0.0.1:{port}"]
    with log_file().open("ab") as out:
        process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=out)
    with running(Server(f"node{number}", port, process, log_file())) as server:
        yield server


def measure(servers: Sequence[Server], load: Workload) -> ClusterRun:
    """Throughput, connect rate and (with two nodes or more) failover of ``servers``."""
    best = fastest([_throughput(servers, load) for _ in range(load.repeat)])
    ports = [server.port for server in servers]
    count = load.connections or MIN_CONNECTIONS
    connect, subscribe = asyncio.run(_connect_rate(ports, count))
    storming = storm(servers, count, f"storm{len(servers)}")
    failover = _failover(servers, count) if len(servers) > 1 else float("nan")
    return ClusterRun(
        len(servers),
        best.publications / best.publish_seconds,
        best.distinct / best.deliver_seconds,
        best.expected - best.distinct,
        best.cpu_per_delivery_us,
        count,
        count / connect,
        count / subscribe,
        storming,
        count if len(servers) > 1 else 0,
        failover,
    )


def _throughput(servers: Sequence[Server], load: Workload) -> Throughput:
    """One QoS 1 run (as ``broker.bench.mqtt.throughput``) with the clients spread over the
    nodes, and every node's CPU time."""
    ports = [server.port for server in servers]
    specs = [
        PublisherSpec(
            "127.0.0.1", ports[i % len(ports)], 1, group, UNLIMITED, 0.0, load.window, seconds=load.seconds
        )
        for i, group in enumerate(split(range(load.publishers), len(ports)))
    ]
    subscribers = SubscriberSpec("127.0.0.1", ports[0], 1, (), run_id(), load.idle_seconds)
    before = sum(cpu_seconds(server.pid) for server in servers)
    published, received = run_clients(servers[0], 1, specs, subscribers, min(len(ports), SUBSCRIBERS), ports)
    cpu = sum(cpu_seconds(server.pid) for server in servers) - before
    started = min(r.started for r in published)
    total = sum(r.published for r in published)
    return Throughput(
        f"{len(servers)} nodes",
        1,
        total,
        total * SUBSCRIBERS,
        sum(r.received for r in received),
        sum(r.distinct for r in received),
        max(r.finished for r in published) - started,
        max((r.last for r in received if r.received), default=started) - started,
        sum(r.cpu for r in published),
        sum(r.cpu for r in received),
        cpu,
    )


async def _connect_rate(ports: Sequence[int], count: int) -> tuple[float, float]:
    """Seconds for ``count`` clients spread over ``ports`` to connect, then to subscribe."""
    clients: list[Connection] = []
    started = time.monotonic()
    for first in range(0, count, STEP):
        numbers = range(first, min(count, first + STEP))
        clients += await asyncio.gather(
            *(Connection.open("127.0.0.1", ports[n % len(ports)], f"rate-{n}") for n in numbers)
        )
    connect = time.monotonic() - started
    started = time.monotonic()
    for first in range(0, count, STEP):
        await asyncio.gather(
            *(_subscribe(clients[n], f"rate/{n}") for n in range(first, min(count, first + STEP)))
        )
    subscribe = time.monotonic() - started
    await asyncio.gather(*(client.close() for client in clients))
    return connect, subscribe


def storm(servers: Sequence[Server], count: int, tag: str) -> Storm:
    """``count`` new clients spread over ``servers`` (a cluster's nodes, or the anchor), each a
    CONNECT then a SUBSCRIBE, ``STEP`` at a time, on servers done with what came before (the
    connect rate's clients leaving): the rate, and the servers' CPU per client until the last
    is answered (their leaving after it is not counted)."""
    pids = [server.pid for server in servers]
    quiet(pids)
    before = sum(cpu_seconds(pid) for pid in pids)
    seconds, cpu = asyncio.run(_storming([server.port for server in servers], count, tag, pids))
    return Storm(count, count / seconds, (cpu - before) / count * 1e6)


async def _storming(ports: Sequence[int], count: int, tag: str, pids: Sequence[int]) -> tuple[float, float]:
    """The storm's seconds, and the servers' CPU seconds when its last client was answered."""

    async def client(n: int) -> Connection:
        connection = await Connection.open("127.0.0.1", ports[n % len(ports)], f"{tag}-{n}")
        await _subscribe(connection, f"{tag}/{n}")
        return connection

    clients: list[Connection] = []
    started = time.monotonic()
    for first in range(0, count, STEP):
        clients += await asyncio.gather(*(client(n) for n in range(first, min(count, first + STEP))))
    seconds = time.monotonic() - started
    cpu = sum(cpu_seconds(pid) for pid in pids)
    await asyncio.gather(*(connection.close() for connection in clients))
    return seconds, cpu


async def _subscribe(client: Connection, topic: str) -> None:
    client.send(Subscribe(1, ((topic, 1),)))
    answer = await client.next_packet(f"{topic}: SUBACK")
    if not isinstance(answer, SubAck):
        raise RuntimeError(f"{topic}: SUBSCRIBE answered {answer}")


def _failover(servers: Sequence[Server], count: int) -> float:
    """Seconds from the SIGKILL of the first node, holding ``count`` persistent subscribers,
    to the last of them resumed on another node."""
    return asyncio.run(_failing_over(servers, count))


async def _failing_over(servers: Sequence[Server], count: int) -> float:
    first, *others = servers
    names = [f"failover-{n}" for n in range(count)]
    clients: list[Connection] = []
    for start in range(0, count, STEP):
        batch = names[start : start + STEP]
        clients += await asyncio.gather(*(_persistent(first.port, name) for name in batch))
    await asyncio.to_thread(quiet, [server.pid for server in servers])  # the storm's clients gone
    killed = time.monotonic()
    os.kill(first.pid, signal.SIGKILL)
    resumed = await asyncio.gather(
        *(_resume([s.port for s in others], n, name) for n, name in enumerate(names))
    )
    for client in clients:
        if client.transport is not None:
            client.transport.close()
    return max(resumed) - killed


async def _persistent(port: int, name: str) -> Connection:
    client = await Connection.open("127.0.0.1", port, name, clean=False)
    await _subscribe(client, FAILOVER_TOPIC)
    return client


async def _resume(ports: Sequence[int], number: int, name: str) -> float:
    """Connect again, to the surviving nodes in turn, until the session is resumed; when."""
    attempt = number
    while True:
        try:
            client = await Connection.open("127.0.0.1", ports[attempt % len(ports)], name, clean=False)
        except (OSError, RuntimeError):
            attempt += 1
            await asyncio.sleep(0.1)
            continue
        resumed = time.monotonic()
        if not client.present:
            raise RuntimeError(f"{name}: resumed without its session")
        await client.close()
        return resumed


def lines(runs: Sequence[ClusterRun], anchor: Storm | None = None) -> list[str]:
    """The report's cluster section; ``anchor``: Mosquitto's storm, measured in the same run."""
    found = [
        "MQTT cluster on one PostgreSQL database (its nodes share this machine; "
        f"node_timeout {NODE_TIMEOUT:g} s):",
        f"{'nodes':>5} {'QoS 1 pubs/s':>12} {'deliveries/s':>13} {'missing':>8} {'us/dlv':>8} "
        f"{'connects/s':>10} {'subscribes/s':>12} {'storm/s':>8} {'us/client':>9} {'failover':>22}",
    ]
    for run in runs:
        failover = (
            f"{run.failover_clients} clients in {run.failover_seconds:.1f} s" if run.failover_clients else "-"
        )
        found.append(
            f"{run.nodes:>5} {run.publications_per_second:>12,.0f} {run.deliveries_per_second:>13,.0f} "
            f"{run.missing:>8} {run.cpu_us_per_delivery:>8.1f} {run.connects_per_second:>10,.0f} "
            f"{run.subscribes_per_second:>12,.0f} {run.storm.per_second:>8,.0f} "
            f"{run.storm.cpu_us_per_client:>9,.0f} {failover:>22}"
        )
    if anchor is not None:
        found.append(
            f"reconnect storm (new clients, each CONNECT then SUBSCRIBE, {STEP} at once): Mosquitto "
            f"{anchor.per_second:,.0f}/s at {anchor.cpu_us_per_client:,.0f} us of CPU a client"
        )
        found += [
            f"  ratio, {run.nodes} node(s) / Mosquitto: {run.storm.per_second / anchor.per_second:.2f}x the "
            f"rate, {run.storm.cpu_us_per_client / max(anchor.cpu_us_per_client, 1e-9):.1f}x the CPU a client"
            for run in runs
        ]
    return found
