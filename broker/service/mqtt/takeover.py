"""Client-id takeover across listener processes sharing a port (``mqtt_processes`` > 1).

Within one process a second connection with a client id closes the first and waits for it to
end (``MqttListener.take_over``). Across processes the database carries the request, in the
table operators' disconnects use (``broker.store.mqtt_requests``): the process that accepted
the new CONNECT finds the session online, writes a disconnect request for its client id and
waits until the session is released (marked offline, or removed for a clean session), at most
``TAKEOVER_SECONDS``; a session held by a process that died (``queues.owners``) is taken at once.
The listener holding the client takes the request (``housekeeping.honour_requests``, a few
times a second) and closes that connection, its will published as for any takeover. The
requester withdraws its request before it opens the session, answered or not: left pending,
it would be taken by the requester's own listener once the new connection holds the client id.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from broker.store import mqtt as sessions
from broker.store import mqtt_requests
from broker.store.mqtt_requests import DISCONNECT, Request
from queues.owners import dead_here

if TYPE_CHECKING:
    from broker.service.mqtt.listener import MqttListener

log = logging.getLogger("broker.mqtt")

TAKEOVER_SECONDS = 5.0
POLL_SECONDS = 0.05
REASON = "session taken over by a connection to another listener process"


async def take_over_elsewhere(listener: MqttListener, client_id: str) -> None:
    """If another process holds ``client_id``, have it close that connection (bounded wait)."""
    if not await asyncio.to_thread(_online, listener, client_id):
        return
    log.info("mqtt session taken over from another process", extra={"client_id": client_id})
    gateway = listener.gateway
    request_id: int = await gateway.submit(
        lambda b: mqtt_requests.request(b.uow.connection, client_id, DISCONNECT, REASON, b.now)
    )
    try:
        deadline = time.monotonic() + TAKEOVER_SECONDS
        while await asyncio.to_thread(_online, listener, client_id):
            if time.monotonic() > deadline:
                log.warning(
                    "mqtt takeover not answered; taking the session anyway",
                    extra={"client_id": client_id, "waited_seconds": TAKEOVER_SECONDS},
                )
                break
            await asyncio.sleep(POLL_SECONDS)
    finally:
        withdrawn = Request(request_id, client_id, DISCONNECT, REASON, 0)
        await gateway.submit(lambda b: mqtt_requests.take(b.uow.connection, [withdrawn]))


def _online(listener: MqttListener, client_id: str) -> bool:
    """Whether a live listener process holds ``client_id`` (one that died cannot answer)."""
    with listener.qm.reading() as conn:
        stored = sessions.find_session(conn, client_id)
    return stored is not None and stored.online and not dead_here(stored.owner)
