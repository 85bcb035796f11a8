"""The staging area: exactly once per partition, leftovers of dead runs, and the merge's order."""

from __future__ import annotations

import threading

from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import Engine, func, select

from broker.spark import partition, staging
from broker.spark.schema import deferred, parts, puts, retained, runs
from broker.spark.staging import PartSummary, input_order
from broker.system import DEFAULT_STREAM
from queues import DEAD_LETTER_QUEUE, Message, QueueManager
from queues.definition import QueueDefinition
from queues.ids import mq_date_time
from queues.manager import message_row
from queues.schema import messages

STAMP = mq_date_time(0)


def put_row(job: str, seq: int, idx: int, queue: str, body: bytes, phase: int = 1) -> tuple[object, ...]:
    stored = message_row(
        QueueDefinition(queue), queue, Message(body=body, msg_id=body.ljust(24)), 0, STAMP, "QM1", "u", "a"
    )
    return (job, seq, idx, phase, 0, 0, *stored)


def count(engine: Engine, table, job: str | None = None) -> int:
    stmt = select(func.count()).select_from(table)
    if job is not None:
        stmt = stmt.where(table.c.job == job)
    with engine.connect() as conn:
        return conn.execute(stmt).scalar_one()


@given(st.lists(st.tuples(st.integers(0, 9), st.integers(1, 2**44 - 1)), unique=True))
def test_input_order_is_priority_then_fifo(pairs):
    assert sorted(pairs, key=lambda p: input_order(*p)) == sorted(pairs, key=lambda p: (-p[0], p[1]))


def staged(job: str, rows: int, retained_topics: tuple[str, ...] = ()) -> partition.Staged:
    result = partition.Staged(
        job, [put_row(job, n, 0, "Q", f"m{n}".encode()) for n in range(rows)], PartSummary(rows_read=rows)
    )
    result.retained.extend((job, n, 0, "", topic) for n, topic in enumerate(retained_topics))
    result.deferred.append((job, 99))
    return result


def test_a_partition_is_written_once_however_often_it_is_attempted(engine):
    first = partition.store(engine, 3, staged("job-1", 4, ("A", "B")))
    again = partition.store(engine, 3, staged("job-1", 4, ("A", "B")))

    assert again == first
    assert first.rows_read == 4 and first.stage_us > 0
    assert (count(engine, puts), count(engine, retained), count(engine, deferred)) == (4, 2, 1)
    with engine.connect() as conn:
        assert staging.staged_parts(conn, "job-1") == {3: first}


def test_a_concurrent_attempt_waits_for_the_first_and_writes_nothing(engine):
    with engine.begin() as conn:
        assert staging.claim_part(conn, "job-1", 0)
        finished = threading.Event()
        results: list[PartSummary] = []

        def second() -> None:
            results.append(partition.store(engine, 0, staged("job-1", 2)))
            finished.set()

        thread = threading.Thread(target=second)
        thread.start()
        assert not finished.wait(0.3)
        staging.finish_part(conn, "job-1", 0, PartSummary(rows_read=7, staged=0))
    thread.join(10)
    assert results == [PartSummary(rows_read=7)]
    assert count(engine, puts) == 0


def test_a_new_run_clears_what_dead_runs_of_its_stream_left(engine):
    with engine.begin() as conn:
        staging.start_run(conn, "dead", DEFAULT_STREAM, 10, 1, 0)
        staging.start_run(conn, "other", "OTHER.STREAM", 10, 1, 0)
    for job in ("dead", "other", "orphan"):
        partition.store(engine, 0, staged(job, 2, ("A",)))

    with engine.begin() as conn:
        staging.start_run(conn, "new", DEFAULT_STREAM, 20, 2, 5)

    for table in (puts, parts, retained, deferred):
        assert (count(engine, table, "dead"), count(engine, table, "orphan")) == (0, 0)
        assert count(engine, table, "other") > 0
    with engine.connect() as conn:
        assert sorted(conn.execute(select(runs.c.job, runs.c.watermark))) == [("new", 20), ("other", 10)]


def test_clearing_a_run_keeps_the_others_and_empties_everything_after_the_last(engine):
    with engine.begin() as conn:
        staging.start_run(conn, "a", "S1", 1, 1, 0)
        staging.start_run(conn, "b", "S2", 1, 1, 0)
    partition.store(engine, 0, staged("a", 2))
    partition.store(engine, 0, staged("b", 3))

    with engine.begin() as conn:
        staging.end_run(conn, "a")
        staging.clear(conn, "a")
    assert (count(engine, puts, "a"), count(engine, puts, "b")) == (0, 3)
    with engine.begin() as conn:
        staging.end_run(conn, "b")
        staging.clear(conn, "b")
    assert [count(engine, table) for table in (puts, parts, retained, deferred, runs)] == [0, 0, 0, 0, 0]


def test_staged_rows_reach_their_queues_in_the_service_order(qm: QueueManager, engine):
    """Ordinary queues in input order; the dead-letter queue per service batch of 2 inputs:
    the engine's dead letters (phase 0), then failed puts (phase 1), each in input order."""
    qm.define_queue(DEFAULT_STREAM)
    qm.define_queue("Q")
    qm.put_many([(DEFAULT_STREAM, Message(body=b"in", priority=p)) for p in (0, 5, 5, 9)])
    with engine.connect() as conn:
        ids = [r.id for r in conn.execute(select(messages.c.id, messages.c.priority).order_by(messages.c.id))]
    first, second, third, fourth = (input_order(p, i) for p, i in zip((0, 5, 5, 9), ids, strict=True))
    # get order: fourth (9), second, third (5), first (0) -> batches {fourth, second}, {third, first}
    rows = [
        put_row("j", first, 0, "Q", b"q-first"),
        put_row("j", fourth, 1, "Q", b"q-fourth-1"),
        put_row("j", fourth, 0, "Q", b"q-fourth-0"),
        put_row("j", first, 1, DEAD_LETTER_QUEUE, b"d-first-put", phase=1),
        put_row("j", third, 0, DEAD_LETTER_QUEUE, b"d-third-direct", phase=0),
        put_row("j", second, 0, DEAD_LETTER_QUEUE, b"d-second-put", phase=1),
        put_row("j", fourth, 2, DEAD_LETTER_QUEUE, b"d-fourth-direct", phase=0),
        put_row("j", 0, 0, DEAD_LETTER_QUEUE, b"d-housekeeping", phase=0),
    ]
    with engine.begin() as conn:
        staging.write_puts(conn, rows)
        staging.insert_messages(conn, "j", DEAD_LETTER_QUEUE)
        staging.insert_dead_letters(
            conn, "j", DEAD_LETTER_QUEUE, stream=DEFAULT_STREAM, watermark=ids[-1], now=0, batch_size=2
        )

    def bodies(queue: str) -> list[bytes]:
        return [b.message.body for b in qm.browse(queue, limit=100)]

    assert bodies("Q") == [b"q-fourth-0", b"q-fourth-1", b"q-first"]
    assert bodies(DEAD_LETTER_QUEUE) == [
        b"d-housekeeping",
        b"d-fourth-direct",
        b"d-second-put",
        b"d-third-direct",
        b"d-first-put",
    ]
