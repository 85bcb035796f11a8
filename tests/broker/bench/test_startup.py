"""Smoke test of the start-up benchmark and of how ``broker bench`` hands a benchmark its options.

Timings are not asserted; ``broker bench startup`` prints the figures.
"""

from __future__ import annotations

import json
import subprocess
import sys

from broker.bench import BENCHMARKS
from broker.bench.startup import HELP_TARGET, LIST_TARGET
from tests.conftest import PG_ADMIN_URL

BROKER = [sys.executable, "-m", "broker.cli"]


def test_every_command_and_both_databases_are_timed_against_the_interpreter():
    out = subprocess.run(
        [*BROKER, "bench", "startup", "--runs", "2", "--pg-url", PG_ADMIN_URL, "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    results = json.loads(out.stdout)
    assert results["anchor"]["name"] == "python -c pass"
    names = [t["name"] for t in results["timings"]]
    assert names[0] == "broker --help"
    assert {"broker queue --help", "broker serve --help", "broker bench --help"} <= set(names)
    assert names[-2:] == ["broker queue list (sqlite)", "broker queue list (postgresql)"]
    for timing in results["timings"]:
        assert len(timing["seconds"]) == 2
        assert timing["vs_interpreter"] == timing["median"] / results["anchor"]["median"]
    targets = {t["name"]: t["target"] for t in results["timings"]}
    assert (targets["broker --help"], targets["broker queue list (sqlite)"]) == (HELP_TARGET, LIST_TARGET)


def test_a_benchmarks_own_help_is_reached_through_broker_bench():
    for name in BENCHMARKS:
        page = subprocess.run([*BROKER, "bench", name, "--help"], capture_output=True, text=True, timeout=60)
        assert page.returncode == 0, page.stderr
        assert page.stdout.startswith(f"usage: broker bench {name}")


def test_an_unknown_option_is_the_benchmarks_usage_error():
    page = subprocess.run([*BROKER, "bench", "startup", "--nope"], capture_output=True, text=True, timeout=60)
    assert page.returncode == 2
    assert "usage: broker bench startup" in page.stderr
    assert "unrecognized arguments: --nope" in page.stderr
