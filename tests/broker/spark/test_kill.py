"""A job killed at any point leaves whole partitions committed and the rest of the backlog
where it was, and a rerun ends exactly where one clean run does: no duplicates, nothing lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from broker.core.system import DEFAULT_STREAM
from broker.spark import job
from broker.store import leases
from broker.store.schema import leases as lease_rows
from broker.store.schema import spark_parts as parts
from tests.broker.spark.scenario import Broker, backlog, contents, load

ROOT = Path(__file__).resolve().parents[3]
HOLD = Path(__file__).resolve().parent / "hold"
OPTIONS = job.JobOptions(partitions=4, progress_seconds=0.5, lease_ms=3_000)


def count(broker: Broker, table) -> int:
    with broker.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(table)).scalar_one()


def start(broker: Broker, hold_at: int, hold_file: Path) -> subprocess.Popen[str]:
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HOLD), str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "BROKER_TEST_HOLD_AT": str(hold_at),
        "BROKER_TEST_HOLD_FILE": str(hold_file),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "tests.broker.spark.killable", broker.url],
        cwd=ROOT,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,  # its JVM and Python workers die with it
    )


def kill(process: subprocess.Popen[str]) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(30)


def wait_for(condition, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the job never got there"
        time.sleep(0.05)


def rerun(spark, broker: Broker, driver: str) -> job.Summary:
    """Run the job again after the killed one. A dead driver of this machine leaves its
    stream free at once; one of another machine (its owner name says so) keeps everyone
    off until its lease lapses."""
    resource = leases.stream_resource(OPTIONS.stream)
    with broker.engine.begin() as conn:
        owner = conn.execute(select(lease_rows.c.owner).where(lease_rows.c.resource == resource)).scalar_one()
        assert owner.startswith("spark:")
        if driver == "elsewhere":
            elsewhere = owner.rpartition("@")[0] + "@0123456789ab"
            conn.execute(update(lease_rows).where(lease_rows.c.resource == resource).values(owner=elsewhere))
    if driver == "elsewhere":
        with pytest.raises(leases.LeaseError):
            job.run(spark, broker.qm, broker.settings, OPTIONS)
        time.sleep(OPTIONS.lease_ms / 1000)
    return job.run(spark, broker.qm, broker.settings, OPTIONS)


@pytest.mark.parametrize(("hold_at", "driver"), [(0, "here"), (1, "here"), (2, "elsewhere")])
def test_a_killed_job_reruns_to_the_result_of_a_clean_run(spark, brokers, tmp_path, hold_at, driver):
    """Killed inside the transaction of partition ``hold_at`` (of three: 120 live messages in
    service batches of 50): the partitions before it are committed, nothing of the rest is."""
    killed, clean = brokers(), brokers()
    messages = backlog(120)
    for broker in (killed, clean):
        load(broker, messages)
    before = contents(killed)
    depth = killed.qm.depth(DEFAULT_STREAM)

    hold_file = tmp_path / "holding"
    process = start(killed, hold_at, hold_file)
    try:
        wait_for(hold_file.exists)
        assert hold_file.read_text() == str(hold_at)
    finally:
        kill(process)

    assert count(killed, parts) == hold_at  # whole partitions, each with its marker
    with killed.engine.connect() as conn:
        consumed = conn.execute(select(func.coalesce(func.sum(parts.c.rows_read), 0))).scalar_one()
        written = conn.execute(select(func.coalesce(func.sum(parts.c.written), 0))).scalar_one()
    assert killed.qm.depth(DEFAULT_STREAM) == depth - consumed
    assert (consumed > 0) == (hold_at > 0)
    after = contents(killed)
    grown = sum(d - before["queues"].get(q, (0, []))[0] for q, (d, _) in after["queues"].items())
    assert grown == written - consumed  # what the committed partitions wrote, less their backlog
    if hold_at == 0:
        assert after == before

    summary = rerun(spark, killed, driver)
    job.run(spark, clean.qm, clean.settings, OPTIONS)

    assert contents(killed) == contents(clean)
    assert summary.rows == len(messages) - consumed
    assert count(killed, parts) == 0
