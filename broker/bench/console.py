"""Web console benchmark: how fast its pages answer with 100,000 queues, against the cost of any
request on the machine (``/health``) in the same run.

Data: N queues (default 100,000) ``BENCH.Q<n>`` in a throw-away database (PostgreSQL by
default, ``--database sqlite`` for a file), every hundredth holding a few messages, inserted in
bulk from the row of one defined queue; then the broker's system queues.

Latency: ``broker api`` (a real uvicorn process) answers one client signed in to the console
(its session cookie) over HTTP keep-alive; each case is requested ``--requests`` times and
p50/p99 are measured at the client:

* anchor: ``GET /health``, what any request costs on this machine (HTTP, uvicorn, no database);
* the API's queue listing, ``GET /api/v1/queues?limit=50``, at offset 0 and at a random offset in
  the second half (the page is cut in SQL);
* queues, first page: ``/console/queues``, 50 queues with description, depth and its history,
  oldest message age, rates and open handles;
* queues, deep page: 50 queues after a random name in the second half (keyset);
* queues by pattern: ``BENCH.Q0<d>*`` (a thousandth of the queues match);
* queues sorted by depth: the first page, deepest first (the page shown is sorted);
* overview, live part: ``/console/overview/live``, what the overview fetches every 2 s;
* one queue: ``/console/queues/<name>``, its attributes and first messages decoded;
* with ``--subscriptions`` (PostgreSQL; default 1,000,000, COPYed in as ``broker bench api``
  does: ``Region<r>/Site<s>/Device<i>/temperature``, then vacuumed as autovacuum leaves a table
  after a bulk load): the first page of subscriptions, those matching ``Region<r>/Site<s>/#``,
  the topic tree's top level (a million subscriptions below it) and its level below
  ``Region<r>`` (50,000 below it, 500 names).

The figures are printed beside the anchor's p50 as a ratio: what a page costs over a bare request.
"""

from __future__ import annotations

import argparse
import logging
import random
from dataclasses import asdict, dataclass
from typing import Any

import httpx
from sqlalchemy import insert, select, text

from broker.admin import accounts
from broker.bench import api as api_bench
from broker.bench.api import Case, Latency, latencies, serving
from broker.bench.options import DATABASES, emit, positive
from broker.bench.scratch import DEFAULT_PG_URL, scratch_database
from broker.service.provision import ensure_system_queues, prepare_database
from broker.store import schema
from queues import Message, QueueManager, make_engine
from queues.schema import queues

DEFAULT_QUEUES = 100_000
DEFAULT_REQUESTS = 100
DEFAULT_SUBSCRIPTIONS = 1_000_000
CHUNK = 10_000
EVERY = 100  # every EVERY-th queue holds messages
MESSAGES = 3
QMGR = "QM1"
ANCHOR = "anchor: /health (the HTTP round trip)"


@dataclass(frozen=True, slots=True)
class Report:
    database: str
    queues: int
    subscriptions: int
    latencies: list[Latency]

    @property
    def anchor_ms(self) -> float:
        return self.latencies[0].p50_ms

    def as_dict(self) -> dict[str, Any]:
        return {
            "database": self.database,
            "queues": self.queues,
            "subscriptions": self.subscriptions,
            "latencies": [
                {**asdict(latency), "ratio": latency.p50_ms / self.anchor_ms} for latency in self.latencies
            ],
        }


def queue_name(i: int) -> str:
    return f"BENCH.Q{i:06d}"


def fill(qm: QueueManager, count: int) -> str:
    """``count`` queues, copies of one defined the usual way, and a few messages on some;
    returns an admin token's secret for the console."""
    ensure_system_queues(qm)
    qm.define_queue(queue_name(0))
    with qm.unit_of_work() as uow:
        template = dict(
            uow.connection.execute(select(queues).where(queues.c.name == queue_name(0))).one()._mapping
        )
        for start in range(1, count, CHUNK):
            rows = [{**template, "name": queue_name(i)} for i in range(start, min(count, start + CHUNK))]
            uow.connection.execute(insert(queues), rows)
        secret = accounts.create_token(uow.connection, "admin", "bench").secret
    for i in range(0, count, EVERY):
        for n in range(MESSAGES):
            qm.put(queue_name(i), Message(body=f"message {n}".encode()))
    return secret


def _cases(count: int, subscriptions: int, rng: random.Random) -> list[Case]:
    def page(path: str, **query: Any) -> Any:
        return lambda: (path, {name: value() if callable(value) else value for name, value in query.items()})

    def region() -> str:
        return f"Region{rng.randrange(api_bench.REGIONS)}"

    def site() -> str:
        return f"{region()}/Site{rng.randrange(api_bench.SITES)}/#"

    def deep() -> str:
        return queue_name(rng.randrange(count // 2, count))

    def deep_offset() -> int:
        return rng.randrange(count // 2, count)

    def pattern() -> str:
        return f"BENCH.Q0{rng.randrange(10)}*"

    cases = [
        (ANCHOR, page("/health")),
        ("API queues, first page", page("/api/v1/queues", limit=50)),
        ("API queues, deep page", page("/api/v1/queues", limit=50, offset=deep_offset)),
        ("console queues, first page", page("/console/queues")),
        ("console queues, deep page", page("/console/queues", after=deep)),
        ("console queues by pattern", page("/console/queues", pattern=pattern)),
        ("console queues sorted by depth", page("/console/queues", sort="-depth")),
        ("console overview, live part", page("/console/overview/live")),
        ("console one queue, browsed", page(f"/console/queues/{queue_name(0)}")),
    ]
    if subscriptions:
        cases += [
            ("console subscriptions, first page", page("/console/subscriptions")),
            ("console subscriptions by topic", page("/console/subscriptions", topic=site)),
            ("console topic tree, the top level", page("/console/topics")),
            ("console topic tree, a region", page("/console/topics/children", under=region)),
        ]
    return cases


def run(
    *,
    database: str = "postgresql",
    count: int = DEFAULT_QUEUES,
    subscriptions: int = 0,
    requests: int = DEFAULT_REQUESTS,
    pg_url: str = DEFAULT_PG_URL,
) -> Report:
    """``subscriptions`` are COPYed in as ``broker bench api`` does: PostgreSQL only."""
    if subscriptions and database != "postgresql":
        raise ValueError("--subscriptions needs --database postgresql (they are written with COPY)")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    with scratch_database(database, pg_url, label="console") as url:
        engine = make_engine(url)
        try:
            prepare_database(engine, QMGR)
            with QueueManager(engine, appl_name="bench") as qm:
                secret = fill(qm, count)
            if subscriptions:
                api_bench.insert_subscriptions(engine, subscriptions)
                with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                    conn.execute(text(f"VACUUM {schema.subscriptions.name}"))
        finally:
            engine.dispose()
        with serving(url, secret, "api") as (base, _):
            headers = {"Authorization": f"Bearer {secret}"}
            with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
                signed_in = client.post("/console/signin", data={"token": secret})
                if signed_in.status_code != 303:
                    raise RuntimeError(f"the console refused the token: {signed_in.status_code}")
                measured = latencies(client, _cases(count, subscriptions, random.Random(5)), requests)
    return Report(database, count, subscriptions, measured)


def table(report: Report) -> str:
    anchor = report.anchor_ms
    lines = [
        f"{report.queues:,} queues and {report.subscriptions:,} subscriptions in {report.database}",
        f"{'case':<38} {'requests':>8} {'p50 ms':>8} {'p99 ms':>8} {'p50 / anchor':>13}",
    ]
    lines += [
        f"{r.case:<38} {r.requests:>8} {r.p50_ms:>8.2f} {r.p99_ms:>8.2f} {r.p50_ms / anchor:>12.3f}x"
        for r in report.latencies
    ]
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--queues", type=positive, default=DEFAULT_QUEUES)
    parser.add_argument(
        "--subscriptions",
        type=int,
        default=None,
        help=f"default {DEFAULT_SUBSCRIPTIONS:,} on PostgreSQL, none on SQLite",
    )
    parser.add_argument("--requests", type=positive, default=DEFAULT_REQUESTS, help="per case")
    parser.add_argument("--database", choices=DATABASES, default="postgresql")
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL, metavar="URL")
    parser.add_argument("--json", action="store_true", help="print JSON")


def command(args: argparse.Namespace) -> None:
    subscriptions = args.subscriptions
    if subscriptions is None:
        subscriptions = DEFAULT_SUBSCRIPTIONS if args.database == "postgresql" else 0
    report = run(
        database=args.database,
        count=args.queues,
        subscriptions=subscriptions,
        requests=args.requests,
        pg_url=args.pg_url,
    )
    emit(args, report.as_dict(), table(report))
