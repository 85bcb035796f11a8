"""``broker spark route`` routes a backlog exactly as ``broker serve`` does, on SQLite and PostgreSQL.

The same generated backlog goes into two fresh databases; the routing service drains one, the
Spark job on ``local[2]`` the other. Every queue must then hold the same messages in the same
order, byte for byte and field by field, except the routers' clock readings (see
``tests.broker.spark.scenario.contents``); the retained store and the subscriptions must match too.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import func, select

from broker.core.system import DEFAULT_STREAM
from broker.spark import job
from broker.store import leases
from broker.store.schema import SPARK_RUN_TABLES as RUN_TABLES
from broker.store.schema import leases as lease_rows
from queues import DEAD_LETTER_QUEUE, dlh
from queues.ids import now_ms
from queues.reasons import Reason
from tests.broker.spark import scenario
from tests.broker.spark.scenario import NEIGHBOUR, SMALL_DEPTH, backlog, contents, load

OPTIONS = job.JobOptions(partitions=4, progress_seconds=0.5)


def reasons_of(queues: dict[str, Any]) -> list[int]:
    return [dlh.decode(m.body, m.encoding)[0].reason for m in queues[DEAD_LETTER_QUEUE][1]]


def run_rows(broker: scenario.Broker) -> int:
    with broker.engine.connect() as conn:
        return sum(conn.execute(select(func.count()).select_from(t)).scalar_one() for t in RUN_TABLES)


def test_the_job_leaves_every_queue_as_the_service_does(spark, brokers):
    served, sparked = brokers(), brokers()
    messages = backlog()
    for broker in (served, sparked):
        load(broker, messages)
    before = {name: depth for name, (depth, _) in contents(sparked)["queues"].items()}

    served.route_with_service()
    summary = job.run(spark, sparked.qm, sparked.settings, OPTIONS)

    expected = contents(served)
    assert contents(sparked) == expected
    queues = expected["queues"]
    assert queues[DEFAULT_STREAM] == (0, [])
    # The scenario reaches every path it is meant to: deliveries on every subscriber queue,
    # an overflowing queue, replies, dead letters of each kind, retained publications.
    assert all(depth > 0 for name, (depth, _) in queues.items() if name.startswith("SUB."))
    assert queues["SUB.SMALL"][0] == SMALL_DEPTH
    assert queues[NEIGHBOUR][0] > 0 and summary.forwards > 0
    assert set(reasons_of(queues)) == {
        Reason.MQRC_Q_FULL,
        Reason.MQRC_UNKNOWN_OBJECT_NAME,
        Reason.MQRC_UNKNOWN_REMOTE_Q_MGR,
        Reason.MQRC_RFH_ERROR,
        Reason.MQRC_MSG_TYPE_ERROR,
    }
    # Wildcard DeletePubs removed every Sport/Soccer/State/... and all but one News/World/...
    assert [topic for _, topic, _ in expected["retained"]] == ["News/Local/Weather", "News/World/2"]
    assert summary.messages == len(messages) - 1  # one expired before routing
    assert summary.rows == len(messages)
    assert summary.dead_letters == queues[DEAD_LETTER_QUEUE][0]
    assert summary.queue_full == sum(1 for reason in reasons_of(queues) if reason == Reason.MQRC_Q_FULL)
    assert summary.written == sum(
        depth - before[name] for name, (depth, _) in queues.items() if name != DEFAULT_STREAM
    )
    assert run_rows(sparked) == 0
    with sparked.engine.connect() as conn:
        assert conn.execute(select(lease_rows.c.owner)).scalars().all() == [""]


def test_the_dead_letter_order_follows_the_service_batch_size(spark, brokers):
    """In each service batch the engine's dead letters come first, then the failed puts: the
    job reproduces that for the batch size it is given, and only for that one."""
    served, matched, mismatched = brokers(), brokers(), brokers()
    messages = backlog(60)
    for broker in (served, matched, mismatched):
        load(broker, messages)

    served.route_with_service()
    job.run(spark, matched.qm, matched.settings, OPTIONS)
    job.run(spark, mismatched.qm, replace(mismatched.settings, batch_size=1000), OPTIONS)

    expected = contents(served)["queues"]
    assert contents(matched)["queues"] == expected
    other = contents(mismatched)["queues"]
    assert other[DEAD_LETTER_QUEUE] != expected[DEAD_LETTER_QUEUE]
    assert sorted(other[DEAD_LETTER_QUEUE][1], key=repr) == sorted(expected[DEAD_LETTER_QUEUE][1], key=repr)
    del other[DEAD_LETTER_QUEUE], expected[DEAD_LETTER_QUEUE]
    assert other == expected


def test_an_empty_backlog_only_takes_and_frees_the_lease(spark, brokers):
    broker = brokers()

    summary = job.run(spark, broker.qm, broker.settings, OPTIONS)

    assert (summary.partitions, summary.messages, summary.written, summary.rows) == (0, 0, 0, 0)
    with broker.engine.connect() as conn:
        assert conn.execute(select(lease_rows.c.owner)).scalars().all() == [""]


def test_a_stream_leased_by_another_job_is_refused(spark, brokers):
    broker = brokers()
    load(broker, backlog(12))
    with broker.engine.begin() as conn:
        leases.take(conn, leases.stream_resource(DEFAULT_STREAM), "spark:other", now_ms(), 60_000)

    with pytest.raises(leases.LeaseError) as refused:
        job.run(spark, broker.qm, broker.settings, OPTIONS)

    assert refused.value.reason == Reason.MQRC_OBJECT_IN_USE
    assert broker.qm.depth(DEFAULT_STREAM) == 13


def test_a_queue_that_is_not_a_stream_is_refused(spark, brokers):
    broker = brokers()
    with pytest.raises(job.JobError) as refused:
        job.run(spark, broker.qm, broker.settings, job.JobOptions(stream="SUB.A"))
    assert "SUB.A is not a stream queue" in refused.value.detail


@pytest.mark.parametrize(
    ("url", "jdbc", "options"),
    [
        (
            "postgresql://app:s3cret@db:5433/broker",
            "jdbc:postgresql://db:5433/broker",
            {"user": "app", "password": "s3cret"},
        ),
        (
            "postgresql://app@/broker?host=db1:5432&host=db2:5433&connect_timeout=2",
            "jdbc:postgresql://db1:5432,db2:5433/broker",
            {"user": "app", "connectTimeout": "2"},
        ),
        ("postgresql:///broker?host=db1,db2", "jdbc:postgresql://db1:5432,db2:5432/broker", {}),
    ],
    ids=["one host", "primary and standby", "default port"],
)
def test_the_backlog_is_read_from_the_primary_of_the_hosts_the_url_names(
    url: str, jdbc: str, options: dict[str, str]
) -> None:
    """The reading side goes through JDBC: every host of the URL, and of them the one that
    accepts writes, as the broker's own connections do (``docs/operations.md``)."""
    assert job.jdbc_source(url) == (
        jdbc,
        {"driver": "org.postgresql.Driver", **options, "targetServerType": "primary"},
    )
