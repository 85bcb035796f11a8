"""Smoke test of the web console benchmark at a small scale, on SQLite: every case is measured
against the anchor and the queues it makes are whole queue definitions.

Timings are not asserted (they depend on the machine); run ``broker bench console`` for the figures.
"""

from __future__ import annotations

import json

import pytest

from broker.bench import console as console_bench
from broker.cli import main
from queues import QueueManager
from tests.conftest import PG_ADMIN_URL

COUNT = 300
REQUESTS = 3


def test_a_small_run_measures_every_case_against_the_anchor(
    capsys: pytest.CaptureFixture[str], restored_logging: None
) -> None:
    sizes = ["--queues", str(COUNT), "--requests", str(REQUESTS), "--database", "sqlite", "--json"]
    assert main(["bench", "console", *sizes]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["database"], report["queues"], report["subscriptions"]) == ("sqlite", COUNT, 0)
    assert [row["case"] for row in report["latencies"]] == [
        console_bench.ANCHOR,
        "API queues, first page",
        "API queues, deep page",
        "console queues, first page",
        "console queues, deep page",
        "console queues by pattern",
        "console queues sorted by depth",
        "console overview, live part",
        "console one queue, browsed",
    ]
    assert report["latencies"][0]["ratio"] == 1.0
    assert all(0 < row["p50_ms"] <= row["p99_ms"] for row in report["latencies"])


def test_subscriptions_add_their_cases_on_postgresql(restored_logging: None) -> None:
    sizes = {"count": COUNT, "subscriptions": 500, "requests": REQUESTS}
    report = console_bench.run(database="postgresql", pg_url=PG_ADMIN_URL, **sizes)
    assert [latency.case for latency in report.latencies][-4:] == [
        "console subscriptions, first page",
        "console subscriptions by topic",
        "console topic tree, the top level",
        "console topic tree, a region",
    ]
    with pytest.raises(ValueError, match="needs --database postgresql"):
        console_bench.run(database="sqlite", subscriptions=1)


def test_the_filled_queues_are_copies_of_a_defined_one_some_with_messages(qm: QueueManager) -> None:
    secret = console_bench.fill(qm, 250)
    assert secret.startswith("mqa_")
    names = [head.definition.name for head in qm.queue_page("BENCH.*", limit=1000)]
    assert names == [console_bench.queue_name(i) for i in range(250)]
    assert [qm.depth(console_bench.queue_name(i)) for i in (0, 1, 100, 200)] == [3, 0, 3, 3]
    assert (
        qm.inquire_queue(console_bench.queue_name(7)).max_depth == qm.inquire_queue("BENCH.Q000000").max_depth
    )
