"""Client-id takeover from another listener process, of this node or another.

Within one process a second connection with a client id closes the first and waits for it to
end (``Host.take_over``). A session another process holds is found when the gateway
opens it (``gateway.Held``): the database carries the request then, in the table operators'
disconnects use (``broker.store.mqtt_requests``), addressed to the holder, which closes that
connection (its will published, as for any takeover) and marks the session offline (or ends
a clean one). The new connection waits for that, then opens the session. A holder declared
dead (or a process of this node that no longer exists) cannot answer: its sessions are
released by whoever finds it dead first (``broker.service.mqtt.membership``), the wait ends
with them. A holder that neither answers nor is declared dead in
``Membership.takeover_seconds`` leaves the session where it is: the client is told to come
back later (CONNACK 3), so that no session ever has two connections.
"""

from __future__ import annotations

import asyncio
import logging
import time
from functools import partial
from typing import Any

from broker.service.mqtt.gateway import Batch, Held, Job
from broker.service.mqtt.host import Host
from broker.store import mqtt as sessions
from broker.store import mqtt_requests
from broker.store.mqtt_requests import DISCONNECT, Request
from broker.store.nodes import LeaseLost
from queues.errors import MQError
from queues.reasons import Reason

log = logging.getLogger("broker.mqtt")

POLL_SECONDS = 0.05  # the first looks at the session: a live holder answers within a few
MAX_POLL_SECONDS = 0.5  # a holder that does not is likely dead: a fleet waits, looking less often
REASON = "session taken over by a connection to another listener process"


class TakeoverRefused(MQError):
    """The holder of a session neither let it go nor was declared dead in time."""

    def __init__(self, client_id: str, holder: str, seconds: float) -> None:
        super().__init__(
            Reason.MQRC_Q_MGR_NOT_AVAILABLE,
            f"the session of {client_id!r} is still held by {holder} after {seconds:g} s",
        )


# A connection whose session could not be opened for one of these is told to come back later.
UNAVAILABLE = (LeaseLost, TakeoverRefused)


async def opened(listener: Host, client_id: str, job: Job) -> Any:
    """The answer of the gateway's ``open`` job for ``client_id``, once no other listener
    process holds the session (each that does is asked for it first)."""
    while True:
        answer = await listener.gateway.submit(job)
        if not isinstance(answer, Held):
            return answer
        await take_over_elsewhere(listener, client_id, answer.owner)


async def take_over_elsewhere(listener: Host, client_id: str, holder: str) -> None:
    """Have ``holder`` close its connection of ``client_id`` (or its sessions released, if it
    is dead); :class:`TakeoverRefused` if it still holds the session after the bound."""
    log.info("mqtt session taken over from another process", extra={"client_id": client_id, "holder": holder})
    gateway, membership = listener.gateway, listener.membership
    seconds = membership.takeover_seconds
    deadline = time.monotonic() + seconds
    request: Request | None = None
    delay = POLL_SECONDS
    try:
        # A dead holder cannot answer: its sessions are released instead, all at once.
        while not await membership.release_if_gone(holder):
            silent = membership.silent(holder)
            if not silent and not await asyncio.to_thread(_held_by, listener, client_id, holder):
                return
            if time.monotonic() > deadline:
                log.warning(
                    "mqtt takeover not answered; the client is refused for now",
                    extra={"client_id": client_id, "holder": holder, "waited_seconds": seconds},
                )
                raise TakeoverRefused(client_id, holder, seconds)
            if silent:  # it will not answer: its sessions come with its release, for the fleet at once
                await membership.released(MAX_POLL_SECONDS)
                continue
            if request is None:
                request = await gateway.submit(partial(_ask, client_id, holder))
            await membership.released(delay)
            delay = min(MAX_POLL_SECONDS, delay * 1.25)
    finally:
        if request is not None:  # withdrawn, answered or not, with the next batch
            withdrawn = request
            gateway.post(lambda b: mqtt_requests.take(b.uow.connection, [withdrawn]), _ignored)


def _ignored(_: BaseException) -> None:
    """A withdrawal that failed: the request lapses on its own."""


def _ask(client_id: str, holder: str, batch: Batch) -> Request:
    """The request to ``holder`` to disconnect ``client_id``, written in ``batch``."""
    request_id = mqtt_requests.request(batch.uow.connection, client_id, DISCONNECT, REASON, batch.now, holder)
    return Request(request_id, client_id, DISCONNECT, REASON, batch.now, holder)


def _held_by(listener: Host, client_id: str, holder: str) -> bool:
    """Whether ``holder`` still holds the session of ``client_id``."""
    with listener.qm.reading() as conn:
        stored = sessions.find_session(conn, client_id)
    return stored is not None and stored.online and stored.owner == holder and bool(stored.node)
