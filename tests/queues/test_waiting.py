"""Waiting for messages: prompt wake-ups without busy polling, in-process and across processes."""

from __future__ import annotations

import multiprocessing
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

import migrations
from queues import Message, NoMessageAvailable, QueueManager, make_engine
from queues.waiting import COUNTER_GROUPS, ArrivalNotifier, WakeSockets, _group
from tests.queues import workers

SPAWN = multiprocessing.get_context("spawn")


@pytest.fixture
def queue(qm: QueueManager) -> str:
    qm.define_queue("APP.Q")
    return "APP.Q"


class StatementCounter:
    """Counts the statements an engine sends to the database."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.count = 0
        event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, *_args: Any) -> None:
        self.count += 1

    def remove(self) -> None:
        event.remove(self.engine, "before_cursor_execute", self._seen)


@pytest.fixture
def statements(qm: QueueManager) -> Iterator[StatementCounter]:
    counter = StatementCounter(qm.engine)
    yield counter
    counter.remove()


class Waiter(threading.Thread):
    """``qm.get(queue, wait=...)`` in a thread, recording what it got and when."""

    def __init__(self, qm: QueueManager, queue: str, wait: float) -> None:
        super().__init__(daemon=True)
        self.qm, self.queue, self.wait = qm, queue, wait
        self.result: Message | Exception | None = None
        self.finished_at = 0.0

    def run(self) -> None:
        try:
            self.result = self.qm.get(self.queue, wait=self.wait)
        except Exception as exc:
            self.result = exc
        self.finished_at = time.time()


def test_a_put_from_another_thread_wakes_the_getter_promptly(qm, queue):
    started = time.monotonic()
    threading.Timer(0.2, qm.put, args=(queue, Message(body=b"late"))).start()
    got = qm.get(queue, wait=2)
    elapsed = time.monotonic() - started
    assert got.body == b"late"
    assert 0.2 <= elapsed < 0.5


def test_a_put_through_another_queue_manager_in_this_process_wakes_the_getter(qm, queue, engine):
    qm.notifier.fallback_seconds = 30
    other = QueueManager(make_engine(engine.url.render_as_string(hide_password=False)))
    try:
        waiter = Waiter(qm, queue, wait=10)
        waiter.start()
        time.sleep(0.3)
        other.put(queue, Message(body=b"other"))
        put_at = time.time()
        waiter.join(5)
    finally:
        other.close()
    assert isinstance(waiter.result, Message) and waiter.result.body == b"other"
    assert waiter.finished_at - put_at < 0.3


def test_an_empty_queue_raises_2033_after_the_wait(qm, queue):
    started = time.monotonic()
    with pytest.raises(NoMessageAvailable) as caught:
        qm.get(queue, wait=1.2)
    elapsed = time.monotonic() - started
    assert caught.value.reason == 2033
    assert 1.2 <= elapsed < 1.6


def test_no_wait_means_an_immediate_2033(qm, queue):
    started = time.monotonic()
    with pytest.raises(NoMessageAvailable):
        qm.get(queue)
    assert time.monotonic() - started < 0.3


def woken_by(
    qm: QueueManager, worker: Any, args: tuple[Any, ...], queue: str, correl_id: bytes | None = None
) -> tuple[Message, float, float]:
    """Run ``worker(*args, pipe)`` in another process (``tests.queues.workers``), get from
    ``queue`` while it commits; what the getter got, when it woke, when the worker committed."""
    parent, child = SPAWN.Pipe()
    process = SPAWN.Process(target=worker, args=(*args, child))
    process.start()
    try:
        assert parent.poll(30) and parent.recv() == workers.READY
        got = qm.get(queue, wait=10, correl_id=correl_id)
        woke_at = time.time()
        assert parent.poll(10)
        committed_at = parent.recv()
    finally:
        process.join(10)
    assert process.exitcode == 0
    return got, woke_at, committed_at


def test_a_put_from_another_process_wakes_the_getter_promptly(qm, queue, database_url):
    """With the fallback poll pushed out to 30 s, only a notification (LISTEN/NOTIFY on
    PostgreSQL, the data_version watcher on SQLite) can end this wait early."""
    qm.notifier.fallback_seconds = 30
    got, woke_at, committed_at = woken_by(qm, workers.put_after, (database_url, queue, 0.5), queue)
    assert got.body == b"from another process"
    assert woke_at - committed_at < 0.3


def woken_by_unit_of_work(
    qm: QueueManager, database_url: str, getting: str, gets: list[str], puts: list[tuple[str, bytes]]
) -> Message:
    """Wait on ``getting`` (by CorrelId ``REPLY``) while another process commits a unit of
    work; the wait must end with the notification, not the (30 s) fallback poll."""
    qm.notifier.fallback_seconds = 30
    args = (database_url, gets, puts, 0.5)
    got, woke_at, committed_at = woken_by(qm, workers.unit_of_work_after, args, getting, REPLY)
    assert woke_at - committed_at < 0.3
    return got


REPLY = b"reply".ljust(24, b"\0")


def test_a_unit_of_work_putting_on_several_queues_wakes_a_getter_of_each(qm, queue, database_url):
    """On PostgreSQL one depth statement changes both queues and carries the notification."""
    qm.define_queue("OTHER.Q")
    puts = [("OTHER.Q", REPLY), (queue, REPLY)]
    assert woken_by_unit_of_work(qm, database_url, queue, [], puts).correl_id == REPLY
    assert qm.get("OTHER.Q").correl_id == REPLY


def test_a_get_and_a_put_that_leave_the_depth_unchanged_still_wake_the_getter(qm, queue, database_url):
    """No depth change carries this notification: it is sent on its own."""
    qm.put(queue, Message(body=b"request"))
    got = woken_by_unit_of_work(qm, database_url, queue, [queue], [(queue, REPLY)])
    assert got.body == b"from a unit of work"
    assert qm.depth(queue) == 0


@pytest.mark.parametrize(("fallback", "window", "most"), [(1.0, 1.0, 5), (30.0, 0.5, 0)])
def test_an_idle_waiter_does_not_poll_the_database(qm, queue, statements, fallback, window, most):
    """At the default fallback a waiter looks once a second (a handful of statements);
    without the fallback it sends nothing at all while idle."""
    qm.notifier.fallback_seconds = fallback
    waiter = Waiter(qm, queue, wait=10)
    waiter.start()
    time.sleep(0.3)
    statements.count = 0
    time.sleep(window)
    idle = statements.count
    qm.put(queue, Message(body=b"wake up"))
    put_at = time.time()
    waiter.join(5)
    assert isinstance(waiter.result, Message) and waiter.result.body == b"wake up"
    assert waiter.finished_at - put_at < 0.3
    assert idle <= most


# -- the notifier on its own -------------------------------------------------------------------


@pytest.fixture
def notifier() -> Iterator[ArrivalNotifier]:
    engine = make_engine("sqlite://")
    arrivals = ArrivalNotifier(engine, fallback_seconds=0.2)
    yield arrivals
    arrivals.close()
    engine.dispose()


def test_token_changes_only_for_announced_queues(notifier):
    a, b = notifier.token(["A"]), notifier.token(["B"])
    notifier.announce(["A"])
    assert notifier.token(["A"]) != a
    assert notifier.token(["B"]) == b


def test_announce_everything_changes_every_token(notifier):
    notifier.announce(["A"])
    a, ab, nothing = notifier.token(["A"]), notifier.token(["A", "B"]), notifier.token([])
    notifier.announce_everything()
    assert notifier.token(["A"]) == a + 1
    assert notifier.token(["A", "B"]) == ab + 1
    assert notifier.token([]) == nothing + 1


def test_wait_returns_at_once_when_the_token_is_stale(notifier):
    token = notifier.token(["A"])
    notifier.announce(["A"])
    started = time.monotonic()
    notifier.wait(["A"], token, 5)
    assert time.monotonic() - started < 0.05


def test_wait_never_blocks_longer_than_the_fallback_slice(notifier):
    started = time.monotonic()
    notifier.wait(["A"], notifier.token(["A"]), 5)
    assert 0.2 <= time.monotonic() - started < 0.4


def test_wait_ends_when_another_thread_announces(notifier):
    notifier.fallback_seconds = 10
    token = notifier.token(["A"])
    started = time.monotonic()
    threading.Timer(0.1, notifier.announce, args=(["A"],)).start()
    notifier.wait(["A"], token, 5)
    assert 0.1 <= time.monotonic() - started < 0.3


def test_announcing_another_queue_does_not_end_the_wait(notifier):
    token = notifier.token(["A"])
    threading.Timer(0.05, notifier.announce, args=(["B"],)).start()
    started = time.monotonic()
    notifier.wait(["A"], token, 5)
    assert time.monotonic() - started >= 0.2


def test_an_observer_takes_the_queues_announced_since_its_last_take(notifier):
    arrivals = notifier.observe()
    notifier.announce(["A", "B"])
    notifier.announce(["B", "C"])
    assert arrivals.take(5) == ({"A", "B", "C"}, False)
    assert arrivals.take(0.05) == (set(), False)  # each announcement is taken once
    notifier.announce_everything()
    notifier.announce(["D"])
    assert arrivals.take(5) == ({"D"}, True)
    arrivals.close()
    notifier.announce(["E"])
    assert arrivals.take(0.05) == (set(), False)  # closed: no longer told


def test_an_observer_waits_for_an_announcement_from_another_thread(notifier):
    arrivals = notifier.observe()
    threading.Timer(0.1, notifier.announce, args=(["A"],)).start()
    started = time.monotonic()
    assert arrivals.take(5) == ({"A"}, False)
    assert 0.1 <= time.monotonic() - started < 2.5  # woken by it, not by the 5 s timeout
    arrivals.close()


def test_the_postgresql_listener_connects_with_the_real_password_to_every_host(monkeypatch):
    """``str(url)`` masks the password as ``***``: the LISTEN connection must not use that. Of a
    primary and its standby, it must try both, and stay off a standby (``target_session_attrs``):
    LISTEN needs the primary."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    tried: list[str] = []
    called = threading.Event()

    def refuse(conninfo: str, **_kwargs: Any) -> None:
        tried.append(conninfo)
        called.set()
        raise psycopg.OperationalError("refused by the test")

    monkeypatch.setattr(psycopg, "connect", refuse)
    engine = make_engine("postgresql://app:s3cret@/broker?host=db1.invalid:5432&host=db2.invalid:5433")
    arrivals = ArrivalNotifier(engine, fallback_seconds=0.05)
    try:
        arrivals.wait(["A"], arrivals.token(["A"]), 0.05)
        assert called.wait(5)
    finally:
        arrivals.close()
        engine.dispose()
    assert conninfo_to_dict(tried[0]) == {
        "host": "db1.invalid,db2.invalid",
        "port": "5432,5433",
        "dbname": "broker",
        "user": "app",
        "password": "s3cret",
        "target_session_attrs": "read-write",
    }


def test_a_commit_before_the_sqlite_watcher_starts_is_not_missed(tmp_path):
    """The waiter looked, another process committed, then the watcher took its first reading:
    that commit must still end the wait."""
    engine = make_engine(f"sqlite:///{tmp_path / 'watched.db'}")
    arrivals = ArrivalNotifier(engine, fallback_seconds=30)
    try:
        token = arrivals.token(["A"])
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE t (x)")
        started = time.monotonic()
        arrivals.wait(["A"], token, 5)
        assert time.monotonic() - started < 0.5
    finally:
        arrivals.close()
        engine.dispose()


# -- SQLite's wake-up sockets ------------------------------------------------------------------


@pytest.fixture
def sqlite_qm(tmp_path: Path) -> Iterator[QueueManager]:
    """A queue manager on a SQLite file whose data_version reading is pushed out to 30 s:
    only a datagram can wake its waiters promptly."""
    url = f"sqlite:///{tmp_path / 'broker.db'}"
    engine = make_engine(url)
    migrations.upgrade(engine)
    QueueManager.create(engine, "QM1")
    qm = QueueManager(engine)
    qm.notifier = ArrivalNotifier(engine, sqlite_backstop_seconds=30, fallback_seconds=30)
    qm.define_queue("APP.Q")
    yield qm
    qm.close()


def wake_directory(qm: QueueManager) -> Path:
    return Path(f"{qm.engine.url.database}-wake")


def put_from_another_process(qm: QueueManager) -> tuple[Message, float, float]:
    """What a getter waiting on APP.Q got, when it woke, and when the other process committed."""
    return woken_by(qm, workers.put_after, (str(qm.engine.url), "APP.Q", 0.5), "APP.Q")


def test_a_put_from_another_process_wakes_a_sqlite_getter_through_its_socket(sqlite_qm):
    got, woke_at, committed_at = put_from_another_process(sqlite_qm)
    assert got.body == b"from another process"
    assert woke_at - committed_at < 0.3
    sockets = list(wake_directory(sqlite_qm).iterdir())
    assert len(sockets) == 1  # the getter's; the putter never waited, so it bound none


def test_without_a_socket_the_watcher_polls_as_before(sqlite_qm, tmp_path):
    """A wake-up directory that cannot be made (here a file is in its way): the watcher
    reads data_version every 2 ms instead, whatever the backstop says."""
    (tmp_path / "broker.db-wake").write_text("in the way")
    got, woke_at, committed_at = put_from_another_process(sqlite_qm)
    assert got.body == b"from another process"
    assert woke_at - committed_at < 0.3


def test_a_dead_processes_socket_is_removed_by_the_next_commit(sqlite_qm):
    sockets = WakeSockets(str(wake_directory(sqlite_qm)))
    sockets.directory.mkdir(exist_ok=True)
    dead = sockets.directory / "99999-dead.sock"
    orphan = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    orphan.bind(str(dead))
    orphan.close()  # bound and gone, as after a SIGKILL: the file stays, nobody reads it
    sqlite_qm.put("APP.Q", Message(body=b"m"))
    assert not dead.exists()


def test_a_socket_deep_in_the_file_system_is_reached_through_proc(tmp_path):
    """An address may not pass 108 bytes: a deeper directory still gets its sockets."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    listening, sending = WakeSockets(str(deep / "broker.db-wake")), WakeSockets(str(deep / "broker.db-wake"))
    bound = listening.bind()
    assert bound is not None
    listener, name = bound
    try:
        assert len(str(listening.directory / name)) > 108
        listener.settimeout(5)
        sending.send(["B.Q", "A.Q"], own=None)
        assert listener.recv(100) == b"A.Q,B.Q"
    finally:
        listener.close()
        listening.close()
        sending.close()


def test_a_closed_notifier_takes_its_socket_away(sqlite_qm):
    waiter = Waiter(sqlite_qm, "APP.Q", wait=0.2)
    waiter.start()
    waiter.join(5)
    directory = wake_directory(sqlite_qm)
    assert len(list(directory.iterdir())) == 1
    sqlite_qm.notifier.close()
    deadline = time.monotonic() + 5
    while list(directory.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not list(directory.iterdir())


def test_the_arrival_counters_stay_the_same_size_however_many_queues_come_and_go(engine):
    """A process that sees a million session queues come and go keeps 4,096 counters; a waiter
    still wakes for its own queue, and only queues sharing its counter wake it besides."""
    notifier = ArrivalNotifier(engine)
    notifier.announce(f"SYSTEM.MQTT.{n:036X}" for n in range(20_000))
    assert len(notifier._versions) == COUNTER_GROUPS
    token = notifier.token(["APP.Q"])
    others = [f"OTHER.{n}" for n in range(50) if _group(f"OTHER.{n}") != _group("APP.Q")]
    notifier.announce(others)
    assert notifier.token(["APP.Q"]) == token  # nothing of its own: it sleeps on
    notifier.announce(["APP.Q"])
    assert notifier.token(["APP.Q"]) != token
    notifier.close()
