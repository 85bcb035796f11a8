"""Claims: how a SQLite router takes a batch without holding the one write lock while it routes.

SQLite lets one transaction write at a time. A router that claimed its batch, routed
it and wrote its effects in one transaction held that lock for the whole batch, so
publishers waited for the routing, and a second router could only wait too. Instead a
SQLite router works in three steps:

1. **Claim**, in a short transaction: mark the next messages of the queue as its own
   (``claimed_by``, ``claim_turn``) and commit. Other getters skip marked messages, as
   PostgreSQL's ``SKIP LOCKED`` skips a router's locked rows.
2. **Route** the batch holding no lock; publishers and other routers write meanwhile.
3. **Consume**, in a second transaction: remove the marked messages and write every
   effect; all of it commits, or none of it.

Exactly once: a router that dies between 1 and 3 leaves marks behind and nothing else.
Each claimant holds an exclusive ``flock`` on a file of its own beside the database
(``<database>-claims/<token>``) for its life; the kernel drops it when the process
dies, so the next claimant finds the marks' owner gone, unmarks them, and the messages
are routed again. Removal checks that every marked message is still there: one
purged or reclaimed meanwhile makes the consume fail (:class:`ClaimLost`), and the
batch is claimed afresh.

Order: batches commit in claim order. A claim draws a turn above every outstanding
one on its queue, and its consume waits until no lower turn is outstanding. If the
owner of a lower turn is dead, the waiting claim gives its messages back too, so that
the dead router's (earlier) messages are claimed first again.

Progress: a live owner that makes no progress (a stopped or hung process) would hold every
turn behind its own for as long as it stays so. A claimant touches its lock file whenever it
claims, routes or waits (:meth:`Claimant.touch`); a waiting claim whose earlier owner's file
has not been touched within the turn timeout takes its claims from it (:class:`TurnStalled`:
they are given back, and the waiting claim gives back its own too, as behind a dead owner).
Should the owner carry on, its consume finds its messages gone and writes nothing.

One claiming loop per queue manager: a claimant's own marks found at its next claim
are left over from a batch that failed, and are given back.
"""

from __future__ import annotations

import fcntl
import logging
import os
import secrets
import time
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from dataclasses import dataclass

from sqlalchemy import Connection

from queues import sql
from queues.companions import companion
from queues.errors import MQError
from queues.message import Message
from queues.reasons import Reason

TURN_POLL_SECONDS = 0.0005
TURN_TIMEOUT_SECONDS = 10.0  # how long an owner may go without progress before it loses its turn
WAIT_LOGGED_SECONDS = 1.0  # a wait for a turn this long is logged
TOUCH_SECONDS = 0.25  # how often at most a claimant shows its progress

log = logging.getLogger(__name__)


class ClaimLost(MQError):
    """The claim can no longer be consumed as it was routed: claim the queue again."""

    def __init__(self, detail: str) -> None:
        super().__init__(Reason.MQRC_BACKED_OUT, detail)


class TurnStalled(ClaimLost):
    """The owner of an earlier turn has made no progress within the turn timeout: its claims
    are to be taken from it (``QueueManager.await_claim_turn``)."""

    def __init__(self, queue: str, owner: str, idle: float) -> None:
        super().__init__(
            f"the router that claimed {queue} before this batch made no progress for {idle:.1f} s"
        )
        self.queue = queue
        self.owner = owner
        self.idle = idle


@dataclass(frozen=True, slots=True)
class Claim:
    """A batch marked as one claimant's, in get order."""

    queue: str
    owner: str
    turn: int
    ids: tuple[int, ...]
    messages: tuple[Message, ...]

    @property
    def behind(self) -> bool:
        """Whether another claimant's turn was outstanding when this one was drawn
        (:func:`mark` draws turn 1 only when none was)."""
        return self.turn > 1


class Claimant:
    """A queue manager's identity as a claimant, and the file lock that shows it is alive."""

    def __init__(self, database: str | None) -> None:
        self.token = f"{os.getpid()}-{secrets.token_hex(4)}"
        self._directory = companion(database, "-claims")
        self._fd: int | None = None
        self._touched = 0.0
        if self._directory is not None:
            os.makedirs(self._directory, exist_ok=True)
            self._fd = os.open(os.path.join(self._directory, self.token), os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(self._fd, fcntl.LOCK_EX)

    def touch(self) -> None:
        """Show that this claimant is making progress (its lock file's modification time);
        cheap enough to call for every message routed."""
        now = time.monotonic()
        if self._fd is not None and now - self._touched >= TOUCH_SECONDS:
            os.utime(self._fd)
            self._touched = now

    def idle_seconds(self, owner: str) -> float:
        """How long ago ``owner`` last showed progress (0 for an owner without a lock file)."""
        if self._directory is None:
            return 0.0
        try:
            touched = os.stat(os.path.join(self._directory, os.path.basename(owner))).st_mtime
        except FileNotFoundError:
            return 0.0
        return max(0.0, time.time() - touched)

    def alive(self, owner: str) -> bool:
        """Whether ``owner`` still runs. Without a database file (an in-memory database,
        or PostgreSQL, whose routers do not claim this way) the only claimant known to run
        is this one."""
        if owner == self.token:
            return True
        if self._directory is None:
            return False
        path = os.path.join(self._directory, os.path.basename(owner))
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        os.unlink(path)  # its owner is gone: tidy up after it
        return False

    def close(self) -> None:
        if self._fd is not None and self._directory is not None:
            os.unlink(os.path.join(self._directory, self.token))
            os.close(self._fd)
            self._fd = None


def mark(
    conn: Connection, claimant: Claimant, queue: str, limit: int, now: int, skip: Collection[int] = ()
) -> tuple[int, list[tuple[object, ...]]]:
    """Mark up to ``limit`` messages of ``queue`` (none whose id is in ``skip``) in a turn
    above every outstanding one: (turn, rows). What dead claimants left marked, and this
    one's own leftovers (from a batch that failed), are given back first. Turn 1 means no
    other turn was outstanding."""
    claimant.touch()
    highest = 0
    for owner, _low, high in live_claims(conn, claimant, queue):
        if owner == claimant.token:
            sql.release_claims(conn, queue, owner)
        else:
            highest = max(highest, high)
    return highest + 1, sql.mark_claims(conn, queue, limit, now, claimant.token, highest + 1, skip)


def live_claims(conn: Connection, claimant: Claimant, queue: str) -> list[tuple[str, int, int]]:
    """(owner, lowest turn, highest turn) of the running claimants' claims on ``queue``
    (this one's included); the claims of dead ones are given back."""
    live = []
    for owner, low, high in sql.claimants(conn, queue):
        if claimant.alive(owner):
            live.append((owner, low, high))
        else:
            sql.release_claims(conn, queue, owner)
    return live


def await_turn(
    claimant: Claimant,
    claim: Claim,
    reading: Callable[[], AbstractContextManager[Connection]],
    timeout: float = TURN_TIMEOUT_SECONDS,
) -> None:
    """Return once no lower turn than ``claim``'s is outstanding on its queue; raise
    :class:`ClaimLost` if a lower one's owner is dead, :class:`TurnStalled` if one has made
    no progress for ``timeout`` seconds (the caller gives its claim back either way).
    ``reading`` opens a read-only transaction (``QueueManager.reading``). A claim drawn
    when no other was outstanding returns at once: every later turn is higher."""
    started = time.monotonic()
    logged = False
    while claim.behind:
        with reading() as conn:
            earlier = [
                owner
                for owner, low, _high in sql.claimants(conn, claim.queue)
                if owner != claim.owner and low < claim.turn
            ]
        if not earlier:
            return
        if not all(claimant.alive(owner) for owner in earlier):
            raise ClaimLost(f"a router that claimed {claim.queue} before this batch has died")
        idle, owner = max((claimant.idle_seconds(owner), owner) for owner in earlier)
        if idle > timeout:
            raise TurnStalled(claim.queue, owner, idle)
        if not logged and time.monotonic() - started >= WAIT_LOGGED_SECONDS:
            log.warning(
                "waiting for an earlier claim turn",
                extra={"queue": claim.queue, "owner": owner, "idle_seconds": round(idle, 1)},
            )
            logged = True
        claimant.touch()  # waiting is progress: the turns behind this one must not take it
        time.sleep(TURN_POLL_SECONDS)


def consume(conn: Connection, claim: Claim) -> None:
    """Remove the claimed messages in the caller's transaction; :class:`ClaimLost` if any
    of them is gone (purged, expired, or reclaimed from this claimant)."""
    removed = sql.consume_claims(conn, claim.queue, claim.owner, claim.turn)
    if removed != len(claim.ids):
        raise ClaimLost(
            f"{len(claim.ids) - removed} of the {len(claim.ids)} messages claimed on {claim.queue} are gone"
        )
