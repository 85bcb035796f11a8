"""Two units of work open at once on one queue: only PostgreSQL allows it.

SQLite runs one writing unit of work at a time (``BEGIN IMMEDIATE``), so the
same refusals are shown there in ``test_manager.py`` by changing the depth
counter on the unit's own connection; here another unit of work really does it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

import migrations
from queues import Message, MQError, NoMessageAvailable, QueueManager, UnitOfWork, make_engine, sql
from tests.conftest import PostgresDatabases


@pytest.fixture
def qm(postgres: PostgresDatabases) -> Iterator[QueueManager]:
    url = postgres.create()
    engine = make_engine(url)
    migrations.upgrade(engine)
    QueueManager.create(engine, "QM1")
    manager = QueueManager(engine, appl_name="pytest", user_id="tester")
    yield manager
    manager.close()
    postgres.drop(url)


def bodies(qm: QueueManager, queue: str) -> list[bytes]:
    got = []
    while True:
        try:
            got.append(qm.get(queue).body)
        except NoMessageAvailable:
            return got


def test_commit_is_refused_when_another_unit_of_work_filled_the_queue(qm: QueueManager) -> None:
    qm.define_queue("APP.Q", max_depth=2)
    with pytest.raises(MQError) as caught, qm.unit_of_work() as uow:
        uow.put("APP.Q", Message(body=b"m1"))
        qm.put_many([("APP.Q", Message(body=b"m2")), ("APP.Q", Message(body=b"m3"))])
    assert caught.value.reason == 2053
    assert bodies(qm, "APP.Q") == [b"m2", b"m3"]


def test_a_queue_deleted_before_commit_refuses_the_put(qm: QueueManager) -> None:
    qm.define_queue("APP.Q")
    with pytest.raises(MQError) as caught, qm.unit_of_work() as uow:
        uow.put("APP.Q", Message(body=b"m1"))
        qm.delete_queue("APP.Q")
    assert caught.value.reason == 2053
    with qm.reading() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM mq_messages").scalar_one() == 0


def test_units_that_claim_in_turn_commit_in_claim_order(qm: QueueManager) -> None:
    """The second claimant routes meanwhile, but its writes wait for the first to end."""
    qm.define_queue("STREAM")
    qm.define_queue("OUT")
    qm.put_many([("STREAM", Message(body=f"m{i}".encode())) for i in range(4)])
    waited = threading.Event()
    with qm.unit_of_work() as first:
        assert [m.body for m in first.get_batch("STREAM", 2, in_turn=True)] == [b"m0", b"m1"]

        def second() -> None:
            with qm.unit_of_work() as uow:
                assert [m.body for m in uow.get_batch("STREAM", 2, in_turn=True)] == [b"m2", b"m3"]
                uow.await_turn()
                waited.set()
                uow.put("OUT", Message(body=b"second"))

        thread = threading.Thread(target=second)
        thread.start()
        assert not waited.wait(0.5)  # claimed, but not yet allowed to write
        first.put("OUT", Message(body=b"first"))
    thread.join(10)
    assert waited.is_set()
    assert bodies(qm, "OUT") == [b"first", b"second"]


def test_a_turn_whose_unit_of_work_backed_out_holds_nobody_up(qm: QueueManager) -> None:
    qm.define_queue("STREAM")
    qm.put_many([("STREAM", Message(body=f"m{i}".encode())) for i in range(2)])
    uow = qm.unit_of_work()
    with pytest.raises(RuntimeError), uow as first:
        first.get_batch("STREAM", 1, in_turn=True)
        raise RuntimeError("the router failed")
    with qm.unit_of_work() as later:
        assert [m.body for m in later.get_batch("STREAM", 2, in_turn=True)] == [b"m0", b"m1"]
        later.await_turn()  # at once: the turn before it ended with its unit of work


def test_a_claim_that_fails_in_turn_leaves_claims_unlocked(
    qm: QueueManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock that serialises claims belongs to the session: a failure while holding it
    closes the connection, so the pool never hands the lock to the next unit of work."""
    qm.define_queue("STREAM")
    qm.put("STREAM", Message(body=b"m0"))
    real_claim = sql.claim_messages

    def failing(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the claim failed")

    monkeypatch.setattr(sql, "claim_messages", failing)
    with pytest.raises(RuntimeError), qm.unit_of_work() as uow:
        uow.get_batch("STREAM", 1, in_turn=True)
    monkeypatch.setattr(sql, "claim_messages", real_claim)
    other = QueueManager(qm.engine)  # another process's view: a fresh connection
    assert claims_unlocked_within(other, seconds=5)
    with other.unit_of_work() as uow:
        assert [m.body for m in uow.get_batch("STREAM", 1, in_turn=True)] == [b"m0"]


def claims_unlocked_within(qm: QueueManager, seconds: float) -> bool:
    """Whether no session holds the claims lock within ``seconds``: a closed session's
    server process releases its locks as it ends, a moment after the client closed it,
    while a session kept in the pool would hold the lock for good."""
    deadline = time.monotonic() + seconds
    while True:
        with qm.unit_of_work() as uow:
            locked = uow.connection.exec_driver_sql(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 0 AND classid = %s",
                (sql.TURN_LOCK_CLASS,),
            ).scalar_one()
        if locked == 0:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def behind_a_stalled_owner(
    qm: QueueManager, waiter: QueueManager, stall: Callable[[UnitOfWork, threading.Event], None]
) -> tuple[float, list[BaseException]]:
    """A unit of work of ``waiter`` claiming behind an owner (turn timeout 2 s) that claims,
    then stalls as ``stall`` does (setting the event once stalled); how long the waiter waited
    for its turn, and what the owner's unit of work raised."""
    stalled = QueueManager(qm.engine, turn_timeout=2)
    qm.define_queue("STREAM")
    qm.define_queue("OUT")
    qm.put_many([("STREAM", Message(body=f"m{i}".encode())) for i in range(4)])
    claimed = threading.Event()
    outcome: list[BaseException] = []

    def stopped_owner() -> None:
        try:
            with stalled.unit_of_work() as uow:
                uow.get_batch("STREAM", 2, in_turn=True)
                stall(uow, claimed)
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=stopped_owner)
    thread.start()
    assert claimed.wait(10)
    started = time.monotonic()
    with waiter.unit_of_work() as uow:
        assert [m.body for m in uow.get_batch("STREAM", 2, in_turn=True)] == [b"m2", b"m3"]
        uow.await_turn()
        uow.put("OUT", Message(body=b"on time"))
    waited = time.monotonic() - started
    thread.join(10)
    return waited, outcome


def test_a_turn_whose_owner_makes_no_progress_is_ended_by_the_server(
    qm: QueueManager, caplog: pytest.LogCaptureFixture
) -> None:
    """An owner that stops sending (a stopped process) loses its turn within the turn timeout:
    the server ends its transaction, the turn behind it goes on, and nothing it did is kept."""

    def between_statements(uow: UnitOfWork, claimed: threading.Event) -> None:
        claimed.set()
        time.sleep(4)  # as if stopped: it sends nothing
        uow.put("OUT", Message(body=b"late"))

    waited, outcome = behind_a_stalled_owner(qm, qm, between_statements)

    assert 1.9 < waited < 3.5
    assert [exc.reason for exc in outcome] == [2009]  # type: ignore[attr-defined]  # MQRC_CONNECTION_BROKEN: it reconnects
    assert bodies(qm, "OUT") == [b"on time"]
    assert bodies(qm, "STREAM") == [b"m0", b"m1"]  # back in their place, routed by the next claim
    (record,) = [r for r in caplog.records if r.msg == "waited for an earlier claim turn"]
    assert record.seconds >= 1.9  # type: ignore[attr-defined]


def test_a_turn_whose_owner_stops_inside_a_statement_is_ended_by_the_waiter(
    qm: QueueManager, caplog: pytest.LogCaptureFixture
) -> None:
    """An owner stopped in the middle of a statement (a COPY whose rows are half sent) is not
    idle in its transaction, so the server would wait for it without limit: the unit of work
    waiting for its turn ends it once it has made no progress for the turn timeout."""

    def inside_a_copy(uow: UnitOfWork, claimed: threading.Event) -> None:
        driver = uow.connection.connection.driver_connection
        assert driver is not None
        with driver.cursor() as cursor, cursor.copy("COPY mq_messages (body) FROM STDIN"):
            claimed.set()
            time.sleep(7)  # as if stopped before sending its rows

    waited, outcome = behind_a_stalled_owner(qm, QueueManager(qm.engine, turn_timeout=2), inside_a_copy)

    assert 1.9 < waited < 5
    assert len(outcome) == 1  # its connection was ended under it
    assert bodies(qm, "OUT") == [b"on time"]
    assert bodies(qm, "STREAM") == [b"m0", b"m1"]
    (taken,) = [r for r in caplog.records if r.msg == "claim turn taken over: its owner made no progress"]
    assert taken.idle_seconds >= 2 and taken.ended  # type: ignore[attr-defined]


def test_a_turn_whose_owner_shows_progress_is_kept(qm: QueueManager) -> None:
    """A long batch that keeps showing progress (``UnitOfWork.show_progress``) keeps its turn."""
    slow = QueueManager(qm.engine, turn_timeout=1)
    qm.define_queue("STREAM")
    qm.put_many([("STREAM", Message(body=f"m{i}".encode())) for i in range(2)])
    with slow.unit_of_work() as uow:
        uow.get_batch("STREAM", 1, in_turn=True)
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            uow.show_progress()
            time.sleep(0.05)
    assert bodies(qm, "STREAM") == [b"m1"]
