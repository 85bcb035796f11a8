"""Several processes on one queue: competing consumers, and a consumer killed mid-unit-of-work."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.process import BaseProcess

from sqlalchemy import Engine, text

from queues import Message, sql
from tests.queues import workers

SPAWN = multiprocessing.get_context("spawn")
MESSAGES = 2_000
CONSUMERS = 4
KILLS = 3
HELD = 4


@contextmanager
def running(processes: list[BaseProcess]) -> Iterator[None]:
    """Start ``processes``; whatever happens, none outlives the test."""
    for process in processes:
        process.start()
    try:
        yield
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join(5)


def test_competing_consumers_get_every_message_exactly_once(qm, engine, database_url, tmp_path):
    qm.define_queue("WORK", max_depth=MESSAGES)
    qm.put_many([("WORK", Message(body=str(i).encode())) for i in range(MESSAGES)])
    outputs = [tmp_path / f"consumer{seed}.txt" for seed in range(CONSUMERS)]
    start = SPAWN.Barrier(CONSUMERS)
    consumers = [
        SPAWN.Process(target=workers.consume, args=(database_url, "WORK", seed, str(out), start))
        for seed, out in enumerate(outputs)
    ]
    with running(consumers):
        for process in consumers:
            process.join(60)
    assert [p.exitcode for p in consumers] == [0] * CONSUMERS
    reports = [out.read_text().split() for out in outputs]
    backouts = sum(int(report[1]) for report in reports)
    taken = [[int(body) for body in report[2:]] for report in reports]
    everything = sorted(i for consumer in taken for i in consumer)
    assert everything == list(range(MESSAGES))  # none twice, none lost
    assert backouts > 0
    assert sum(1 for consumer in taken if consumer) >= 2
    assert qm.depth("WORK") == 0
    with engine.connect() as conn:
        assert sql.count_messages(conn, "WORK") == 0


def _wait_until_aborted(engine: Engine) -> None:
    """PostgreSQL aborts a killed client's transaction when it notices the closed socket;
    until then SKIP LOCKED would (rightly) pass over its messages."""
    if engine.dialect.name != "postgresql":
        return
    query = text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()"
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            if conn.execute(query).scalar_one() == 0:
                return
        time.sleep(0.02)
    raise AssertionError("the killed client's transaction is still open")


def test_a_consumer_killed_mid_unit_of_work_loses_nothing(qm, engine, database_url):
    qm.define_queue("WORK")
    ids = [qm.put("WORK", Message(body=f"m{i}".encode())) for i in range(10)]
    pipes = [SPAWN.Pipe() for _ in range(KILLS)]
    doomed = [
        SPAWN.Process(target=workers.get_and_hang, args=(database_url, "WORK", HELD, child))
        for _, child in pipes
    ]
    with running(doomed):  # all start at once; each is killed in turn
        for (pipe, _), process in zip(pipes, doomed, strict=True):
            assert pipe.poll(30) and pipe.recv() == workers.READY
            pipe.send(workers.GO)
            assert pipe.poll(30)
            assert pipe.recv() == ids[:HELD]
            os.kill(process.pid, signal.SIGKILL)
            process.join(10)
            assert process.exitcode == -signal.SIGKILL
            _wait_until_aborted(engine)
            assert [b.message.msg_id for b in qm.browse("WORK", limit=100)] == ids
            assert qm.depth("WORK") == 10
            with engine.connect() as conn:
                assert sql.count_messages(conn, "WORK") == 10
    with qm.unit_of_work() as uow:
        got = uow.get_batch("WORK", 100)
    assert [m.msg_id for m in got] == ids
    assert [m.body for m in got] == [f"m{i}".encode() for i in range(10)]
    assert qm.depth("WORK") == 0
    with engine.connect() as conn:
        assert sql.count_messages(conn, "WORK") == 0
