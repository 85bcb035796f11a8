"""The SQLite writer lock: writers wait for each other in the kernel instead of sleeping and
retrying, and the lock never outlives the transaction that took it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

import migrations
from queues import Message, MQError, QueueManager, make_engine
from queues.writer_lock import writer_lock

HOLD = 0.4


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Engine:
    """A database whose writers give up on SQLite's own lock after 50 ms."""
    engine = make_engine(f"sqlite:///{tmp_path / 'locks.db'}", busy_timeout_ms=50)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (n INTEGER)"))
    return engine


def write_in_thread(engine: Engine, n: int, hold: float = 0.0) -> tuple[threading.Thread, list[object]]:
    outcome: list[object] = []

    def write() -> None:
        try:
            with engine.begin() as conn:
                conn.execute(text("INSERT INTO t VALUES (:n)"), {"n": n})
                time.sleep(hold)
            outcome.append(time.monotonic())
        except Exception as exc:  # reported to the test
            outcome.append(exc)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread, outcome


def rows(engine: Engine) -> list[int]:
    with engine.connect() as conn:
        return [n for (n,) in conn.execute(text("SELECT n FROM t ORDER BY n"))]


def test_a_writer_waits_for_the_one_before_it_however_long_it_writes(sqlite_engine: Engine) -> None:
    """SQLite alone would give the second writer 'database is locked' after its 50 ms."""
    first, first_done = write_in_thread(sqlite_engine, 1, hold=HOLD)
    time.sleep(0.05)
    second, second_done = write_in_thread(sqlite_engine, 2)
    first.join(5)
    second.join(5)
    assert all(isinstance(t, float) for t in first_done + second_done), (first_done, second_done)
    assert second_done[0] - first_done[0] < 0.1  # handed over at once, not after a sleep
    assert rows(sqlite_engine) == [1, 2]


def test_the_lock_is_dropped_on_rollback(sqlite_engine: Engine) -> None:
    with pytest.raises(RuntimeError), sqlite_engine.begin() as conn:
        conn.execute(text("INSERT INTO t VALUES (1)"))
        raise RuntimeError("backed out")
    thread, done = write_in_thread(sqlite_engine, 2)
    thread.join(5)
    assert isinstance(done[0], float)
    assert rows(sqlite_engine) == [2]


def test_the_lock_is_dropped_when_its_connection_is_invalidated(sqlite_engine: Engine) -> None:
    conn = sqlite_engine.connect()
    conn.begin()
    conn.execute(text("INSERT INTO t VALUES (1)"))
    conn.invalidate()
    thread, done = write_in_thread(sqlite_engine, 2)
    thread.join(5)
    assert isinstance(done[0], float), done
    assert rows(sqlite_engine) == [2]


def test_a_thread_that_holds_the_lock_does_not_wait_for_itself(sqlite_engine: Engine) -> None:
    """A second writing transaction in the same thread meets SQLite's lock and fails after
    the busy timeout, as it did before the writer lock: it does not hang."""
    with sqlite_engine.begin() as outer:
        outer.execute(text("INSERT INTO t VALUES (1)"))
        started = time.monotonic()
        with pytest.raises(OperationalError, match="locked"), sqlite_engine.begin() as inner:
            inner.execute(text("INSERT INTO t VALUES (2)"))
        assert time.monotonic() - started < 5
    assert rows(sqlite_engine) == [1]


def test_engines_on_one_file_share_one_lock_and_memory_databases_have_none(tmp_path: Path) -> None:
    path = str(tmp_path / "a.db")
    assert writer_lock(path) is writer_lock(str(tmp_path / "." / "a.db"))
    assert writer_lock(path).path == path + "-writer"  # type: ignore[union-attr]
    assert writer_lock(":memory:") is None
    assert writer_lock(None) is None


def test_a_transaction_ended_by_another_thread_leaves_its_own_thread_queueing(sqlite_engine: Engine) -> None:
    """The lock is accounted to the thread that took it, whichever thread commits: this thread
    must still queue for the lock afterwards, not take itself for its holder."""
    conn = sqlite_engine.connect()
    conn.begin()
    conn.execute(text("INSERT INTO t VALUES (1)"))
    committer = threading.Thread(target=conn.commit)
    committer.start()
    committer.join(5)
    conn.close()
    other, other_done = write_in_thread(sqlite_engine, 2, hold=HOLD)
    time.sleep(0.05)
    with sqlite_engine.begin() as mine:  # waits for the other writer instead of failing after 50 ms
        mine.execute(text("INSERT INTO t VALUES (3)"))
    other.join(5)
    assert isinstance(other_done[0], float)
    assert rows(sqlite_engine) == [1, 2, 3]


def test_a_put_beside_this_threads_own_unit_of_work_fails_instead_of_waiting_forever(
    tmp_path: Path,
) -> None:
    """Thread A holds the write lock in an open unit of work; thread B's put leads a group
    and waits for it. A's own put must not join B's group (B waits for A, A would wait for
    B): it goes alone, gets SQLite's busy error, and B's put goes through once A backs out."""
    url = f"sqlite:///{tmp_path / 'qm.db'}"
    engine = make_engine(url, busy_timeout_ms=200)
    migrations.upgrade(engine)
    QueueManager.create(engine, "QM1")
    qm = QueueManager(engine, appl_name="pytest", user_id="tester")
    qm.define_queue("APP.Q")
    b_done: list[object] = []
    a_error: list[MQError] = []

    def a() -> None:
        with pytest.raises(MQError) as caught, qm.unit_of_work() as uow:
            uow.put("APP.Q", Message(body=b"a1"))
            threading.Thread(
                target=lambda: b_done.append(qm.put("APP.Q", Message(body=b"b"))), daemon=True
            ).start()
            while not qm._puts._leading:
                time.sleep(0.005)
            qm.put("APP.Q", Message(body=b"a2"))
        a_error.append(caught.value)

    thread = threading.Thread(target=a, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "the put beside its own unit of work waited forever"
    assert a_error
    for _ in range(500):
        if b_done:
            break
        time.sleep(0.01)
    assert [b.message.body for b in qm.browse("APP.Q", limit=10)] == [b"b"]
    qm.close()
