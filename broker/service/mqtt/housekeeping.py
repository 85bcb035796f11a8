"""Housekeeping of the MQTT sessions no client is connected to.

A fleet of devices that vanish would otherwise keep their persistent sessions, their
subscriptions and everything published for them forever. Two limits, both off by default:

- ``mqtt_session_expiry`` seconds: a session offline longer than that is removed, with its
  broker subscriptions, its rows and its queue (logged, counted). An MQTT 5.0 session goes
  after its own Session Expiry Interval instead, which the setting caps; a client coming back
  to one that has expired but is not removed yet finds it gone all the same (the gateway
  checks at CONNECT).
- ``mqtt_max_queued`` messages: an offline session's queue holding more loses its oldest
  (a device coming back wants the newest state); the number dropped is counted per
  session (``broker mqtt sessions``, the admin API) and in Prometheus.

Both are enforced by a pass every :func:`period` seconds rather than at each delivery:
deliveries to a session queue are made by whichever process routes (this listener, the
routing loop, the Spark job), and a pass in one place keeps that routing untouched. So a
queue may exceed the limit by what arrives between two passes, and a session may outlive
its expiry by up to one period. In a cluster one node makes the passes: the one holding their
lease (``broker.store.nodes``), for as long as it is alive.

A will that waits (MQTT 5.0's Will Delay Interval) is kept with its offline session and
published once due, by a look every :data:`WILLS_PERIOD` seconds (a second late at most),
unless its client is back first; a session that ends sooner publishes it then (``Gateway``).

Operators' requests (``broker.store.mqtt_requests``: disconnect a client, delete a session,
made through the admin API or the CLI, perhaps in another process) are read every
:data:`REQUEST_PERIOD` seconds. A disconnect closes the connection as a lost one: the client
did not send DISCONNECT, so its will is published, as after a takeover. Each listener process
keeps its membership of the MQTT cluster (``broker.service.mqtt.membership``: its heartbeat,
and the release of the sessions of members found dead). On PostgreSQL the tables every
routing batch churns are vacuumed every :data:`VACUUM_PERIOD` seconds. The bytes each
connection has read and written, counted in memory as they go, reach its session's row every
:data:`TRAFFIC_PERIOD` seconds (:class:`Traffic`), for the console and ``broker mqtt sessions``:
a statement per thousand connections whose counts changed, none per packet.

Each is a step that :func:`chores` hands to ``broker.service.supervision.every``: a failed
step (the database restarting, say) is reported once and tried again until it works.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from broker.protocol.mqtt.session import Phase
from broker.protocol.mqtt.v5.reasons import ReasonCode
from broker.service.mqtt.host import Client, Host
from broker.store import mqtt as sessions
from broker.store import mqtt_requests, nodes
from broker.store.mqtt_requests import DELETE, Request
from queues.ids import now_ms

log = logging.getLogger("broker.mqtt")

MAX_PERIOD = 60.0
MIN_PERIOD = 0.5
QUEUED_PERIOD = 5.0  # the queued-message limit: two statements per pass, whatever the fleet
REQUEST_PERIOD = 0.1  # operators' requests and takeovers: one read of an (almost always) empty table
VACUUM_PERIOD = 1.0  # PostgreSQL: the tables every batch churns (broker.store.mqtt.vacuum)
TRAFFIC_PERIOD = 5.0  # each connection's bytes in and out, written to its session's row
TRAFFIC_ROWS = 1000  # sessions a batch writes them for: a big fleet's never hold up one batch long
WILLS_PERIOD = 1.0  # wills that wait (MQTT 5.0's Will Delay Interval): one look at an index
STATE_PERIOD = 1.0  # an idle gateway's state brought up to date: one read when nothing changed


def period(expiry: int, max_queued: int) -> float:
    """Seconds between passes: a quarter of the expiry (a session outlives it by a quarter at
    most) but at most a minute (MQTT 5.0 sessions expire by their own interval whatever the
    setting), and at most ``QUEUED_PERIOD`` with a queued-message limit (a queue exceeds it by
    five seconds' worth at most)."""
    quarter = min(MAX_PERIOD, max(MIN_PERIOD, expiry / 4)) if expiry else MAX_PERIOD
    return min(quarter, QUEUED_PERIOD) if max_queued else quarter


Step = Callable[[], Awaitable[None]]


def chores(listener: Host) -> list[tuple[str, float, Step]]:
    """(name, period, step) of each chore of ``listener``: operators' requests and the
    cluster's membership in every listener; wills due, session limits and vacuuming in the
    primary one."""
    membership = listener.membership
    found: list[tuple[str, float, Step]] = [
        ("mqtt-requests", REQUEST_PERIOD, lambda: honour_requests(listener)),
        ("mqtt-membership", membership.period, membership.step),
        ("mqtt-traffic", TRAFFIC_PERIOD, Traffic(listener).step),
        ("mqtt-state", STATE_PERIOD, lambda: refresh_state(listener)),
    ]
    if not listener.primary:
        return found
    found.append(("mqtt-wills", WILLS_PERIOD, lambda: publish_wills(listener)))
    settings = listener.settings
    every = period(settings.mqtt_session_expiry, settings.mqtt_max_queued)
    found.append(("mqtt-session-limits", every, lambda: one_pass(listener)))
    if listener.qm.engine.dialect.name == "postgresql":
        found.append(("mqtt-vacuum", VACUUM_PERIOD, lambda: vacuum(listener)))
    return found


async def refresh_state(listener: Host) -> None:
    """Keep the gateway's state abreast of the other members' registrations while it is idle
    (``Gateway.refresh``)."""
    gateway = listener.gateway
    await gateway.submit(gateway.refresh(), lazy=True)


async def one_pass(listener: Host) -> None:
    """Expire the sessions offline too long, and trim the offline sessions' queues: on the one
    node of the cluster holding the passes' lease (two trimming one queue at once would drop
    twice what is over the limit)."""
    settings, gateway, metrics = listener.settings, listener.gateway, listener.metrics
    if not await asyncio.to_thread(_leased, listener):
        return
    for stored in await gateway.submit(gateway.expire(now_ms())):
        metrics.mqtt.expired.inc()
        log.info(
            "mqtt session expired",
            extra={
                "client_id": stored.client_id,
                "user": stored.user_id,
                "offline_since": stored.offline_since,
            },
        )
    if settings.mqtt_max_queued:
        for client_id, dropped in await gateway.submit(gateway.trim(settings.mqtt_max_queued)):
            metrics.mqtt.dropped.inc(dropped)
            log.warning(
                "mqtt messages dropped: too many queued for an offline session",
                extra={"client_id": client_id, "dropped": dropped, "limit": settings.mqtt_max_queued},
            )


async def publish_wills(listener: Host) -> None:
    """Publish the wills whose delay has passed, their clients gone from this node or another
    and not back. Each is taken from its session as it is published: nodes doing this at once
    publish it once, and no lease is needed."""
    now = now_ms()
    if not await asyncio.to_thread(_wills_due, listener, now):
        return
    gateway = listener.gateway
    published = await gateway.submit(gateway.due_wills(now))
    if published:
        log.info("mqtt wills published after their delay", extra={"wills": published})


def _wills_due(listener: Host, now: int) -> bool:
    with listener.qm.reading() as conn:
        return sessions.wills_due(conn, now)


def _leased(listener: Host) -> bool:
    with listener.qm.unit_of_work() as uow:
        return nodes.take_lease(uow.connection, nodes.SESSION_LIMITS, listener.gateway.owner)


async def vacuum(listener: Host) -> None:
    """VACUUM the session tables every batch churns, on a connection of its own: their deleted
    rows' space is used again at once, not after autovacuum's next look, so the tables stay a
    few pages and their writes stay in the server's memory (``broker.store.mqtt.vacuum``)."""
    await asyncio.to_thread(sessions.vacuum, listener.qm.engine)


Counts = tuple[int, int, int]  # bytes in, bytes out, deliveries in flight held in memory alone


class Traffic:
    """Writes the bytes each open session's connection has read and written, and the
    deliveries in flight to it that exist in memory alone (a session that ends with its
    connection stores none), to the session's row: those whose counts changed since the last
    write, and once more those of connections gone since (so a client that came and went
    between two writes is counted too; a clean session's row is gone with it, and nothing is
    written for it), :data:`TRAFFIC_ROWS` a gateway batch. A write that fails is made again
    with the next."""

    def __init__(self, listener: Host) -> None:
        self.listener = listener
        self._written: dict[Client, Counts] = {}  # the open connections' counts last written
        self._gone: dict[str, Counts] = {}  # by client id: the last counts of those gone, unwritten

    async def step(self) -> None:
        listener = self.listener
        for client_id, client in listener.take_departed().items():
            counts = (client.bytes_in, client.bytes_out, 0)  # nothing in flight once it has gone
            if self._written.pop(client, None) != counts:
                self._gone[client_id] = counts
        current = {
            client: (client.bytes_in, client.bytes_out, client.in_flight_held)
            for client in listener.clients.values()
            if client.session.phase is Phase.OPEN
        }
        changed = dict(self._gone)  # a client connected again: its new connection's counts win
        changed.update(
            (client.session.client_id, counts)
            for client, counts in current.items()
            if self._written.get(client) != counts
        )
        gateway, rows = listener.gateway, list(changed.items())
        for start in range(0, len(rows), TRAFFIC_ROWS):
            await gateway.submit(gateway.traffic(dict(rows[start : start + TRAFFIC_ROWS])), lazy=True)
        self._gone = {}
        self._written = current


async def honour_requests(listener: Host) -> None:
    """Carry out the operators' requests waiting for this listener."""
    taken = await asyncio.to_thread(mqtt_requests.take_requests, listener.qm, _wanted(listener))
    for request in taken:
        await _honour(listener, request)


def _wanted(listener: Host) -> Callable[[Request], bool]:
    """Requests addressed to this listener process (it held the client when they were made),
    and deletions of sessions no client held (any listener may delete an offline session;
    the gateway checks it is still offline)."""
    gateway = listener.gateway
    return lambda request: request.owner == gateway.owner or (not request.owner and request.action == DELETE)


async def _honour(listener: Host, request: Request) -> None:
    connection = listener.clients.get(request.client_id)
    if connection is not None:
        log.info(
            "mqtt client disconnected by an operator",
            extra={"client_id": request.client_id, "reason": request.reason},
        )
        lost = connection.session.connection_lost(
            f"disconnected by an operator: {request.reason}", ReasonCode.ADMINISTRATIVE_ACTION
        )
        connection.perform(lost)
        await connection.closed()
    if request.action != DELETE or request.client_id in listener.clients:  # connected again meanwhile
        return
    gateway = listener.gateway
    stored: sessions.StoredSession | None = await gateway.submit(gateway.delete_offline(request.client_id))
    if stored is not None:
        log.info(
            "mqtt session deleted by an operator",
            extra={"client_id": request.client_id, "user": stored.user_id, "reason": request.reason},
        )
