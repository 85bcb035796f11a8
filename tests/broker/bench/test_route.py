"""Smoke test of the routing benchmark: both sides of the comparison really deliver.

Timings are not asserted (they depend on the machine); ``broker bench route`` gives
the release figures. What is asserted is that each side did the work it is timed
for: a benchmark whose anchor silently routed nothing would flatter the broker.
"""

from __future__ import annotations

from dataclasses import asdict

import pytest

from broker.bench import route
from tests.conftest import PG_ADMIN_URL

DATABASES = ("sqlite", "postgresql")


def test_the_rabbitmq_anchor_delivers_every_copy() -> None:
    anchor = route.rabbit_backlog(40, window=8)
    assert (anchor.publications, anchor.deliveries) == (40, 40 * len(route.SUBSCRIBERS))


@pytest.mark.parametrize("kind", DATABASES)
def test_the_broker_backlog_delivers_every_copy(kind: str) -> None:
    mine = route.broker_backlog(kind, 40, PG_ADMIN_URL, batch_size=16)
    assert (mine.publications, mine.deliveries) == (40, 40 * len(route.SUBSCRIBERS))


@pytest.mark.parametrize("kind", DATABASES)
def test_scaled_out_routers_share_the_backlog_without_double_delivery(kind: str) -> None:
    shared = route.broker_backlog(kind, 400, PG_ADMIN_URL, batch_size=8, routers=2)
    assert shared.system == f"broker/{kind} x2"
    assert (shared.publications, shared.deliveries) == (400, 400 * len(route.SUBSCRIBERS))


def test_scale_out_is_measured_on_each_database_after_one_router() -> None:
    assert route._backlog_runs(DATABASES, 2) == [
        ("sqlite", 1),
        ("postgresql", 1),
        ("sqlite", 2),
        ("postgresql", 2),
    ]
    assert route._backlog_runs(("sqlite",), 3) == [("sqlite", 1), ("sqlite", 3)]
    assert route._backlog_runs(DATABASES, 1) == [("sqlite", 1), ("postgresql", 1)]


@pytest.mark.parametrize("kind", DATABASES)
def test_streaming_measures_every_delivery_of_a_separate_broker(kind: str) -> None:
    latency = route.streaming(kind, rate=50, seconds=1.0, pg_url=PG_ADMIN_URL, batch_size=16)
    assert latency.publications == 50
    assert 0 <= latency.p50_ms <= latency.p99_ms <= latency.max_ms


def test_memory_is_sampled_from_a_broker_that_routes_the_whole_backlog() -> None:
    drained = route.memory("sqlite", 300, PG_ADMIN_URL, batch_size=10)
    assert drained.backlog == 300
    assert drained.rss_mb and min(drained.rss_mb) > 10  # a loaded interpreter, not a fresh exec
    assert "growth from a quarter to the end" in route.report(
        {"messages": 0, "throughput": [], "latency": [], "memory": [asdict(drained)]}
    )


def test_the_report_prints_the_ratio_to_the_anchor() -> None:
    results = {
        "messages": 10,
        "throughput": [
            {"system": "rabbitmq", "publications": 10, "deliveries": 100, "seconds": 1.0},
            {
                "system": "broker/sqlite",
                "publications": 10,
                "deliveries": 100,
                "seconds": 0.25,
                "ratio_to_rabbitmq": 4.0,
            },
        ],
        "latency": [],
    }
    text = route.report(results)
    assert "anchor" in text and "4.00x" in text
