"""Claims (``queues.claims``): a batch marked in one unit of work and consumed in another.

The statements run on both dialects; whether another claimant is alive is a file lock beside a
SQLite database, so the tests with several claimants run on SQLite, where routers claim this way.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import Engine

from queues import ClaimLost, Message, NoMessageAvailable, QueueManager, sql
from queues.claims import Claim
from tests.conftest import DIALECTS
from tests.e2e.harness import emptied_database, shared_database

Q = "CLAIMED.Q"


# One database per dialect for the module, emptied before each test (see tests.e2e.harness).
shared = pytest.fixture(scope="module", params=DIALECTS)(shared_database)
engine = pytest.fixture(emptied_database)


@pytest.fixture
def queue(qm: QueueManager) -> str:
    qm.define_queue(Q)
    qm.put_many([(Q, Message(body=f"m{n}".encode())) for n in range(5)])
    return Q


# Whether another claimant runs is a file lock beside a SQLite database.
sqlite_only = pytest.mark.parametrize("shared", ["sqlite"], indirect=True)


@pytest.fixture
def other(engine: Engine, queue: str) -> Iterator[QueueManager]:
    """A second router's queue manager on the same database (a claimant of its own)."""
    with QueueManager(engine) as second:
        yield second


def claim(qm: QueueManager, limit: int, queue: str = Q) -> Claim:
    with qm.unit_of_work() as uow:
        return uow.claim_batch(queue, limit)


def consume(qm: QueueManager, claimed: Claim) -> None:
    with qm.unit_of_work() as uow:
        uow.consume(claimed)


def held_back(action: Callable[[], object], release: Callable[[], object]) -> None:
    """``action`` does not finish until ``release`` has run, and then it does."""
    finished = threading.Event()
    thread = threading.Thread(target=lambda: (action(), finished.set()))
    thread.start()
    time.sleep(0.05)
    assert not finished.is_set()
    release()
    thread.join(5)
    assert finished.is_set()


def bodies(messages: object) -> list[bytes]:
    return [m.body for m in messages]  # type: ignore[attr-defined]


def test_claimed_messages_stay_on_the_queue_but_no_other_getter_takes_them(qm, queue):
    claimed = claim(qm, 3)

    assert bodies(claimed.messages) == [b"m0", b"m1", b"m2"]
    assert qm.depth(queue) == 5  # still there, as a PostgreSQL router's locked rows are
    assert [b.message.body for b in qm.browse(queue, limit=10)] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert qm.get(queue).body == b"m3"

    consume(qm, claimed)
    assert qm.depth(queue) == 1
    assert qm.get(queue).body == b"m4"
    with pytest.raises(NoMessageAvailable):
        qm.get(queue)


def test_a_claim_given_back_is_next_again_in_its_place(qm, queue):
    claimed = claim(qm, 2)
    qm.release_claim(claimed)

    assert bodies(claim(qm, 5).messages) == [b"m0", b"m1", b"m2", b"m3", b"m4"]


def test_a_claimants_own_leftovers_are_given_back_at_its_next_claim(qm, queue):
    """One claiming loop per queue manager: marks of its own found at a claim are from a batch
    that failed before it could give them back, and are routed again first."""
    first = claim(qm, 2)
    second = claim(qm, 2)

    assert bodies(second.messages) == [b"m0", b"m1"]
    assert second.turn == first.turn  # nothing else was outstanding
    consume(qm, second)
    with pytest.raises(ClaimLost):
        consume(qm, first)


def test_a_claim_passes_over_the_messages_it_is_told_to_skip(qm, queue):
    first = claim(qm, 2)
    qm.release_claim(first)
    with qm.unit_of_work() as uow:
        passing = uow.claim_batch(queue, 2, skip=first.ids)

    assert bodies(passing.messages) == [b"m2", b"m3"]
    assert qm.get(queue).body == b"m0"  # still there, for every other getter


def test_a_claim_whose_messages_went_meanwhile_is_lost_and_writes_nothing(qm, engine, queue):
    claimed = claim(qm, 3)
    with engine.begin() as conn:  # an operator clears one of them
        sql.delete_messages_by_id(conn, [claimed.ids[1]])

    with pytest.raises(ClaimLost) as lost, qm.unit_of_work() as uow:
        uow.consume(claimed)
        uow.put("SYSTEM.DEAD.LETTER.QUEUE", Message(body=b"an effect of the batch"))

    assert lost.value.reason == 2003  # MQRC_BACKED_OUT
    assert qm.depth("SYSTEM.DEAD.LETTER.QUEUE") == 0


@sqlite_only
def test_another_live_claimants_claims_are_left_alone_and_turns_rise(qm, other, queue):
    mine = claim(qm, 2)
    theirs = claim(other, 2)

    assert bodies(theirs.messages) == [b"m2", b"m3"]
    assert theirs.turn > mine.turn
    consume(qm, mine)
    consume(other, theirs)
    assert qm.depth(queue) == 1


@sqlite_only
def test_a_later_turn_waits_for_the_earlier_one_to_be_consumed(qm, other, queue):
    first = claim(other, 2)
    second = claim(qm, 2)

    held_back(lambda: qm.await_claim_turn(second), lambda: consume(other, first))
    consume(qm, second)
    assert qm.get(queue).body == b"m4"


@sqlite_only
def test_a_turn_whose_live_owner_makes_no_progress_is_taken_from_it(
    qm: QueueManager, other: QueueManager, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A stopped router holds its lock file but shows no progress: past the turn timeout the
    claim behind it takes its messages back (and gives back its own, so theirs go first)."""
    qm.turn_timeout = 1.5
    theirs = claim(other, 2)
    mine = claim(qm, 2)

    with pytest.raises(ClaimLost):
        qm.await_claim_turn(mine)

    waiting, taken = (
        [r for r in caplog.records if r.msg == msg]
        for msg in ("waiting for an earlier claim turn", "claim turn taken over: its owner made no progress")
    )
    assert [(r.queue, r.owner) for r in waiting] == [(queue, other.claimant.token)]  # type: ignore[attr-defined]
    assert [(r.owner, r.messages) for r in taken] == [(other.claimant.token, 2)]  # type: ignore[attr-defined]
    assert taken[0].idle_seconds >= 1.5  # type: ignore[attr-defined]
    qm.release_claim(mine)
    assert bodies(claim(qm, 5).messages) == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    with pytest.raises(ClaimLost):  # should the stopped router carry on, it writes nothing
        consume(other, theirs)


@sqlite_only
def test_a_live_owner_that_shows_progress_keeps_its_turn(
    qm: QueueManager, other: QueueManager, queue: str
) -> None:
    qm.turn_timeout = other.turn_timeout = 0.5  # the same setting for every router
    theirs = claim(other, 2)
    mine = claim(qm, 2)
    routing = threading.Event()
    routing.set()

    def route_slowly() -> None:  # a long batch: four turn timeouts, showing progress
        with other.unit_of_work(read_only=True) as reader:
            while routing.is_set():
                reader.show_progress()
                time.sleep(0.01)

    router = threading.Thread(target=route_slowly)
    router.start()
    held_back(
        lambda: qm.await_claim_turn(mine), lambda: (time.sleep(2), routing.clear(), consume(other, theirs))
    )
    router.join()
    consume(qm, mine)
    assert qm.depth(queue) == 1


def _claim_and_die(url: str, ready: object) -> None:
    qm = QueueManager.connect(url)
    with qm.unit_of_work() as uow:
        uow.claim_batch(Q, 2)
    ready.set()  # type: ignore[attr-defined]
    time.sleep(60)  # killed here, its claim outstanding


@pytest.fixture
def dead(engine: Engine, queue: str) -> Iterator[None]:
    """A router process that claimed the first two messages, then was killed."""
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    process = context.Process(target=_claim_and_die, args=(str(engine.url), ready))
    process.start()
    assert ready.wait(60)
    process.kill()
    process.join()
    yield


@sqlite_only
def test_a_dead_claimants_messages_are_given_back_at_the_next_claim(qm, queue, dead):
    assert qm.get(queue).body == b"m2"  # a plain get skips claims, and gives none back
    assert bodies(claim(qm, 5).messages) == [b"m0", b"m1", b"m3", b"m4"]


@sqlite_only
def test_a_job_taking_a_queue_over_gives_a_dead_claimants_messages_back(qm, queue, dead):
    qm.await_claims(queue)
    assert qm.get(queue).body == b"m0"


@sqlite_only
def test_a_turn_behind_a_dead_claimant_is_lost_so_that_its_messages_go_first(qm, engine, queue):
    with QueueManager(engine) as doomed:
        earlier = claim(doomed, 2)
        later = claim(qm, 2)
        assert later.turn > earlier.turn
    # closed without consuming: its lock file is gone, as a killed process's lock is

    with pytest.raises(ClaimLost):
        qm.await_claim_turn(later)
    qm.release_claim(later)
    assert bodies(claim(qm, 5).messages) == [b"m0", b"m1", b"m2", b"m3", b"m4"]


@sqlite_only
def test_a_job_taking_a_queue_over_waits_for_live_claims(qm, other, queue):
    theirs = claim(other, 1)

    held_back(lambda: qm.await_claims(queue), lambda: consume(other, theirs))
    assert qm.depth(queue) == 4
    assert qm.get(queue).body == b"m1"
