"""Start-up benchmark: how long the ``broker`` command takes, as a whole process.

An operator types ``broker --help`` or ``broker queue list`` and waits for the whole
process: interpreter start, imports, the work, exit. Each command runs ``--runs`` times
(default 15) after one warm-up run; the table gives the minimum, median and maximum
wall-clock time and the median against the anchor measured in the same run: the bare
interpreter (``python -c pass``), the floor no Python command can go below.

Commands: ``broker --help``, ``broker COMMAND --help`` for every command (the slowest and
the median of them are reported), and ``broker queue list`` on a SQLite database that
``broker db upgrade`` prepared in a temporary directory, and on a throw-away PostgreSQL
database on the server of ``--pg-url``. Targets: help under 0.15 s, ``queue list`` on
SQLite under 0.5 s.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from broker.bench.options import DATABASES, database_list, emit, positive
from broker.bench.scratch import DEFAULT_PG_URL, scratch_database

HELP_TARGET = 0.15
LIST_TARGET = 0.5


@dataclass(frozen=True)
class Timing:
    name: str
    seconds: tuple[float, ...]
    target: float | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    def as_dict(self, anchor: float) -> dict[str, Any]:
        return asdict(self) | {"median": self.median, "vs_interpreter": self.median / anchor}


def broker_command() -> list[str]:
    """The console script installed beside this interpreter, as a user runs it."""
    script = Path(sys.executable).with_name("broker")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "broker.cli"]


def commands(broker: Sequence[str], env: dict[str, str]) -> list[str]:
    """The commands ``broker --help`` lists, whatever they are today: the lines of its
    COMMAND list that name one (four spaces, the name, then its help)."""
    page = subprocess.run([*broker, "--help"], env=env, capture_output=True, text=True, check=True).stdout
    return sorted(m.group(1) for m in re.finditer(r"^    ([a-z][a-z-]*)\b", page, re.M))


def time_process(argv: Sequence[str], runs: int, env: dict[str, str]) -> tuple[float, ...]:
    subprocess.run(argv, env=env, capture_output=True, check=True)  # warm-up: the page cache
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, env=env, capture_output=True, check=True)
        seconds.append(time.perf_counter() - started)
    return tuple(seconds)


def run(runs: int = 15, databases: Sequence[str] = DATABASES, pg_url: str = DEFAULT_PG_URL) -> dict[str, Any]:
    broker = broker_command()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    anchor = Timing("python -c pass", time_process([sys.executable, "-c", "pass"], runs, env))
    helps = [Timing("broker --help", time_process([*broker, "--help"], runs, env), HELP_TARGET)]
    per_command = [
        Timing(f"broker {name} --help", time_process([*broker, name, "--help"], runs, env), HELP_TARGET)
        for name in commands(broker, env)
    ]
    lists = []
    for kind in databases:
        with scratch_database(kind, pg_url, label="startup") as url:
            subprocess.run([*broker, "--db", url, "db", "upgrade"], env=env, capture_output=True, check=True)
            argv = [*broker, "--db", url, "queue", "list"]
            target = LIST_TARGET if kind == "sqlite" else None
            lists.append(Timing(f"broker queue list ({kind})", time_process(argv, runs, env), target))
    return {
        "runs": runs,
        "anchor": anchor.as_dict(anchor.median),
        "timings": [t.as_dict(anchor.median) for t in (*helps, *per_command, *lists)],
    }


def report(results: dict[str, Any]) -> str:
    anchor = results["anchor"]
    rows = [anchor, *results["timings"]]
    width = max(len(r["name"]) for r in rows)
    lines = [
        f"{'command':<{width}}  {'min s':>6}  {'median':>6}  {'max':>6}  {'vs python':>9}  target",
    ]
    for r in rows:
        seconds = r["seconds"]
        met = "" if r["target"] is None else ("met" if r["median"] < r["target"] else "MISSED")
        target = "" if r["target"] is None else f"< {r['target']} s {met}"
        lines.append(
            f"{r['name']:<{width}}  {min(seconds):>6.3f}  {r['median']:>6.3f}  {max(seconds):>6.3f}  "
            f"{r['vs_interpreter']:>8.2f}x  {target}"
        )
    helps = [r for r in results["timings"] if r["name"].endswith("--help")]
    slowest = max(helps, key=lambda r: r["median"])
    lines.append(
        f"{len(helps)} help pages: median of medians {statistics.median(r['median'] for r in helps):.3f} s, "
        f"slowest {slowest['name']} {slowest['median']:.3f} s; {results['runs']} runs each"
    )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=positive, default=15, help="timed runs per command (default 15)")
    parser.add_argument("--databases", type=database_list, default=DATABASES, metavar="KIND,...")
    parser.add_argument(
        "--pg-url", default=DEFAULT_PG_URL, metavar="URL", help="server for a throw-away database"
    )
    parser.add_argument("--json", action="store_true", help="print JSON")


def command(args: argparse.Namespace) -> None:
    results = run(args.runs, args.databases, args.pg_url)
    emit(args, results, report(results))
