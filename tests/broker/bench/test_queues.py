"""Smoke test of the queue benchmark: it runs on both databases and its counts add up.

Timings are not asserted (they depend on the machine); run ``broker bench queues``
for the release figures.
"""

from __future__ import annotations

import json
import os

import psycopg
import pytest

from broker.bench import queues as queue_bench
from broker.cli import main
from tests.conftest import PG_ADMIN_URL

MESSAGES = 24
BATCHES = (1, 10)


def this_process_bench_database_exists() -> bool:
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        query = "SELECT count(*) FROM pg_database WHERE datname = %s"
        return conn.execute(query, (f"broker_bench_{os.getpid()}",)).fetchone() == (1,)


@pytest.fixture(scope="module")
def cells() -> list[queue_bench.Cell]:
    return queue_bench.run(BATCHES, messages=MESSAGES, pg_url=PG_ADMIN_URL)


def test_every_database_and_batch_is_measured(cells):
    assert [(c.database, c.batch) for c in cells] == [
        ("sqlite", 1),
        ("sqlite", 10),
        ("postgresql", 1),
        ("postgresql", 10),
    ]


def test_every_contender_moved_every_message(cells):
    for cell in cells:
        assert (cell.messages, cell.ceiling_rows, cell.put_rows, cell.got_rows) == (MESSAGES,) * 4


def test_rates_and_ratios_follow_from_the_counts(cells):
    for cell in cells:
        assert min(cell.ceiling_seconds, cell.put_seconds, cell.get_seconds) > 0
        assert cell.put_rate == pytest.approx(MESSAGES / cell.put_seconds)
        assert cell.get_ratio == pytest.approx(cell.get_rate / cell.ceiling_rate)
        as_dict = cell.as_dict()
        assert as_dict["put_ratio"] == pytest.approx(cell.put_ratio)
        assert as_dict["got_rows"] == MESSAGES


def test_the_throw_away_database_is_dropped(cells):
    assert cells
    assert not this_process_bench_database_exists()


def test_table_has_a_row_per_cell(cells):
    lines = queue_bench.table(cells).splitlines()
    assert lines[0].split() == [
        "database", "batch", "messages", "ceiling", "rows/s", "put-many", "rows/s", "ratio",
        "batch-get", "rows/s", "ratio",
    ]  # fmt: skip
    assert [line.split()[:3] for line in lines[1:]] == [
        [c.database, str(c.batch), str(MESSAGES)] for c in cells
    ]


def test_default_message_counts():
    assert [queue_bench.default_messages(b) for b in queue_bench.DEFAULT_BATCHES] == [2_000, 50_000, 50_000]


def test_broker_bench_queues_json(capsys, restored_logging):
    code = main(["bench", "queues", "--messages", "5", "--batches", "2", "--pg-url", PG_ADMIN_URL, "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert [(c["database"], c["batch"], c["got_rows"], c["ceiling_rows"]) for c in report] == [
        ("sqlite", 2, 5, 5),
        ("postgresql", 2, 5, 5),
    ]


@pytest.mark.parametrize(
    "argv", [["--batches", "1,x"], ["--batches", "0"], ["--batches", ""], ["--messages", "0"], []]
)
def test_bad_arguments_are_usage_errors(argv, capsys, restored_logging):
    with pytest.raises(SystemExit) as caught:
        main(["bench", *argv] if not argv else ["bench", "queues", *argv])
    assert caught.value.code == 2
    assert "usage: broker bench" in capsys.readouterr().err
