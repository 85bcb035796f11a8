"""``broker spark route``: options, the summary it prints and its exit codes."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from sqlalchemy import text

import migrations
from broker import cli
from broker.core.system import DEFAULT_STREAM
from broker.spark import job
from broker.store import leases
from queues import make_engine
from queues.reasons import Reason
from tests.broker.spark.scenario import backlog, load


def test_the_options_reach_the_job_and_db_may_follow_the_subcommand():
    options = ["--master", "local[3]", "--partitions", "8", "--batch-size", "40", "--stream", "APP.STREAM"]
    args = cli.build_parser().parse_args(
        ["spark", "route", "--db", "sqlite:///x.db", *options, "--lease-seconds", "5", "--json"]
    )
    assert (args.db, args.master, args.partitions, args.batch_size) == ("sqlite:///x.db", "local[3]", 8, 40)
    assert (args.stream, args.lease_seconds, args.json) == ("APP.STREAM", 5, True)
    before = cli.build_parser().parse_args(["--db", "sqlite:///y.db", "spark", "route"])
    assert (before.db, before.master, before.stream, before.partitions) == (
        "sqlite:///y.db",
        "local[*]",
        None,  # the job drains SYSTEM.BROKER.DEFAULT.STREAM
        None,
    )
    assert before.lease_seconds * 1000 == leases.DEFAULT_LEASE_MS  # the parser's copy of the default


@pytest.mark.parametrize("option", [["--partitions", "0"], ["--lease-seconds", "x"]])
def test_bad_numbers_are_usage_errors(option, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.build_parser().parse_args(["spark", "route", *option])
    assert exited.value.code == 2


@pytest.fixture(autouse=True)
def own_logging() -> Iterator[None]:
    """``cli.main`` points the root logger at this test's captured stderr: put it back."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_a_queue_that_is_no_stream_fails_before_spark_starts(brokers, capsys):
    broker = brokers()
    with pytest.raises(SystemExit) as exited:
        cli.main(["--db", broker.url, "spark", "route", "--stream", "SUB.A"])
    assert exited.value.code == 1
    error = capsys.readouterr().err
    assert f"MQRCCF_COMMAND_FAILED ({Reason.MQRCCF_COMMAND_FAILED}): SUB.A is not a stream queue" in error


def test_a_run_prints_its_summary(spark, brokers, monkeypatch, capsys):
    broker = brokers()
    messages = backlog(24)
    load(broker, messages)
    monkeypatch.setattr(job, "spark_session", lambda master: spark)
    monkeypatch.setattr(spark, "stop", lambda: None)  # the session is the test run's

    assert cli.main(["--db", broker.url, "spark", "route", "--batch-size", "50", "--json"]) == 0

    summary = json.loads(capsys.readouterr().out)
    assert (summary["stream"], summary["messages"], summary["rows"]) == (DEFAULT_STREAM, 24, 25)
    assert summary["deliveries"] > 0 and summary["seconds"] > 0
    assert broker.qm.depth(DEFAULT_STREAM) == 0


def test_an_unmigrated_database_is_refused(database_url, capsys):
    engine = make_engine(database_url)
    migrations.upgrade(engine, "0005")
    with engine.begin() as conn:  # the queue manager as 0005 knew it (today's code cannot write that schema)
        conn.execute(text("INSERT INTO mq_qmgr (name, created_at) VALUES ('QM1', 0)"))
    engine.dispose()

    with pytest.raises(SystemExit) as exited:
        cli.main(["--db", database_url, "spark", "route"])

    assert exited.value.code == 1
    error = capsys.readouterr().err
    assert "MQRC_Q_MGR_NOT_AVAILABLE (2059): the database is at schema revision 0005" in error
    assert "run 'broker db upgrade'" in error
