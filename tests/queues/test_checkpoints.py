"""WAL checkpoints on a thread of their own: the log is copied into the database file beside
the writers, and kept bounded while they never stop."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

import migrations
from queues import BACKSTOP_PAGES, Checkpointer, Message, QueueManager, make_engine

BODY = bytes(4000)  # about a page per message


@pytest.fixture
def sqlite_qm(tmp_path: Path) -> Iterator[QueueManager]:
    """A queue manager on a SQLite file whose connections never checkpoint by themselves
    within these tests (a backstop of 16,384 pages), as ``broker serve``'s."""
    engine = make_engine(f"sqlite:///{tmp_path / 'broker.db'}", sqlite_autocheckpoint=BACKSTOP_PAGES)
    migrations.upgrade(engine)
    QueueManager.create(engine, "QM1")
    with QueueManager(engine, appl_name="pytest") as qm:
        qm.define_queue("APP.Q", max_depth=1_000_000)
        yield qm


def put(qm: QueueManager, count: int) -> None:
    qm.put_many([("APP.Q", Message(body=BODY)) for _ in range(count)])


def size(path: str) -> int:
    return os.path.getsize(path) if os.path.exists(path) else 0


def wait_until(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_connections_take_the_autocheckpoint_they_are_given(tmp_path: Path) -> None:
    given = make_engine(f"sqlite:///{tmp_path / 'a.db'}", sqlite_autocheckpoint=BACKSTOP_PAGES)
    default = make_engine(f"sqlite:///{tmp_path / 'b.db'}")
    try:
        for engine, pages in ((given, BACKSTOP_PAGES), (default, 1000)):
            with engine.connect() as conn:
                assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar_one() == pages
    finally:
        given.dispose()
        default.dispose()


def test_the_thread_copies_what_writers_commit_into_the_database_file(sqlite_qm: QueueManager) -> None:
    database = sqlite_qm.engine.url.database
    assert database is not None
    put(sqlite_qm, 300)
    before = size(database)
    assert size(database + "-wal") > 300 * len(BODY)  # everything is still in the log
    with Checkpointer(sqlite_qm.engine, interval=0.01) as checkpointer:
        assert wait_until(lambda: size(database) > before + 300 * len(BODY))
        assert checkpointer.checkpoints >= 1
    # The messages read back whole after the copy.
    with sqlite_qm.unit_of_work() as uow:
        assert [m.body for m in uow.get_batch("APP.Q", 1000)] == [BODY] * 300


def test_the_log_is_restarted_when_it_passes_its_bound_under_steady_writers(sqlite_qm: QueueManager) -> None:
    """Writers that never pause would starve PASSIVE checkpoints of the moment the log can
    be reset; past ``restart_frames`` the thread restarts it, so the file stays bounded
    (by what is written while one checkpoint runs) instead of holding everything."""
    database = sqlite_qm.engine.url.database
    assert database is not None
    with Checkpointer(sqlite_qm.engine, interval=0.005, restart_frames=200) as checkpointer:
        for _ in range(300):
            put(sqlite_qm, 20)
            time.sleep(0.002)
    written = 300 * 20 * len(BODY)
    assert checkpointer.restarts >= 1
    assert size(database + "-wal") < written / 4


def test_nothing_to_do_on_postgresql_or_in_memory(engine: Engine) -> None:
    checkpointer = Checkpointer(engine)
    memory = Checkpointer(make_engine("sqlite://"))
    with checkpointer, memory:
        names = {thread.name for thread in threading.enumerate()}
    expected_file = engine.dialect.name == "sqlite"
    assert checkpointer.applies is expected_file
    assert not memory.applies
    assert ("wal-checkpoints" in names) is expected_file
