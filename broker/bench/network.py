"""Network benchmark: publications from QMB to subscribers at QMC through QMA, against the
same fan-out on a single broker, measured in the same run.

Three ``broker serve --api`` processes on loopback, each its own queue manager on its own
database (SQLite files, and PostgreSQL databases on one server), linked QMB - QMA - QMC.
Ten queues at QMC hold the wildcard subscriptions of the route benchmark
(``broker.bench.route``), each matching every publication, so QMB and QMA hold one proxy
subscription per pattern and each publication crosses both links once.

Backlog: with QMB stopped, N publications are preloaded on its stream queue; QMB is started
and the clock runs from its "broker started" log line to the moment all 10 x N deliveries
are committed at QMC. While it runs, the depth of every queue on the path is sampled: the
moment each stage has drained (QMB routed, QMB -> QMA sent, QMA routed, QMA -> QMC sent,
QMC routed) shows where the time goes. Anchor: the route benchmark's backlog measurement,
the same N publications routed to the same ten subscribers on one broker.

Streaming: a publisher puts at a fixed rate at QMB; latency is each delivery's commit-time
stamp at QMC minus the publisher's timestamp carried in the body (the three processes share
the machine's clock).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from broker import store
from broker.admin import neighbours
from broker.bench import processes
from broker.bench.options import DATABASES, database_list, emit, positive
from broker.bench.route import (
    PATTERNS,
    PUBLISHERS,
    SUBSCRIBERS,
    Latency,
    Throughput,
    broker_backlog,
    latencies,
    latency_lines,
    preload,
    publish_at_rate,
    summarise,
)
from broker.bench.scratch import DEFAULT_PG_URL, scratch_database
from broker.client import BrokerClient
from broker.core.system import DEFAULT_STREAM, INTER_BROKER_QUEUE
from broker.network import links
from broker.service.provision import prepare_database
from queues import QueueManager, make_engine
from queues.definition import MAX_MAX_DEPTH

READY_SECONDS = 60.0
DRAIN_SECONDS = 600.0
SAMPLE_SECONDS = 0.1
TOKENS = {("QMA", "QMB"): "bench-link-a-b-0123456789", ("QMA", "QMC"): "bench-link-a-c-0123456789"}
# Where a publication waits on its way, in order, and the stage that empties each place.
PATH = (
    ("QMB", DEFAULT_STREAM, "QMB routed"),
    ("QMB", "QMA", "QMB -> QMA sent"),
    ("QMA", INTER_BROKER_QUEUE, "QMA routed"),
    ("QMA", "QMC", "QMA -> QMC sent"),
    ("QMC", INTER_BROKER_QUEUE, "QMC routed"),
)


@dataclass(frozen=True, slots=True)
class NetworkRun:
    """One backlog through the network, with when each stage had drained (seconds after start)."""

    database: str
    publications: int
    deliveries: int
    seconds: float
    stages: dict[str, float]

    @property
    def publications_per_second(self) -> float:
        return self.publications / self.seconds


class Node:
    """One broker instance: a ``broker serve --api`` process over its own database."""

    def __init__(self, name: str, url: str, workdir: Path, batch_size: int) -> None:
        self.name = name
        self.url = url
        self.port = processes.free_port()
        serve = ["--api", "--host", "127.0.0.1", "--port", str(self.port), "--batch-size", str(batch_size)]
        log = workdir / f"{name}.log"
        self.server = processes.ServeProcess(name, url, log, serve, options=["--qmgr", name])
        engine = make_engine(url)
        prepare_database(engine, name)
        self.qm = QueueManager(engine, appl_name="bench", user_id="bench")

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.server.start(lambda: processes.api_ready(self.api), READY_SECONDS)

    def stop(self) -> None:
        self.server.stop()

    def started_at(self) -> float:
        """Wall-clock time of the last "broker started" in the log: routing begins there."""
        stamp = self.server.lines("broker started")[-1]["ts"]
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()

    def complaints(self) -> str:
        """The warnings and errors in the log, for an error message (the log goes with the run)."""
        return "\n".join(json.dumps(e) for e in self.server.lines() if e.get("level") in ("warning", "error"))

    def proxies_from(self, neighbour: str) -> int:
        with self.qm.reading() as conn:
            page = store.list_subscriptions(conn, store.SubscriptionFilter(q_mgr=neighbour), limit=1000)
        return len(page)

    def delivered(self) -> int:
        return sum(queue.depth for queue in self.qm.list_queues() if queue.name in SUBSCRIBERS)

    def waiting(self, queue: str) -> int:
        """Messages on ``queue`` and, for a transmission queue, those in flight from it."""
        with self.qm.reading() as conn:
            in_flight = links.outbox_depth(conn).get(queue, 0)
        return self.qm.depth(queue) + in_flight


@contextmanager
def network(kind: str, pg_url: str, batch_size: int) -> Iterator[dict[str, Node]]:
    """QMB - QMA - QMC running, with ten wildcard subscribers at QMC and their proxies in place."""
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="broker-net-")))
        nodes = {}
        for name in ("QMA", "QMB", "QMC"):
            url = stack.enter_context(scratch_database(kind, pg_url, f"net_{name.lower()}"))
            nodes[name] = Node(name, url, workdir, batch_size)
            stack.callback(nodes[name].qm.close)
            stack.callback(nodes[name].stop)
        for (a, b), token in TOKENS.items():
            neighbours.add_neighbour(nodes[a].qm, b, nodes[b].api, token, check_topology=False)
            neighbours.add_neighbour(nodes[b].qm, a, nodes[a].api, token, check_topology=False)
        for node in nodes.values():
            node.start()
        subscribe(nodes["QMC"])
        proxies = len(PATTERNS)
        processes.wait_until(
            lambda: nodes["QMB"].proxies_from("QMA") == proxies, READY_SECONDS, "proxies at QMB"
        )
        yield nodes


def subscribe(node: Node) -> None:
    """The route benchmark's ten wildcard subscribers, registered through the broker at ``node``."""
    with BrokerClient(node.qm, user_id="bench", timeout=READY_SECONDS) as client:
        for name, pattern in zip(SUBSCRIBERS, PATTERNS, strict=True):
            node.qm.define_queue(name, max_depth=MAX_MAX_DEPTH, replace_existing=True)
            response = client.subscribe(pattern, name)
            if not response.ok:
                raise RuntimeError(
                    f"{node.name} refused {name} on {pattern}: {response.describe()}\n{node.complaints()}"
                )


def backlog(kind: str, nodes: dict[str, Node], count: int) -> NetworkRun:
    """Preload ``count`` publications at a stopped QMB, start it, time until QMC delivered all."""
    b, c = nodes["QMB"], nodes["QMC"]
    b.stop()
    preload(b.qm, count)
    b.start()
    expected = count * len(SUBSCRIBERS)
    drained: dict[str, float] = {}
    deadline = time.monotonic() + DRAIN_SECONDS
    while c.delivered() < expected:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{c.delivered():,} of {expected:,} deliveries after {DRAIN_SECONDS:.0f} s")
        now = time.time()
        for name, queue, stage in PATH:  # a stage is done when it and every stage before it are empty
            if nodes[name].waiting(queue):
                break
            drained.setdefault(stage, now)
        time.sleep(SAMPLE_SECONDS)
    finished = time.time()
    started = b.started_at()
    stages = {stage: drained.get(stage, finished) - started for _, _, stage in PATH}
    return NetworkRun(kind, count, c.delivered(), finished - started, stages)


def streaming(kind: str, nodes: dict[str, Node], rate: int, seconds: float) -> Latency:
    """Publish at ``rate``/s for ``seconds`` at QMB; latency to the commit at QMC."""
    b, c = nodes["QMB"], nodes["QMC"]
    for name in SUBSCRIBERS:
        c.qm.purge_queue(name)
    total, achieved = publish_at_rate(b.qm, rate, seconds, PUBLISHERS)
    processes.wait_until(lambda: c.qm.depth(SUBSCRIBERS[0]) >= total, DRAIN_SECONDS, "the stream at QMC")
    return summarise(kind, rate, achieved, latencies(c.qm, SUBSCRIBERS[0]))


def run(
    messages: int = 20_000,
    databases: Sequence[str] = DATABASES,
    *,
    pg_url: str = DEFAULT_PG_URL,
    batch_size: int = 500,
    rate: int = 500,
    stream_seconds: float = 10.0,
) -> dict[str, Any]:
    results: dict[str, Any] = {"messages": messages, "throughput": [], "latency": []}
    for kind in databases:
        single = broker_backlog(kind, messages, pg_url, batch_size)
        with network(kind, pg_url, batch_size) as nodes:
            through = backlog(kind, nodes, messages)
            results["latency"].append(asdict(streaming(kind, nodes, rate, stream_seconds)))
        results["throughput"].append(_compared(single, through))
    return results


def _compared(single: Throughput, through: NetworkRun) -> dict[str, Any]:
    return {
        "database": through.database,
        "single": asdict(single),
        "network": asdict(through),
        "ratio": through.publications_per_second / single.publications_per_second,
    }


def report(results: dict[str, Any]) -> str:
    lines = [
        f"backlog of {results['messages']:,} publications, 10 wildcard subscribers at QMC "
        "(10 deliveries each); network QMB -> QMA -> QMC",
        "",
        f"{'database':<12} {'path':<16} {'pubs/s':>9} {'deliveries/s':>13} {'seconds':>8} {'ratio':>7}",
    ]
    for row in results["throughput"]:
        for path, run_ in (("single broker", row["single"]), ("network", row["network"])):
            ratio = "anchor" if path == "single broker" else f"{row['ratio']:.2f}"
            lines.append(
                f"{row['database']:<12} {path:<16} {run_['publications'] / run_['seconds']:>9,.0f} "
                f"{run_['deliveries'] / run_['seconds']:>13,.0f} {run_['seconds']:>8.2f} {ratio:>7}"
            )
    lines += ["", "network backlog: seconds after QMB started when each stage had drained"]
    stages = [stage for _, _, stage in PATH]
    lines.append(f"{'database':<12} " + " ".join(f"{stage:>16}" for stage in stages))
    for row in results["throughput"]:
        done = row["network"]["stages"]
        lines.append(f"{row['database']:<12} " + " ".join(f"{done[stage]:>16.2f}" for stage in stages))
    lines += ["", *latency_lines(results["latency"], width=12)]
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=positive, default=20_000, help="publications in the backlog")
    parser.add_argument(
        "--databases",
        type=database_list,
        default=DATABASES,
        metavar="KIND,...",
        help="sqlite, postgresql or both (default both)",
    )
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL, metavar="URL")
    parser.add_argument("--batch-size", type=positive, default=500, help="of every broker and channel")
    parser.add_argument("--rate", type=positive, default=500, help="publications/s of the streaming run")
    parser.add_argument("--stream-seconds", type=float, default=10.0, help="of the streaming run")
    parser.add_argument("--json", action="store_true", help="print JSON")


def command(args: argparse.Namespace) -> None:
    results = run(
        args.messages,
        args.databases,
        pg_url=args.pg_url,
        batch_size=args.batch_size,
        rate=args.rate,
        stream_seconds=args.stream_seconds,
    )
    emit(args, results, report(results))
