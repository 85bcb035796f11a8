"""The pipeline's bookkeeping: a partition's marker, its turn, and what runs leave behind."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import Engine, func, select

from broker.core.system import DEFAULT_STREAM
from broker.spark import runs
from broker.spark.runs import PartSummary, input_order
from broker.store.schema import spark_parts as parts
from broker.store.schema import spark_runs as runs_table


def markers(engine: Engine, job: str | None = None) -> int:
    stmt = select(func.count()).select_from(parts)
    if job is not None:
        stmt = stmt.where(parts.c.job == job)
    with engine.connect() as conn:
        return conn.execute(stmt).scalar_one()


def commit_marker(engine: Engine, job: str, part: int, summary: PartSummary | None = None) -> bool:
    with engine.begin() as conn:
        claimed = runs.claim_part(conn, job, part)
        if claimed:
            runs.finish_part(conn, job, part, summary or PartSummary(rows_read=1))
    return claimed


@given(st.lists(st.tuples(st.integers(0, 9), st.integers(1, 2**44 - 1)), unique=True))
def test_input_order_is_priority_then_fifo(pairs):
    assert sorted(pairs, key=lambda p: input_order(*p)) == sorted(pairs, key=lambda p: (-p[0], p[1]))


def test_a_partition_is_claimed_once_however_often_it_is_attempted(engine):
    first = PartSummary(rows_read=4, written=9, write_us=3)
    assert commit_marker(engine, "job-1", 3, first)
    assert not commit_marker(engine, "job-1", 3, PartSummary(rows_read=99))
    with engine.connect() as conn:
        assert runs.part_summary(conn, "job-1", 3) == first
        assert runs.committed_parts(conn, "job-1") == {3: first}


def test_a_concurrent_attempt_waits_for_the_first_and_claims_nothing(engine):
    results: list[bool] = []
    with engine.begin() as conn:
        assert runs.claim_part(conn, "job-1", 0)
        finished = threading.Event()

        def second() -> None:
            results.append(commit_marker(engine, "job-1", 0))
            finished.set()

        thread = threading.Thread(target=second)
        thread.start()
        assert not finished.wait(0.3)
        runs.finish_part(conn, "job-1", 0, PartSummary(rows_read=7))
    thread.join(10)
    assert results == [False]
    assert markers(engine) == 1


def test_the_first_partition_never_waits(engine):
    assert runs.await_turn(engine, "job-1", 0, timeout=0.0) == 0.0


def test_a_partition_waits_for_the_one_before_it_to_commit(engine):
    commit_marker(engine, "job-1", 0)  # another job's partition 1 is no turn of ours
    commit_marker(engine, "job-2", 1)

    def later() -> None:
        time.sleep(0.4)
        commit_marker(engine, "job-1", 1)

    thread = threading.Thread(target=later)
    thread.start()
    waited = runs.await_turn(engine, "job-1", 2, timeout=30)
    thread.join()
    assert waited >= 0.35
    assert runs.await_turn(engine, "job-1", 1, timeout=0.0) < 0.1


def test_a_turn_that_never_comes_fails_the_attempt(engine):
    with pytest.raises(runs.TurnTimeout) as failed:
        runs.await_turn(engine, "job-1", 5, timeout=0.2)
    assert "partition 4 of job job-1" in failed.value.detail


def test_a_new_run_clears_what_dead_runs_of_its_stream_left(engine):
    with engine.begin() as conn:
        runs.start_run(conn, "dead", DEFAULT_STREAM, 10, 1, 0)
        runs.start_run(conn, "other", "OTHER.STREAM", 10, 1, 0)
    for job in ("dead", "other"):
        commit_marker(engine, job, 0)

    with engine.begin() as conn:
        runs.start_run(conn, "new", DEFAULT_STREAM, 20, 2, 5)

    assert (markers(engine, "dead"), markers(engine, "other")) == (0, 1)
    with engine.connect() as conn:
        assert sorted(conn.execute(select(runs_table.c.job, runs_table.c.watermark))) == [
            ("new", 20),
            ("other", 10),
        ]


def test_ending_a_run_removes_it_and_its_markers_only(engine):
    with engine.begin() as conn:
        runs.start_run(conn, "a", "S1", 1, 1, 0)
        runs.start_run(conn, "b", "S2", 1, 1, 0)
    commit_marker(engine, "a", 0)
    commit_marker(engine, "b", 0)

    with engine.begin() as conn:
        runs.end_run(conn, "a")

    assert (markers(engine, "a"), markers(engine, "b")) == (0, 1)
    with engine.connect() as conn:
        assert list(conn.execute(select(runs_table.c.job))) == [("b",)]
