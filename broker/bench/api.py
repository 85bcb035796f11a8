"""Admin API benchmark: listing latency over 1,000,000 subscriptions, and subscription creates per second.

Data: N subscriptions (default 1,000,000) in a throw-away PostgreSQL database,
written with one COPY of the rows ``broker.store.subscription_row`` makes, spread
over 1,000 subscriber queues and 20 regions of topics
``Region<r>/Site<s>/Device<i>/temperature``; then ANALYZE.

Latency: ``broker api`` (a real uvicorn process) answers one client over HTTP
keep-alive; each case is requested ``--requests`` times with varying arguments and
p50/p99 are measured at the client:

* first page: the first 100 subscriptions;
* deep page: 100 subscriptions after a random id in the second half (keyset);
* by queue: 100 subscriptions of a random queue (1,000 each);
* by topic, broad: ``Region<r>/#`` (1 subscription in 20 matches);
* by topic, narrow: ``Region<r>/Site<s>/#`` (1 in 10,000 matches, spread over the
  whole table);
* show: one subscription by id.

Creates: ``broker serve --api`` (router and API in one process, its state loaded
with all N subscriptions) takes subscription creates from 4 concurrent clients,
each create a RegSub through the broker answered with its ``<pscr>``; creates per
second over ``--seconds``. The target is a p99 under 50 ms for a page of 100.
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import httpx
import psycopg
from sqlalchemy import Engine

from broker import store
from broker.admin import accounts
from broker.bench import processes
from broker.bench.options import emit, log_file, positive
from broker.bench.scratch import DEFAULT_PG_URL, scratch_database
from broker.core.subscription import Identity, Subscription, SubscriptionKey
from broker.service.provision import ensure_system_queues, prepare_database
from broker.store.schema import subscriptions
from queues import QueueManager, make_engine
from queues.database import conninfo
from queues.ids import now_ms

DEFAULT_SUBSCRIPTIONS = 1_000_000
DEFAULT_REQUESTS = 300
DEFAULT_SECONDS = 20.0
CLIENTS = 4
QUEUES = 1_000
REGIONS = 20
SITES = 500
PAGE = 100
QMGR = "QM1"
READY_SECONDS = 600.0
_COLUMNS = [c.name for c in subscriptions.columns if c.name != "id"]


@dataclass(frozen=True, slots=True)
class Latency:
    case: str
    requests: int
    p50_ms: float
    p99_ms: float


@dataclass(frozen=True, slots=True)
class Creates:
    clients: int
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float

    @property
    def per_second(self) -> float:
        return self.requests / self.seconds


@dataclass(frozen=True, slots=True)
class Report:
    subscriptions: int
    insert_seconds: float
    router_load_seconds: float
    latencies: list[Latency]
    creates: Creates

    def as_dict(self) -> dict[str, Any]:
        return {
            "subscriptions": self.subscriptions,
            "insert_seconds": self.insert_seconds,
            "router_load_seconds": self.router_load_seconds,
            "latencies": [asdict(latency) for latency in self.latencies],
            "creates": {**asdict(self.creates), "per_second": self.creates.per_second},
        }


def queue_name(i: int) -> str:
    return f"BENCH.Q{i % QUEUES:04d}"


def topic(i: int) -> str:
    return f"Region{i % REGIONS}/Site{(i // REGIONS) % SITES}/Device{i}/temperature"


def _subscription(i: int, created_at: int) -> Subscription:
    key = SubscriptionKey(Identity(QMGR, queue_name(i), None), "", topic(i), None)
    return Subscription(key=key, user_id=f"user{i % QUEUES}", options=0, created_at=created_at, seq=i)


def insert_subscriptions(engine: Engine, count: int) -> float:
    """COPY ``count`` subscriptions into the store's table; returns the seconds it took."""
    started = time.perf_counter()
    now = now_ms()
    statement = f"COPY {subscriptions.name} ({', '.join(_COLUMNS)}) FROM STDIN"
    with psycopg.connect(conninfo(engine.url)) as conn:
        with conn.cursor() as cursor, cursor.copy(statement) as copy:
            for i in range(count):
                row = store.subscription_row(_subscription(i, now))
                copy.write_row([row[name] for name in _COLUMNS])
        conn.execute(f"ANALYZE {subscriptions.name}")
    return time.perf_counter() - started


def _percentiles(samples: Sequence[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return statistics.median(ordered) * 1000, p99 * 1000


@contextmanager
def serving(url: str, secret: str, *command: str, router: bool = False) -> Iterator[tuple[str, float]]:
    """Run ``broker --db url <command> --port P`` until the block ends; yields its base URL and
    how long it took to be ready: to answer /ready, and with ``router`` to list a live router
    in its status (the router reports once it has loaded every subscription)."""
    port = processes.free_port()
    argv = [sys.executable, "-m", "broker.cli", "--db", url, "--log-level", "WARNING", *command]
    started = time.perf_counter()
    with log_file().open("ab") as log:
        process = subprocess.Popen([*argv, "--port", str(port)], stdout=subprocess.DEVNULL, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {secret}"}, timeout=5) as client:
            _wait(process, lambda: client.get("/ready").status_code == 200)
            if router:
                _wait(process, lambda: bool(client.get("/api/v1/status").json()["routers"]))
        yield base, time.perf_counter() - started
    finally:
        process.terminate()
        process.wait(60)


def _wait(process: subprocess.Popen[bytes], ready: Callable[[], bool]) -> None:
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the API process exited with {process.returncode}")
        try:
            if ready():
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError("the API did not become ready")


Case = tuple[str, Callable[[], tuple[str, dict[str, Any]]]]  # a name, and the next URL and query


def _cases(count: int, rng: random.Random) -> list[Case]:
    path = "/api/v1/subscriptions"

    def page(**filters: Callable[[], object]) -> Callable[[], tuple[str, dict[str, Any]]]:
        return lambda: (path, {"limit": PAGE, **{name: value() for name, value in filters.items()}})

    def region() -> str:
        return f"Region{rng.randrange(REGIONS)}"

    return [
        ("first page", page()),
        ("deep page (keyset)", page(after=lambda: rng.randrange(count // 2, count))),
        ("by queue", page(queue=lambda: queue_name(rng.randrange(QUEUES)))),
        ("by topic Region<r>/#", page(topic=lambda: f"{region()}/#")),
        ("by topic Region<r>/Site<s>/#", page(topic=lambda: f"{region()}/Site{rng.randrange(SITES)}/#")),
        ("show one", lambda: (f"{path}/{rng.randrange(1, count + 1)}", {})),
    ]


def measure_latencies(base: str, secret: str, count: int, requests: int) -> list[Latency]:
    rng = random.Random(5)
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {secret}"}, timeout=60) as client:
        return latencies(client, _cases(count, rng), requests)


def latencies(client: httpx.Client, cases: Sequence[Case], requests: int) -> list[Latency]:
    """p50 and p99 of each case over ``requests`` GETs, after a few to warm the connection,
    the caches and the query plans."""
    found = []
    for case, make in cases:
        for _ in range(max(5, requests // 20)):
            _timed(client, make)
        p50, p99 = _percentiles([_timed(client, make) for _ in range(requests)])
        found.append(Latency(case, requests, p50, p99))
    return found


def _timed(client: httpx.Client, make: Callable[[], tuple[str, dict[str, Any]]]) -> float:
    url, params = make()
    started = time.perf_counter()
    client.get(url, params=params).raise_for_status()
    return time.perf_counter() - started


def measure_creates(base: str, secret: str, seconds: float) -> Creates:
    """``CLIENTS`` threads creating subscriptions (each its own queue and topics) for ``seconds``."""
    latencies: list[list[float]] = [[] for _ in range(CLIENTS)]
    deadline = time.perf_counter() + seconds
    errors: list[str] = []

    def client_loop(number: int) -> None:
        headers = {"Authorization": f"Bearer {secret}"}
        with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
            i = 0
            while time.perf_counter() < deadline:
                body = {"topics": [f"Bench/Client{number}/Topic{i}"], "queue": f"BENCH.C{number}"}
                started = time.perf_counter()
                response = client.post("/api/v1/subscriptions", json=body)
                latencies[number].append(time.perf_counter() - started)
                if response.status_code != 201:
                    errors.append(f"{response.status_code} {response.text}")
                    return
                i += 1

    started = time.perf_counter()
    threads = [threading.Thread(target=client_loop, args=(n,)) for n in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"a create failed: {errors[0]}")
    samples = [latency for per_client in latencies for latency in per_client]
    p50, p99 = _percentiles(samples)
    return Creates(CLIENTS, len(samples), elapsed, p50, p99)


def _prepare(url: str) -> str:
    """Migrate, define the queues, and issue the admin token the clients use."""
    engine = make_engine(url)
    try:
        prepare_database(engine, QMGR)
        with QueueManager(engine, appl_name="bench") as qm:
            ensure_system_queues(qm)
            for name in [queue_name(i) for i in range(QUEUES)] + [f"BENCH.C{n}" for n in range(CLIENTS)]:
                qm.define_queue(name, max_depth=999_999_999)
            with qm.unit_of_work() as uow:
                return accounts.create_token(uow.connection, "admin", "bench").secret
    finally:
        engine.dispose()


def run(
    *,
    count: int = DEFAULT_SUBSCRIPTIONS,
    requests: int = DEFAULT_REQUESTS,
    seconds: float = DEFAULT_SECONDS,
    pg_url: str = DEFAULT_PG_URL,
) -> Report:
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request would drown the figures
    with scratch_database("postgresql", pg_url, label="api") as url:
        secret = _prepare(url)
        engine = make_engine(url)
        try:
            insert_seconds = insert_subscriptions(engine, count)
        finally:
            engine.dispose()
        with serving(url, secret, "api") as (base, _):
            latencies = measure_latencies(base, secret, count, requests)
        with serving(url, secret, "serve", "--api", router=True) as (base, load_seconds):
            creates = measure_creates(base, secret, seconds)
    return Report(count, insert_seconds, load_seconds, latencies, creates)


def table(report: Report) -> str:
    lines = [
        f"{report.subscriptions:,} subscriptions in PostgreSQL, inserted in {report.insert_seconds:.1f} s",
        f"{'case (page of 100 unless show)':<34} {'requests':>8} {'p50 ms':>8} {'p99 ms':>8}",
    ]
    lines += [f"{r.case:<34} {r.requests:>8} {r.p50_ms:>8.2f} {r.p99_ms:>8.2f}" for r in report.latencies]
    c = report.creates
    lines.append(
        f"subscription create, {c.clients} clients: {c.per_second:,.0f}/s"
        f" ({c.requests} in {c.seconds:.1f} s),"
        f" p50 {c.p50_ms:.1f} ms, p99 {c.p99_ms:.1f} ms"
        f" (router ready after loading the state: {report.router_load_seconds:.1f} s)"
    )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--subscriptions", type=positive, default=DEFAULT_SUBSCRIPTIONS)
    parser.add_argument("--requests", type=positive, default=DEFAULT_REQUESTS, help="per case")
    parser.add_argument("--seconds", type=float, default=DEFAULT_SECONDS, help="of creates")
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL, metavar="URL")
    parser.add_argument("--json", action="store_true", help="print JSON")


def command(args: argparse.Namespace) -> None:
    report = run(count=args.subscriptions, requests=args.requests, seconds=args.seconds, pg_url=args.pg_url)
    emit(args, report.as_dict(), table(report))
