"""The lease on a stream queue: which router may route it.

A routing service and a Spark job must never both route one stream queue:
both would deliver the same publications. The resource ``stream:<queue>`` in
``psb_leases`` says who may, and until when. The protocol:

* The routing service, inside every unit of work on a stream queue and before
  it claims anything, reads the lease row with a shared row lock (``FOR
  SHARE`` on PostgreSQL) and skips the queue when another owner holds an
  unexpired lease. The shared lock is held until that batch commits.
* The Spark job takes the lease with an exclusive row lock (``FOR UPDATE``),
  which waits for every service batch holding the shared lock: when the job
  owns the lease, no service batch on the stream is in flight and none will
  start, so the watermark it reads next covers exactly what is left.
* The row must exist for there to be something to lock: whoever finds it
  missing creates it free (``INSERT ... ON CONFLICT DO NOTHING``) in its own
  transaction. A service batch that creates it holds the new row's index entry
  until it commits, so a job creating it at the same time waits for that batch
  just the same.
* On SQLite the lock clauses compile to nothing: the writer lock serialises the
  lease check with the claim it precedes, but a router routes its claimed batch
  after that transaction (``queues.claims``), so the job then waits for the
  running routers' claims to be consumed (:func:`take_over`).

The job renews the lease while it runs; a renewal or a partition's commit that
finds the lease lapsed fails the job rather than risk routing what a service
may have routed meanwhile. A job killed outright leaves the lease to lapse
(``DEFAULT_LEASE_MS``), after which services route the stream again. Expiry is
judged on each process's own clock: keep clocks within a fraction of the lease.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, bindparam, select, update

from broker.store.schema import leases
from queues import QueueManager, sql
from queues.errors import MQError
from queues.ids import now_ms
from queues.owners import dead_here
from queues.reasons import Reason
from queues.sql import insert_new

DEFAULT_LEASE_MS = 60_000
FREE = ""


class LeaseError(MQError):
    """The lease is held by someone else, or this owner lost it."""

    def __init__(self, detail: str) -> None:
        super().__init__(Reason.MQRC_OBJECT_IN_USE, detail)


def stream_resource(queue: str) -> str:
    return f"stream:{queue}"


_lease_row = select(leases.c.owner, leases.c.until).where(leases.c.resource == bindparam("resource"))
# Built once: a router runs the shared one in every batch.
_LOCKS = {True: _lease_row.with_for_update(), False: _lease_row.with_for_update(read=True)}


def _locked(conn: Connection, resource: str, *, exclusive: bool) -> tuple[str, int]:
    """(owner, until) of ``resource``, its row locked until the transaction ends."""
    rows = _read(conn, resource, exclusive)
    if not rows:
        free = {"resource": resource, "owner": FREE, "until": 0}
        conn.execute(insert_new(conn, leases, ("resource",)), free)
        rows = _read(conn, resource, exclusive)
    ((owner, until),) = rows
    return owner, until


def _read(conn: Connection, resource: str, exclusive: bool) -> list[tuple[Any, ...]]:
    """The lease row, locked: compiled once, since a router reads it in every batch."""
    return sql.fetch_cached(conn, ("lease", exclusive), lambda: _LOCKS[exclusive], {"resource": resource})


def ensure(conn: Connection, resource: str) -> None:
    """Create ``resource``'s lease row, free, if it is missing: a router does this for its
    streams at start, so that each batch then costs one read of an existing row."""
    conn.execute(insert_new(conn, leases, ("resource",)), {"resource": resource, "owner": FREE, "until": 0})


def holder(conn: Connection, resource: str, now: int) -> str | None:
    """Who holds an unexpired lease on ``resource`` (None: nobody). Called by a router
    inside its unit of work: the shared lock makes a job's :func:`take` wait for it."""
    owner, until = _locked(conn, resource, exclusive=False)
    return owner if _live(owner, until, now) else None


def _live(owner: str, until: int, now: int) -> bool:
    """Whether ``owner`` holds the lease: unexpired, and not a dead process of this machine
    (a job whose driver was killed frees its stream at once here, by the clock elsewhere)."""
    return owner != FREE and until > now and not dead_here(owner)


def take(conn: Connection, resource: str, owner: str, now: int, lease_ms: int = DEFAULT_LEASE_MS) -> None:
    """Take the lease for ``owner`` until ``now + lease_ms``; 2042 while another holds it."""
    current, until = _locked(conn, resource, exclusive=True)
    if current != owner and _live(current, until, now):
        raise LeaseError(f"{resource} is leased by {current} for another {until - now} ms")
    conn.execute(
        update(leases).where(leases.c.resource == resource).values(owner=owner, until=now + lease_ms)
    )


def take_over(qm: QueueManager, stream: str, owner: str, lease_ms: int = DEFAULT_LEASE_MS) -> None:
    """Take ``stream``'s lease for ``owner`` and return once no router is routing any of it."""
    with qm.engine.begin() as conn:
        take(conn, stream_resource(stream), owner, now_ms(), lease_ms)
    qm.await_claims(stream)


def renew(conn: Connection, resource: str, owner: str, now: int, lease_ms: int = DEFAULT_LEASE_MS) -> None:
    """Extend ``owner``'s lease; 2042 if it lapsed (a router may have routed since)."""
    stmt = (
        update(leases)
        .where(leases.c.resource == resource, leases.c.owner == owner, leases.c.until > now)
        .values(until=now + lease_ms)
    )
    if conn.execute(stmt).rowcount != 1:
        raise LeaseError(f"the lease on {resource} lapsed or was taken over")


def verify(conn: Connection, resource: str, owner: str, now: int) -> None:
    """Lock the lease for the rest of the transaction and check ``owner`` still holds it."""
    current, until = _locked(conn, resource, exclusive=True)
    if current != owner or until <= now:
        raise LeaseError(f"the lease on {resource} lapsed or was taken over")


def release(conn: Connection, resource: str, owner: str) -> None:
    stmt = update(leases).where(leases.c.resource == resource, leases.c.owner == owner)
    conn.execute(stmt.values(owner=FREE, until=0))
