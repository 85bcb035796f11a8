"""Benchmarks: the figures a release is judged by, each against an anchor measured in the
same run, printed as ratios. None of them is a test.

Each module ``broker.bench.<name>`` defines ``add_arguments(parser)`` and
``command(args)``; ``broker bench <name>`` (or ``python -m broker.bench <name>``)
imports only the one it runs, so ``broker --help`` loads none of them.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

BENCHMARKS = {
    "queues": "put-many and batch get against the raw database ceiling, on SQLite and PostgreSQL",
    "matching": "topic matching rate and memory at 1,000 and 1,000,000 subscriptions",
    "route": "routing throughput and latency on SQLite and PostgreSQL against RabbitMQ",
    "api": "admin API list/show latency over 1,000,000 subscriptions, and creates per second",
    "network": "publications/s from QMB to subscribers at QMC through QMA, against one broker",
    "spark": "broker spark route on local[1] and local[2] against broker serve, same backlog",
    "console": "web console page latency over 100,000 queues, against the API's queue listing",
    "startup": "how long the broker command takes to start, against the bare interpreter",
    "mqtt": "MQTT publications, deliveries, latency and idle memory of broker serve --mqtt against Mosquitto",
}


def main(name: str, argv: Sequence[str] | None = None, prog: str | None = None) -> None:
    """Parse ``argv`` with the benchmark's own options and run it."""
    module = importlib.import_module(f"broker.bench.{name}")
    parser = argparse.ArgumentParser(
        prog=prog or f"broker bench {name}",
        description=module.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    module.add_arguments(parser)
    args = parser.parse_args(argv)
    from broker.bench.options import capture_logs

    path = capture_logs()
    try:
        module.command(args)
    finally:
        for handler in logging.getLogger().handlers:
            handler.flush()
        if path.exists() and path.stat().st_size:
            print(f"broker log lines of this run: {path}", file=sys.stderr)
        else:
            path.unlink(missing_ok=True)
