"""Spark pipeline benchmark: ``broker spark route`` against the routing service, same backlog.

Backlog: ``broker.bench.route``'s (N publications of 256 bytes on the default stream,
ten subscribers whose wildcard subscriptions all match, so ten deliveries each), loaded
into a fresh database for every run. Timed: the routing service draining it in
batches (as ``broker bench``'s routing benchmark times it), then the Spark job on each
master (``local[1]``, ``local[2]``), from taking the lease to the end of the clean-up,
Python worker start included; the Spark session's start is not.

Figures: messages/s, the speed-up from the first master to the last, and each run's
throughput per core against the service's (which uses one core for Python and leaves
the other to the database). The job's phases show where the time goes: each task reads
and routes its partition in parallel with the others, then waits for the partition before
it and commits its own (the commits follow each other in partition order).
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from broker.bench.options import DATABASES, database_list, emit, positive
from broker.bench.route import broker_backlog, broker_database, delivered, preload
from broker.bench.scratch import DEFAULT_PG_URL
from broker.service.config import Settings
from broker.spark import job

MASTERS = ("local[1]", "local[2]")


@dataclass(frozen=True, slots=True)
class Run:
    system: str  # "broker serve" or the Spark master
    database: str
    publications: int
    deliveries: int
    seconds: float
    cores: int
    phases: dict[str, float]  # Spark runs: plan, read+route+commit, finish, and the tasks' sums

    @property
    def per_second(self) -> float:
        return self.publications / self.seconds

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "per_second": self.per_second}


def cores_of(master: str) -> int:
    found = re.fullmatch(r"local\[(\d+)\]", master)
    if found is None:
        raise ValueError(f"{master!r}: the benchmark runs on local[N] masters")
    return int(found.group(1))


def service_run(kind: str, count: int, pg_url: str, batch_size: int) -> Run:
    measured = broker_backlog(kind, count, pg_url, batch_size)
    return Run("broker serve", kind, count, measured.deliveries, measured.seconds, 1, {})


def spark_run(
    kind: str, count: int, pg_url: str, master: str, batch_size: int, partitions: int | None
) -> Run:
    spark = job.spark_session(master, app_name="broker bench spark")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        with broker_database(kind, pg_url) as (url, qm):
            preload(qm, count)
            started = time.perf_counter()
            summary = job.run(
                spark,
                qm,
                Settings(database_url=url, batch_size=batch_size),
                job.JobOptions(partitions=partitions),
            )
            seconds = time.perf_counter() - started
            phases = {
                "plan": summary.plan_seconds,
                "read+route+commit": summary.stage_seconds,
                "finish": summary.finish_seconds,
                "task route (sum)": summary.task_route_seconds,
                "task wait (sum)": summary.task_wait_seconds,
                "task write (sum)": summary.task_write_seconds,
            }
            return Run(f"spark {master}", kind, count, delivered(qm), seconds, cores_of(master), phases)
    finally:
        spark.stop()


def run(
    messages: int = 100_000,
    databases: Sequence[str] = DATABASES,
    masters: Sequence[str] = MASTERS,
    *,
    pg_url: str = DEFAULT_PG_URL,
    batch_size: int = 500,
    partitions: int | None = None,
) -> list[dict[str, Any]]:
    """One table per database: the service, then the job on each master."""
    tables = []
    for kind in databases:
        service = service_run(kind, messages, pg_url, batch_size)
        runs = [spark_run(kind, messages, pg_url, master, batch_size, partitions) for master in masters]
        first, last = runs[0], runs[-1]
        tables.append(
            {
                "database": kind,
                "publications": messages,
                "runs": [r.as_dict() for r in (service, *runs)],
                "speed_up": last.per_second / first.per_second,
                "per_core_vs_service": {r.system: r.per_second / r.cores / service.per_second for r in runs},
            }
        )
    return tables


def report(tables: list[dict[str, Any]]) -> str:
    lines: list[str] = []
    for table in tables:
        lines += [
            f"{table['database']}: backlog of {table['publications']:,} publications, "
            "10 wildcard subscribers (10 deliveries each)",
            f"{'system':<16} {'msgs/s':>9} {'deliv/s':>10} {'seconds':>8}  phases (s)",
        ]
        for row in table["runs"]:
            phases = ", ".join(f"{name} {value:.1f}" for name, value in row["phases"].items())
            deliveries = row["deliveries"] / row["seconds"]
            lines.append(
                f"{row['system']:<16} {row['per_second']:>9,.0f} {deliveries:>10,.0f} "
                f"{row['seconds']:>8.1f}  {phases}"
            )
        per_core = ", ".join(f"{name} {ratio:.2f}x" for name, ratio in table["per_core_vs_service"].items())
        lines += [
            f"speed-up {table['runs'][1]['system']} -> {table['runs'][-1]['system']}: "
            f"{table['speed_up']:.2f}x",
            f"throughput per core against the service: {per_core}",
            "",
        ]
    return "\n".join(lines).rstrip()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=positive, default=100_000, help="publications (default 100,000)")
    parser.add_argument("--databases", type=database_list, default=DATABASES, help="sqlite,postgresql")
    parser.add_argument("--masters", default=",".join(MASTERS), help="local[1],local[2]")
    parser.add_argument("--batch-size", type=positive, default=500, help="the service's batch size")
    parser.add_argument("--partitions", type=positive, help="the job's partitions (default per 10,000)")
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL, metavar="URL")
    parser.add_argument("--json", action="store_true", help="print JSON")


def command(args: argparse.Namespace) -> None:
    tables = run(
        args.messages,
        args.databases,
        tuple(args.masters.split(",")),
        pg_url=args.pg_url,
        batch_size=args.batch_size,
        partitions=args.partitions,
    )
    emit(args, tables, report(tables))
