"""A job killed at any point leaves either nothing visible or the complete result, and a rerun
ends exactly where one clean run does: no duplicates, nothing lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from broker.spark import job, lease
from broker.spark.schema import leases, parts, puts
from tests.spark.scenario import Broker, backlog, contents, load

ROOT = Path(__file__).resolve().parents[2]
OPTIONS = job.JobOptions(partitions=4, progress_seconds=0.5, lease_ms=3_000)


def count(broker: Broker, table) -> int:
    with broker.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(table)).scalar_one()


def start(broker: Broker, point: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.spark.killable", broker.url, point],
        cwd=ROOT,
        stdout=subprocess.PIPE,
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
    resource = lease.stream_resource(OPTIONS.stream)
    with broker.engine.begin() as conn:
        owner = conn.execute(select(leases.c.owner).where(leases.c.resource == resource)).scalar_one()
        assert owner.startswith("spark:")
        if driver == "elsewhere":
            elsewhere = owner.rpartition("@")[0] + "@0123456789ab"
            conn.execute(update(leases).where(leases.c.resource == resource).values(owner=elsewhere))
    if driver == "elsewhere":
        with pytest.raises(lease.LeaseError):
            job.run(spark, broker.qm, broker.settings, OPTIONS)
        time.sleep(OPTIONS.lease_ms / 1000)
    return job.run(spark, broker.qm, broker.settings, OPTIONS)


@pytest.mark.parametrize(
    ("point", "driver"), [("staging", "here"), ("merge", "here"), ("merge", "elsewhere")]
)
def test_a_killed_job_reruns_to_the_result_of_a_clean_run(spark, brokers, point, driver):
    killed, clean = brokers(), brokers()
    messages = backlog(120)
    for broker in (killed, clean):
        load(broker, messages)
    before = contents(killed)

    process = start(killed, point)
    try:
        if point == "staging":
            wait_for(lambda: count(killed, parts) >= 1)
        else:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "MERGING"
    finally:
        kill(process)

    assert contents(killed) == before  # nothing of it is visible
    assert count(killed, parts) >= 1  # but its staging is left behind
    if point == "merge":
        assert count(killed, puts) > 0
    summary = rerun(spark, killed, driver)
    job.run(spark, clean.qm, clean.settings, OPTIONS)

    assert contents(killed) == contents(clean)
    assert summary.messages == len(messages) - 1
    assert count(killed, puts) == 0
