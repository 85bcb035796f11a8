"""Routing benchmark: the broker against RabbitMQ, measured in the same run.

Backlog: N publications (256-byte bodies, topics ``Sport/Soccer/Team<k>/Score``)
are preloaded on the stream queue; ten subscribers hold wildcard subscriptions on
their own queues, each matching every publication; the broker routes until every
delivery is committed (10 per publication). SQLite and PostgreSQL.

Anchor: RabbitMQ on 127.0.0.1 (aio-pika): a durable topic exchange, ten durable
queues bound with the same patterns (``+`` -> ``*``, ``/`` -> ``.``), persistent
messages, publisher confirms with ``--confirm-window`` (default 500) in flight;
timed until the last confirm. Both sides make the same promise when they say done:
every delivery is on disk in its subscriber queue.

Scale-out: each backlog again with ``--scale-out`` routing processes (default 2) sharing
the stream, as ``broker serve --routers`` runs them (``docs/operations.md``: batches commit
in claim order, so the stream's order is kept).

Streaming: a publisher puts at a fixed rate while ``broker serve`` (a separate
process) routes; put-to-delivery latency is each delivery's commit-time stamp minus
the publisher's timestamp carried in the body.

Memory: ``broker serve`` drains a large backlog (``--memory-backlog``) while its
resident set size is sampled; it must stay flat.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from broker.bench.options import DATABASES, database_list, emit, log_file
from broker.bench.scratch import DEFAULT_PG_URL, scratch_database
from broker.core.system import CONTROL_QUEUE, DEFAULT_STREAM
from broker.protocol import psc
from broker.protocol.messages import command_message
from broker.service.collector import tune_collector
from broker.service.config import Settings
from broker.service.provision import prepare_database
from broker.service.router import RoutingService
from queues import QueueManager, make_engine
from queues.definition import MAX_MAX_DEPTH
from queues.ids import now_ms
from queues.message import MQFMT_STRING, derive

PATTERNS = (
    "Sport/Soccer/+/Score",
    "Sport/#",
    "Sport/Soccer/#",
    "+/Soccer/+/Score",
    "Sport/+/+/Score",
    "#",
    "Sport/Soccer/+/#",
    "+/+/+/Score",
    "Sport/+/#",
    "+/#",
)
TEAMS = 50
BODY_SIZE = 256
SUBSCRIBERS = tuple(f"BENCH.SUB{i}" for i in range(len(PATTERNS)))
RABBIT_URL = "amqp://guest:guest@127.0.0.1/"
PUBLISHERS = 4


@dataclass(frozen=True, slots=True)
class Throughput:
    system: str
    publications: int
    deliveries: int
    seconds: float

    @property
    def publications_per_second(self) -> float:
        return self.publications / self.seconds

    @property
    def deliveries_per_second(self) -> float:
        return self.deliveries / self.seconds


@dataclass(frozen=True, slots=True)
class Latency:
    database: str
    rate: int
    achieved_rate: int  # what the publishers managed; below ``rate`` the figure is not the target's
    publications: int
    p50_ms: float
    p99_ms: float
    max_ms: float


@dataclass(frozen=True, slots=True)
class Memory:
    database: str
    backlog: int
    rss_mb: list[float]  # sampled while draining, in order
    seconds: float


def topic(k: int) -> str:
    return f"Sport/Soccer/Team{k % TEAMS}/Score"


def publication(k: int, stamp: bool = False) -> Any:
    body = (str(now_ms()).encode() if stamp else b"").ljust(16, b" ") + bytes(BODY_SIZE - 16)
    command = psc.Publish((topic(k),))
    return command_message(command, payload=body, payload_format=MQFMT_STRING, request=False, user_id="bench")


@contextmanager
def broker_database(kind: str, pg_url: str) -> Iterator[tuple[str, QueueManager]]:
    """A fresh queue manager with the system queues, ten subscriber queues and their subscriptions."""
    with scratch_database(kind, pg_url, "route") as url:
        engine = make_engine(url)
        prepare_database(engine, "QM1")
        qm = QueueManager(engine, appl_name="bench", user_id="bench")
        service = RoutingService(qm, Settings(database_url=url))
        service.prepare()
        for name in SUBSCRIBERS:
            qm.define_queue(name, max_depth=MAX_MAX_DEPTH)
        registrations = []
        for name, pattern in zip(SUBSCRIBERS, PATTERNS, strict=True):
            command = psc.RegSub((pattern,), q_name=name)
            registrations.append((CONTROL_QUEUE, command_message(command, request=False, user_id="bench")))
        qm.put_many(registrations)
        service.run_once()
        try:
            yield url, qm
        finally:
            qm.close()


def preload(qm: QueueManager, count: int, chunk: int = 10_000) -> None:
    template = publication(0)
    for start in range(0, count, chunk):
        batch = []
        for k in range(start, min(count, start + chunk)):
            batch.append((DEFAULT_STREAM, derive(template, body=publication(k).body)))
        qm.put_many(batch)


def delivered(qm: QueueManager) -> int:
    return sum(qm.depth(name) for name in SUBSCRIBERS)


def broker_backlog(kind: str, count: int, pg_url: str, batch_size: int, routers: int = 1) -> Throughput:
    """Preload ``count`` publications, then time the service until all are routed: in this
    process, or with ``routers`` > 1 by that many routing processes sharing the stream
    (the scale-out of ``docs/operations.md``), each started before the clock starts."""
    with broker_database(kind, pg_url) as (url, qm):
        preload(qm, count)
        if routers == 1:
            tune_collector()  # as RoutingService.run does in `broker serve`
            started = time.perf_counter()
            _drain(qm, RoutingService(qm, Settings(database_url=url, batch_size=batch_size)))
            seconds = time.perf_counter() - started
        else:
            seconds = _drain_in_processes(url, batch_size, routers)
        system = f"broker/{kind}" + (f" x{routers}" if routers > 1 else "")
        return Throughput(system, count, delivered(qm), seconds)


def _drain(qm: QueueManager, service: RoutingService) -> None:
    while qm.depth(DEFAULT_STREAM):
        service.run_once()


def _drain_in_processes(url: str, batch_size: int, routers: int) -> float:
    context = multiprocessing.get_context("spawn")  # no engine or connection crosses a fork
    ready = context.Barrier(routers + 1)
    processes = [context.Process(target=_router, args=(url, batch_size, ready)) for _ in range(routers)]
    for process in processes:
        process.start()
    ready.wait(timeout=120)
    started = time.perf_counter()
    for process in processes:
        process.join()
    seconds = time.perf_counter() - started
    if any(process.exitcode for process in processes):
        raise RuntimeError(f"a routing process failed: exit codes {[p.exitcode for p in processes]}")
    return seconds


def _router(url: str, batch_size: int, ready: Any) -> None:
    """One routing process of the scale-out measurement (it loads its state in its first
    batch, on the clock, as the one-process measurement does)."""
    qm = QueueManager(make_engine(url), appl_name="bench", user_id="bench")
    service = RoutingService(qm, Settings(database_url=url, batch_size=batch_size))
    tune_collector()
    ready.wait(timeout=120)
    try:
        _drain(qm, service)
    finally:
        qm.close()


def rabbit_backlog(count: int, window: int) -> Throughput:
    return asyncio.run(_rabbit(count, window))


async def _rabbit(count: int, window: int) -> Throughput:
    import aio_pika

    connection = await aio_pika.connect_robust(RABBIT_URL)
    try:
        channel = await connection.channel(publisher_confirms=True)
        exchange = await channel.declare_exchange("broker.bench", aio_pika.ExchangeType.TOPIC, durable=True)
        queues = []
        for name, pattern in zip(SUBSCRIBERS, PATTERNS, strict=True):
            queue = await channel.declare_queue(name, durable=True)
            await queue.purge()
            await queue.bind(exchange, routing_key=pattern.replace("/", ".").replace("+", "*"))
            queues.append(queue)
        body = bytes(BODY_SIZE)
        slots = asyncio.Semaphore(window)

        async def publish(k: int) -> None:
            async with slots:
                await exchange.publish(
                    aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                    routing_key=topic(k).replace("/", "."),
                    mandatory=True,
                )

        started = time.perf_counter()
        await asyncio.gather(*(publish(k) for k in range(count)))
        seconds = time.perf_counter() - started
        deliveries = 0
        # A fresh channel: the robust one answers a repeated declare from its cache (count 0).
        counting = await connection.channel()
        for queue in queues:
            declared = await counting.declare_queue(queue.name, passive=True)
            deliveries += declared.declaration_result.message_count or 0
            await queue.delete(if_unused=False, if_empty=False)
        await exchange.delete()
        return Throughput("rabbitmq", count, deliveries, seconds)
    finally:
        await connection.close()


@contextmanager
def serving(url: str, batch_size: int) -> Iterator[subprocess.Popen[bytes]]:
    """``broker serve`` in its own process (the product as users run it)."""
    command = [sys.executable, "-m", "broker.cli", "--db", url, "--log-level", "WARNING", "serve"]
    command += ["--batch-size", str(batch_size)]
    with log_file().open("ab") as log:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()


def streaming(
    kind: str, rate: int, seconds: float, pg_url: str, batch_size: int, publishers: int = PUBLISHERS
) -> Latency:
    """Publish at ``rate``/s for ``seconds`` while a separate broker process routes.

    ``publishers`` threads of one application share the rate, each putting one
    message at a time on its own schedule: one thread alone cannot put 1,000
    persistent messages a second on every database, and a publisher that falls
    behind would measure its own backlog rather than the broker. Their puts share a
    commit when they coincide (``queues.group_commit``), as any multi-threaded
    application's do.
    """
    with broker_database(kind, pg_url) as (url, qm), serving(url, batch_size):
        time.sleep(2.0)  # let it start and load its state
        total, achieved = publish_at_rate(qm, rate, seconds, publishers)
        deadline = time.monotonic() + 60
        while qm.depth(SUBSCRIBERS[0]) < total and time.monotonic() < deadline:
            time.sleep(0.1)
        return summarise(kind, rate, achieved, latencies(qm, SUBSCRIBERS[0]))


def publish_at_rate(qm: QueueManager, rate: int, seconds: float, publishers: int) -> tuple[int, float]:
    """Put ``rate * seconds`` stamped publications on the default stream from ``publishers``
    threads; returns how many, and the rate achieved."""
    total = int(rate * seconds)
    started = time.perf_counter() + 0.1
    threads = [
        threading.Thread(target=_publish, args=(qm, range(n, total, publishers), started, rate))
        for n in range(publishers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return total, total / (time.perf_counter() - started)


def _publish(qm: QueueManager, numbers: range, started: float, rate: int) -> None:
    """Put publication ``k`` at ``started + k / rate`` (never early), stamped as it is built."""
    for k in numbers:
        delay = started + k / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        qm.put(DEFAULT_STREAM, publication(k, stamp=True))


def latencies(qm: QueueManager, queue: str) -> Iterator[int]:
    """Put-to-delivery milliseconds of every delivery on ``queue``."""
    cursor = None
    while page := qm.browse(queue, after=cursor, limit=1000):
        for browsed in page:
            yield browsed.put_at - int(browsed.message.body[-BODY_SIZE:][:16].strip() or 0)
        cursor = page[-1].cursor


def summarise(kind: str, rate: int, achieved: float, measured: Iterable[int]) -> Latency:
    ordered = sorted(measured)
    return Latency(
        kind,
        rate,
        round(achieved),
        len(ordered),
        statistics.median(ordered),
        ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        ordered[-1],
    )


def memory(kind: str, backlog: int, pg_url: str, batch_size: int) -> Memory:
    """RSS of ``broker serve`` while it drains ``backlog`` preloaded publications, sampled
    every second once it has routed its first batch (before that it is still importing)."""
    with broker_database(kind, pg_url) as (url, qm):
        preload(qm, backlog)
        samples: list[float] = []
        started = time.perf_counter()
        with serving(url, batch_size) as process:
            while qm.depth(DEFAULT_STREAM) == backlog and process.poll() is None:
                time.sleep(0.1)
            while qm.depth(DEFAULT_STREAM):
                samples.append(_rss_mb(process.pid))
                time.sleep(1.0)
            samples.append(_rss_mb(process.pid))
        return Memory(kind, backlog, samples, time.perf_counter() - started)


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def run(
    messages: int = 20_000,
    databases: Sequence[str] = DATABASES,
    *,
    pg_url: str = DEFAULT_PG_URL,
    batch_size: int = 500,
    window: int = 500,
    rate: int = 1000,
    stream_seconds: float = 10.0,
    publishers: int = PUBLISHERS,
    memory_backlog: int = 0,
    scale_out: int = 2,
    with_rabbit: bool = True,
) -> dict[str, Any]:
    results: dict[str, Any] = {"messages": messages}
    anchor = rabbit_backlog(messages, window) if with_rabbit else None
    results["throughput"] = [asdict(anchor)] if anchor else []
    for kind, routers in _backlog_runs(databases, scale_out):
        mine = broker_backlog(kind, messages, pg_url, batch_size, routers)
        row = asdict(mine)
        if anchor:
            row["ratio_to_rabbitmq"] = mine.publications_per_second / anchor.publications_per_second
        results["throughput"].append(row)
    results["latency"] = [
        asdict(streaming(kind, rate, stream_seconds, pg_url, batch_size, publishers)) for kind in databases
    ]
    if memory_backlog:
        results["memory"] = [asdict(memory(databases[0], memory_backlog, pg_url, batch_size))]
    return results


def _backlog_runs(databases: Sequence[str], scale_out: int) -> list[tuple[str, int]]:
    """One router per database, then ``scale_out`` routers on each (``broker serve
    --routers``, ``docs/operations.md``)."""
    runs = [(kind, 1) for kind in databases]
    if scale_out > 1:
        runs.extend((kind, scale_out) for kind in databases)
    return runs


def latency_lines(rows: Iterable[dict[str, Any]], *, width: int) -> list[str]:
    """The streaming table, shared with the network benchmark's report."""
    lines = [
        f"{'streaming':<{width}} {'rate/s':>8} {'achieved':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}"
    ]
    for row in rows:
        lines.append(
            f"{row['database']:<{width}} {row['rate']:>8} {row['achieved_rate']:>9} "
            f"{row['p50_ms']:>8.1f} {row['p99_ms']:>8.1f} {row['max_ms']:>8.1f}"
        )
    return lines


def report(results: dict[str, Any]) -> str:
    lines = [
        f"backlog of {results['messages']:,} publications, 10 wildcard subscribers (10 deliveries each)",
        "",
    ]
    lines.append(f"{'system':<20} {'pubs/s':>10} {'deliveries/s':>13} {'seconds':>8} {'vs RabbitMQ':>12}")
    for row in results["throughput"]:
        pubs = row["publications"] / row["seconds"]
        ratio = f"{row['ratio_to_rabbitmq']:.2f}x" if "ratio_to_rabbitmq" in row else "anchor"
        lines.append(
            f"{row['system']:<20} {pubs:>10,.0f} {row['deliveries'] / row['seconds']:>13,.0f} "
            f"{row['seconds']:>8.2f} {ratio:>12}"
        )
    lines += ["", *latency_lines(results["latency"], width=20)]
    for row in results.get("memory", []):
        rss = row["rss_mb"]
        quarter = rss[len(rss) // 4]
        lines += [
            "",
            f"memory while {row['database']} drains {row['backlog']:,} publications "
            f"({row['seconds']:.0f} s): RSS after the first batch {rss[0]:.0f} MB, "
            f"at a quarter {quarter:.0f} MB, max {max(rss):.0f} MB, end {rss[-1]:.0f} MB "
            f"(growth from a quarter to the end {rss[-1] - quarter:+.0f} MB)",
        ]
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options, shared by ``python -m broker.bench.route`` and ``broker bench route``."""
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--databases", type=database_list, default=DATABASES, metavar="KIND,...")
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--confirm-window", type=int, default=500)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--stream-seconds", type=float, default=10.0)
    parser.add_argument("--publishers", type=int, default=PUBLISHERS, help="threads sharing the rate")
    parser.add_argument("--memory-backlog", type=int, default=0)
    parser.add_argument("--scale-out", type=int, default=2, help="routers sharing the stream (1: none)")
    parser.add_argument("--json", action="store_true")


def command(args: argparse.Namespace) -> None:
    results = run(
        args.messages,
        args.databases,
        pg_url=args.pg_url,
        batch_size=args.batch_size,
        window=args.confirm_window,
        rate=args.rate,
        stream_seconds=args.stream_seconds,
        publishers=args.publishers,
        memory_backlog=args.memory_backlog,
        scale_out=args.scale_out,
    )
    emit(args, results, report(results))
