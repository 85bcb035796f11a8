"""Smoke test of the admin API benchmark at a small scale: every case is measured, the counts add up,
the rows it inserts are the store's own, and the throw-away database is dropped.

Timings are not asserted (they depend on the machine); run ``broker bench api`` for the figures.
"""

from __future__ import annotations

import json
import os

import psycopg
import pytest

import migrations
from broker import store
from broker.bench import api as api_bench
from broker.cli import main
from queues import make_engine
from tests.conftest import PG_ADMIN_URL, PostgresDatabases

COUNT = 2_000
REQUESTS = 5


def bench_database_exists() -> bool:
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        query = "SELECT count(*) FROM pg_database WHERE datname = %s"
        return conn.execute(query, (f"broker_api_{os.getpid()}",)).fetchone() == (1,)


def test_a_small_run_measures_every_case_and_cleans_up(
    capsys: pytest.CaptureFixture[str], restored_logging: None
) -> None:
    sizes = ["--subscriptions", str(COUNT), "--requests", str(REQUESTS), "--seconds", "1"]
    code = main(["bench", "api", *sizes, "--pg-url", PG_ADMIN_URL, "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["subscriptions"] == COUNT
    assert [(row["case"], row["requests"]) for row in report["latencies"]] == [
        ("first page", REQUESTS),
        ("deep page (keyset)", REQUESTS),
        ("by queue", REQUESTS),
        ("by topic Region<r>/#", REQUESTS),
        ("by topic Region<r>/Site<s>/#", REQUESTS),
        ("show one", REQUESTS),
    ]
    assert all(0 < row["p50_ms"] <= row["p99_ms"] for row in report["latencies"])
    creates = report["creates"]
    assert (creates["clients"], creates["requests"] > 0) == (4, True)
    assert creates["per_second"] == pytest.approx(creates["requests"] / creates["seconds"])
    assert not bench_database_exists()


def test_inserted_rows_are_the_stores_own(postgres: PostgresDatabases) -> None:
    url = postgres.create()
    engine = make_engine(url)
    try:
        migrations.upgrade(engine)
        assert api_bench.insert_subscriptions(engine, 50) > 0
        with engine.connect() as conn:
            (found,) = store.list_subscriptions(conn, store.SubscriptionFilter(queue=api_bench.queue_name(7)))
    finally:
        engine.dispose()
        postgres.drop(url)
    sub_id, sub = found
    assert sub == api_bench._subscription(7, sub.created_at)
    assert (sub_id, sub.key.topic, sub.user_id) == (8, "Region7/Site0/Device7/temperature", "user7")
