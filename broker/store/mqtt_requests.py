"""Operators' requests to the MQTT listeners, through the database (``psb_mqtt_requests``).

The admin API and the CLI may run in other processes than the listener (``broker api``
beside ``broker serve --mqtt``), and more than one listener may serve one database, so a
request to disconnect a client names it by client id in a row; every listener reads the
pending rows a few times a second (one indexed read of a table that is almost always empty)
and takes those that are for it: a request names the listener process (of whichever node)
that held the client when it was made, and that one carries it out; a session deletion of an
offline session names none, and any listener may. Taking is a DELETE
... RETURNING, so of several listeners exactly one carries a request out. A request that no
listener takes within :data:`LAPSE_MS` is dropped by the next that looks: nobody held the
client when it was asked, and a later connection must not be cut for it.

Kept small and generic on purpose: a request names a client id and an action, so client-id
takeover across listener processes can use the same rows.

:func:`disconnect` and :func:`delete_session` are what the API and the CLI call: they check
the session, write the request and (for a deletion) wait until the listener has carried it
out, raising :class:`~queues.errors.MQError` subclasses with the MQ reason an API problem or a
CLI error reports.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, delete, insert, select

from broker.store import mqtt
from broker.store.schema import mqtt_requests
from queues import QueueManager
from queues.errors import MQError
from queues.ids import now_ms
from queues.reasons import Reason
from queues.sql import among

DISCONNECT = "disconnect"
DELETE = "delete"
LAPSE_MS = 10_000  # a request no listener took by then is dropped
POLL_SECONDS = 0.1  # how often a caller waiting for a deletion looks
DELETE_TIMEOUT = 10.0
MAX_REASON = 128


class NoSuchSession(MQError):
    """No stored session (or no connected client) has this client id: 2085, a 404."""

    def __init__(self, client_id: str, *, connected: bool = False) -> None:
        what = "connected MQTT client" if connected else "MQTT session"
        super().__init__(Reason.MQRC_UNKNOWN_OBJECT_NAME, f"no {what} with client id {client_id!r}")


class ListenerNotAnswering(MQError):
    """No MQTT listener carried the request out in time: 2059, a 503."""

    def __init__(self, client_id: str, seconds: float, *, withdrawn: bool) -> None:
        outcome = (
            "no MQTT listener took the request (is 'broker serve --mqtt' running?); it was withdrawn"
            if withdrawn
            else "a listener took the request but has not finished it"
        )
        super().__init__(
            Reason.MQRC_Q_MGR_NOT_AVAILABLE,
            f"the session of {client_id!r} was not deleted within {seconds:g} s: {outcome}",
        )


@dataclass(frozen=True, slots=True)
class Request:
    id: int
    client_id: str
    action: str  # DISCONNECT or DELETE
    reason: str
    requested_at: int
    owner: str = ""  # the listener process to carry it out ("": any)


# -- the rows -------------------------------------------------------------------------------


def request(conn: Connection, client_id: str, action: str, reason: str, now: int, owner: str = "") -> int:
    """Ask the listener process ``owner`` (any, if "") to ``action`` the client ``client_id``;
    returns the request's id."""
    values = {"client_id": client_id, "action": action, "reason": reason[:MAX_REASON], "requested_at": now}
    inserted = conn.execute(
        insert(mqtt_requests).values({**values, "owner": owner}).returning(mqtt_requests.c.id)
    )
    return int(inserted.scalar_one())


def pending(conn: Connection) -> list[Request]:
    """Every request not taken yet, oldest first."""
    rows = conn.execute(select(mqtt_requests).order_by(mqtt_requests.c.id))
    return [Request(r.id, r.client_id, r.action, r.reason, r.requested_at, r.owner) for r in rows]


def take(conn: Connection, requests: Sequence[Request]) -> list[Request]:
    """Take ``requests`` off the table: those returned are this caller's to carry out
    (another listener may have taken some first)."""
    if not requests:
        return []
    statement = delete(mqtt_requests).where(among(conn, mqtt_requests.c.id, (r.id for r in requests)))
    taken = set(conn.execute(statement.returning(mqtt_requests.c.id)).scalars())
    return [r for r in requests if r.id in taken]


def take_requests(qm: QueueManager, wanted: Callable[[Request], bool]) -> list[Request]:
    """The pending requests ``wanted`` says are this listener's, taken; lapsed ones are
    dropped. One read when there are none (the usual case), a write only when there are."""
    with qm.reading() as conn:
        found = pending(conn)
    if not found:
        return []
    lapsed = now_ms() - LAPSE_MS
    mine = [r for r in found if wanted(r)]
    stale = [r for r in found if r not in mine and r.requested_at < lapsed]
    with qm.unit_of_work() as uow:
        take(uow.connection, stale)
        return take(uow.connection, mine)


# -- what operators call ----------------------------------------------------------------------


def disconnect(qm: QueueManager, client_id: str, reason: str) -> mqtt.StoredSession:
    """Ask the listener holding ``client_id`` to close its connection (its will is published:
    the client did not DISCONNECT); :class:`NoSuchSession` if no client with that id is
    connected. Returns at once: the listener acts within a fraction of a second."""
    with qm.unit_of_work() as uow:
        stored = mqtt.find_session(uow.connection, client_id)
        if stored is None or not stored.online:
            raise NoSuchSession(client_id, connected=True)
        request(uow.connection, client_id, DISCONNECT, reason, now_ms(), stored.owner)
    return stored


def delete_session(
    qm: QueueManager, client_id: str, reason: str, *, timeout: float = DELETE_TIMEOUT
) -> mqtt.StoredSession:
    """Have a listener delete the session of ``client_id`` (its connection closed first, if
    connected) with its subscriptions, queue and in-flight state, and wait until it has;
    :class:`NoSuchSession` if there is none, :class:`ListenerNotAnswering` (the request
    withdrawn) if no listener did it within ``timeout`` seconds. Returns the session as it was."""
    with qm.unit_of_work() as uow:
        stored = mqtt.find_session(uow.connection, client_id)
        if stored is None:
            raise NoSuchSession(client_id)
        holder = stored.owner if stored.online else ""
        request_id = request(uow.connection, client_id, DELETE, reason, now_ms(), holder)
    if _carried_out(qm, stored, request_id, timeout):
        return stored
    with qm.unit_of_work() as uow:
        withdrawn = take(uow.connection, [Request(request_id, client_id, DELETE, reason, 0)])
    if withdrawn or not _carried_out(qm, stored, request_id, timeout):
        raise ListenerNotAnswering(client_id, timeout, withdrawn=bool(withdrawn))
    return stored  # taken at the last moment, and carried out since


def _carried_out(qm: QueueManager, stored: mqtt.StoredSession, request_id: int, timeout: float) -> bool:
    """Whether within ``timeout`` seconds the request was taken and the session is gone (or
    is a new one: its client connected again after the deletion)."""
    deadline = time.monotonic() + timeout
    while True:
        with qm.reading() as conn:
            now = mqtt.find_session(conn, stored.client_id)
            waiting = any(r.id == request_id for r in pending(conn))
        if not waiting and (now is None or now.created_at != stored.created_at):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_SECONDS)
