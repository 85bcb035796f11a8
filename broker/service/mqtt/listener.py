"""The MQTT listener: an asyncio server beside the routing loop, on the same broker.

Each connection decodes packets (``broker.protocol.mqtt.codec``), hands them to its
:class:`~broker.protocol.mqtt.session.Session` and carries out the actions it returns.
Durable work goes to the :class:`~broker.service.mqtt.gateway.Gateway` (one transaction
per batch of jobs, whatever connection they come from); its answers are taken in the
order the packets came, so acknowledgements go out in that order. Deliveries to a client
whose session queue is empty come straight from the gateway's routing batches
(:meth:`Connection.deliver`). Those that went to the queue (the client was behind, or
another process put them there): a watcher thread waits on the session queues of the
connected clients with the queue manager's arrival notifications (no polling of SQL per
message) and wakes the connection whose queue received something; that connection has the
gateway drain as many messages as its in-flight window allows, in one job. Connections
come from every transport (TCP, TLS, WebSockets: ``broker.service.mqtt.transports``)
through the one :class:`Connection`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from hashlib import blake2b
from itertools import groupby
from typing import Any

from broker.protocol.mqtt.codec import Decoder, encode
from broker.protocol.mqtt.errors import MqttProtocolError, UnacceptableProtocol
from broker.protocol.mqtt.packets import (
    CONNACK_BAD_CREDENTIALS,
    CONNACK_NOT_AUTHORIZED,
    Connect,
    Packet,
    Publish,
)
from broker.protocol.mqtt.session import (
    Action,
    Close,
    Delivered,
    Deregister,
    Open,
    Received,
    Register,
    Release,
    Route,
    Send,
    Session,
)
from broker.service.config import Settings
from broker.service.metrics import BrokerMetrics
from broker.service.mqtt import bridging, housekeeping, systopics, takeover
from broker.service.mqtt.bridging import Bridge
from broker.service.mqtt.deadlines import Deadlines
from broker.service.mqtt.gateway import Drained, Gateway, Job, Opened
from broker.service.mqtt.transports import Endpoint, Server, Stream
from broker.store import mqtt as sessions
from queues import QueueManager
from queues.ids import now_ms

log = logging.getLogger("broker.mqtt")

MAX_USER_ID = 12  # MQMD UserIdentifier: what the broker's authority checks compare
SCAN_SECONDS = 0.5  # the watch reads the depth counters at most this often


def generated_client_id() -> str:
    """The client id of a 3.1.1 client that sent an empty one with CleanSession=1."""
    return f"auto-{os.urandom(8).hex()}"


@dataclass(slots=True)
class Step:
    """Work whose answer must be handled in packet order: ``then`` turns the awaited result
    into the session's next actions."""

    awaitable: Awaitable[Any] | None
    then: Callable[[Any], list[Action]]


class Connection:
    """One client connection and its session's protocol rules.

    Input is pushed by the transport (:meth:`received`, :meth:`lost`); an idle connection holds
    no asyncio task, no event and no timer of its own (its deadline is in the listener's
    :class:`~broker.service.mqtt.deadlines.Deadlines`). A task exists only while there is work:
    the answering task while steps wait for durable work, the delivery task while the session
    queue may hold something."""

    __slots__ = (
        "_answering",
        "_blocked",
        "_dirty",
        "_pumping",
        "_shedding",
        "_steps",
        "_waiters",
        "address",
        "closing",
        "decoder",
        "done",
        "due",
        "listener",
        "queue",
        "session",
        "since",
        "stream",
        "user_id",
    )

    def __init__(self, listener: MqttListener, stream: Stream) -> None:
        self.listener = listener
        self.stream = stream
        self.address = stream.address
        self.since = now_ms()
        self.session = Session(time.monotonic(), new_client_id=generated_client_id)
        self.decoder = Decoder(listener.settings.mqtt_max_packet_size)
        self.user_id = ""
        self.queue = ""
        self.closing = False
        self.done = False  # ended: the session is left as it should be, the socket closed
        self.due: int | None = None  # the Deadlines' bucket
        self._waiters: list[asyncio.Future[None]] | None = None  # for :meth:`closed`
        self._steps: deque[Step] | None = None  # only while some wait
        self._answering: asyncio.Task[None] | None = None
        self._dirty = False  # the session queue may hold something not yet taken
        self._pumping: asyncio.Task[None] | None = None
        self._blocked = False  # deliveries wait for the in-flight window
        self._shedding = False  # QoS 0 deliveries are being dropped: the client does not read

    @property
    def client_id(self) -> str:
        return self.session.client_id

    @property
    def clean(self) -> bool:
        return self.session.connect is not None and self.session.connect.clean_session

    # -- input (the transport's callbacks) -------------------------------------------------

    def start(self) -> None:
        self._arm()  # the wait for CONNECT

    def received(self, data: bytes) -> None:
        if self.closing:
            return
        try:
            self._feed(data)
        except Exception:  # a bug here must end this connection, not reach the event loop
            log.exception("mqtt connection failed", extra={"address": self.address})
            self.perform(self.session.connection_lost("internal error"))

    def _feed(self, data: bytes) -> None:
        self.listener.count_bytes("in", len(data))
        try:
            packets = self.decoder.feed(data)
        except UnacceptableProtocol as exc:
            self.perform(self.session.refused(exc.return_code))
            return
        except MqttProtocolError as exc:
            # The packets of the same read before the malformed one count, whatever TCP's split.
            self._handle(exc.packets)
            self.listener.refused("malformed")
            self.perform(self.session.connection_lost(f"protocol error: {exc.reason}"))
            return
        self._handle(packets)
        self._arm()  # nothing if the deadline only moved later: found out when it comes

    def lost(self, reason: str) -> None:
        self.perform(self.session.connection_lost(reason))

    async def closed(self) -> None:
        if self.done:
            return
        if self._waiters is None:
            self._waiters = []
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        await waiter

    def _arm(self) -> None:
        """Expire at the session's deadline (one listener-wide timer, not one per connection)."""
        deadline = self.session.deadline()  # time.monotonic(), the event loop's clock
        if deadline is not None and not self.closing:
            self.listener.deadlines.add(self, deadline)

    def expire(self) -> None:
        """The deadline has come: close if it has passed (keepalive, or no CONNECT in time),
        else wait for the new one."""
        actions = self.session.tick(time.monotonic())
        if actions:
            self.perform(actions)
        else:
            self._arm()

    def _handle(self, packets: Sequence[Packet]) -> None:
        """Carry out the actions of one read's packets together (a read of many PUBLISHes or
        acknowledgements costs one job, see :meth:`perform`)."""
        now = time.monotonic()
        session = self.session
        actions: list[Action] = []
        for packet in packets:
            actions += session.receive(packet, now)
        self.perform(actions)
        self.listener.count_packets("in", packets)

    # -- actions ---------------------------------------------------------------------------

    def perform(self, actions: list[Action]) -> None:
        """Queue the actions behind the earlier ones; durable work starts at once. A packet
        with nothing before it (a PINGRESP, say) is written at once, without a task. A run of
        publications to route, or of acknowledgements, is one job for the gateway (in the
        order they came: the acknowledgements they call for go out in that order)."""
        gateway, session = self.listener.gateway, self.session
        for kind, run in groupby(actions, type):
            if kind is Route:
                self._route([action.publish for action in run if isinstance(action, Route)])
            elif kind is Delivered:
                self._delivered([action.packet_id for action in run if isinstance(action, Delivered)])
            elif kind is Received:  # PUBREC of outbound QoS 2 messages: PUBREL once recorded
                ids = [action.packet_id for action in run if isinstance(action, Received)]
                self._after(gateway.acknowledged(self.client_id, ids, received=True), ids, session.recorded)
            elif kind is Release:  # PUBREL of inbound ones: PUBCOMP once forgotten
                ids = [action.packet_id for action in run if isinstance(action, Release)]
                self._after(gateway.released(self.client_id, ids), ids, session.released)
            else:
                for action in run:
                    self._perform(action)

    def _perform(self, action: Action) -> None:
        if isinstance(action, Send):
            if self._answering is None:
                self._write([action.packet])
            else:
                self._step(None, lambda _, a=action: [a])
        elif isinstance(action, Close):
            self.closing = True
            self._step(None, lambda _, a=action: [a])
        elif isinstance(action, Open):
            self._step(self._open(action), lambda actions: actions)
        elif isinstance(action, Register):
            self._register(action)
        elif isinstance(action, Deregister):
            self._deregister(action)

    def _delivered(self, packet_ids: list[int]) -> None:
        gateway = self.listener.gateway
        gateway.post(gateway.acknowledged(self.client_id, packet_ids, received=False))
        # There is room in the window again: for a drain that found it full, and for one
        # under way, which may find it full before these acknowledgements are recorded.
        if self._blocked or self._pumping is not None:
            self._blocked = False
            self.wake()

    def _after(self, job: Job, packet_ids: list[int], answer: Callable[[int], list[Action]]) -> None:
        """Have ``job`` record ``packet_ids`` durably, then answer each of them in order."""

        def then(_: object) -> list[Action]:
            actions: list[Action] = []
            for packet_id in packet_ids:
                actions += answer(packet_id)
            return actions

        self._step(self.listener.gateway.submit(job), then)

    def _step(self, awaitable: Awaitable[Any] | None, then: Callable[[Any], list[Action]]) -> None:
        if self._steps is None:
            self._steps = deque()
        self._steps.append(Step(awaitable, then))
        if self._answering is None:
            self._answering = asyncio.get_running_loop().create_task(self._answer())

    def _route(self, publishes: list[Publish]) -> None:
        gateway = self.listener.gateway
        future = gateway.submit(gateway.publish(self.client_id, publishes, self.user_id))

        def then(routed: list[bool]) -> list[Action]:
            actions: list[Action] = []
            for publish, ok in zip(publishes, routed, strict=True):
                if not ok:
                    self.listener.refused("publish")
                    log.warning(
                        "mqtt publication refused: not authorised",
                        extra={"client_id": self.client_id, "user": self.user_id, "topic": publish.topic},
                    )
                actions += self.session.routed(publish)
            return actions

        self._step(future, then)

    def _register(self, action: Register) -> None:
        packet = action.subscribe
        gateway = self.listener.gateway
        future = gateway.submit(gateway.subscribe(self.client_id, self.queue, self.user_id, packet.topics))

        def then(codes: list[int]) -> list[Action]:
            for (text, _), code in zip(packet.topics, codes, strict=True):
                if code > 2:
                    self.listener.refused("subscribe")
                    log.warning(
                        "mqtt subscription refused: not authorised",
                        extra={"client_id": self.client_id, "user": self.user_id, "filter": text},
                    )
            self.wake()  # retained publications for the new subscriptions
            return self.session.subscribed(packet.packet_id, codes)

        self._step(future, then)

    def _deregister(self, action: Deregister) -> None:
        packet = action.unsubscribe
        gateway = self.listener.gateway
        future = gateway.submit(gateway.unsubscribe(self.client_id, self.queue, self.user_id, packet.topics))

        self._step(future, lambda _: self.session.unsubscribed(packet.packet_id))

    async def _answer(self) -> None:
        """Take the steps in order: send, close, or hand their answers back to the session.
        The task ends when no step is left (the next step starts another)."""
        steps = self._steps
        assert steps is not None
        try:
            while steps:
                step = steps.popleft()
                try:
                    result = None if step.awaitable is None else await step.awaitable
                except Exception as exc:  # a failed job: the client sees the connection close
                    log.warning(
                        "mqtt work failed; closing", extra={"client_id": self.client_id, "error": repr(exc)}
                    )
                    await self._end(Close(f"internal error: {exc!r}", self._will()))
                    return
                later: list[Action] = []
                out: list[Packet] = []
                for action in step.then(result):
                    if isinstance(action, Send):
                        out.append(action.packet)
                    elif isinstance(action, Close):
                        self._write(out)
                        await self._end(action)
                        return
                    else:
                        later.append(action)
                self._write(out)
                self.perform(later)
        finally:
            self._answering = None
            self._steps = None

    def _write(self, packets: list[Packet]) -> None:
        """Write ``packets`` in one write."""
        if not packets or self.stream.is_closing():
            return
        data = b"".join([encode(packet) for packet in packets])
        self.listener.count_packets("out", packets)
        self.listener.count_bytes("out", len(data))
        self.stream.write(data)

    def _will(self) -> Any:
        connect = self.session.connect
        return None if connect is None else connect.will

    # -- opening and ending ----------------------------------------------------------------

    async def _open(self, action: Open) -> list[Action]:
        listener = self.listener
        code, user_id = await asyncio.get_running_loop().run_in_executor(
            listener.authenticator, listener.authenticate, action.connect, self.stream.principal
        )
        if code:
            self.listener.refused("connect")
            log.warning(
                "mqtt connection refused",
                extra={"client_id": action.client_id, "user": action.connect.username, "return_code": code},
            )
            return self.session.refused(code)
        self.user_id = user_id
        await self.listener.take_over(action.client_id, self)
        self.queue = sessions.queue_for(action.client_id)
        gateway = self.listener.gateway
        opened: Opened = await gateway.submit(
            gateway.open(action.connect, action.client_id, user_id, self.address, self.deliver)
        )
        self.listener.attach(self)
        if opened.behind:
            self.wake()
        log.info(
            "mqtt client connected",
            extra={
                "client_id": action.client_id,
                "user": user_id,
                "address": self.address,
                "present": opened.present,
            },
        )
        return self.session.opened(opened.present, opened.awaiting_release, opened.outbound)

    async def _end(self, close: Close) -> None:
        """Publish the will (if the connection ended without DISCONNECT), discard a clean
        session, and close the socket."""
        self.closing = True
        self.listener.deadlines.discard(self)
        gateway = self.listener.gateway
        try:
            if close.will is not None and self.queue:
                will = close.will
                publish = Publish(will.topic, will.payload, will.qos, will.retain)
                await gateway.submit(gateway.publish(self.client_id, [publish], self.user_id))
                self.listener.metrics.mqtt.wills.inc()
            if self.queue and self.listener.owns(self):
                if self.clean:
                    await gateway.submit(gateway.close(self.client_id, self.queue))
                else:
                    gateway.submit(gateway.offline(self.client_id), lazy=True)
        except Exception as exc:
            log.warning(
                "mqtt session not ended cleanly", extra={"client_id": self.client_id, "error": repr(exc)}
            )
        finally:
            # Only now: a connection with the same client id waits until this one has ended.
            self.listener.detach(self)
            self.listener.ended(self)
            log.info("mqtt client disconnected", extra={"client_id": self.client_id, "reason": close.reason})
            self.stream.close()
            if self._pumping is not None and self._pumping is not asyncio.current_task():
                self._pumping.cancel()
            self.done = True
            for waiter in self._waiters or ():
                if not waiter.done():
                    waiter.set_result(None)

    def wake(self) -> None:
        """Something may wait on the session queue: deliver it. The delivery task exists only
        while there is something to deliver (an idle connection holds no task for it)."""
        self._dirty = True
        if self._pumping is None and self.queue and not self.closing:
            self._pumping = asyncio.get_running_loop().create_task(self._pump())

    async def _pump(self) -> None:
        """Have what the session queue holds sent, as far as the in-flight window allows (the
        gateway sends it, through :meth:`deliver`, in commit order). Nothing here waits for
        the client's socket: see :meth:`deliver` for a client that does not read."""
        gateway = self.listener.gateway
        try:
            while self._dirty and not self.closing:
                self._dirty = False
                while not self.closing:
                    drained: Drained = await gateway.submit(gateway.drain(self.queue))
                    if drained.blocked:
                        self._blocked = True
                        break
                    if not drained.more:
                        break
        finally:
            self._pumping = None

    def deliver(self, publications: list[Publish]) -> None:
        """Send publications the gateway has committed for this client (QoS 1/2 ones numbered
        and stored), in one write. A client whose unsent output is over
        ``mqtt_max_output_bytes`` (it does not read) loses the QoS 0 ones; its QoS 1/2 ones are
        stored before they are written, and once its window is full the rest wait on its
        session queue, so a slow client never holds up the others."""
        if self.stream.is_closing():
            return
        over = self.stream.backlog() > self.listener.settings.mqtt_max_output_bytes
        packets: list[Packet] = []
        sending = self.session.deliver(publications)
        if over:
            for publish in sending:
                if publish.qos:
                    packets.append(publish)
                else:
                    self._shed()
        else:
            packets += sending
            self._shedding = False
        self._write(packets)

    def _shed(self) -> None:
        """Drop a QoS 0 delivery: counted each time, logged once per spell of not reading."""
        self.listener.metrics.mqtt.slow_dropped.inc()
        if not self._shedding:
            self._shedding = True
            log.warning(
                "mqtt deliveries dropped: client not reading",
                extra={"client_id": self.client_id, "unsent_bytes": self.stream.backlog()},
            )


def _wake_all(connections: list[Connection]) -> None:
    for connection in connections:
        connection.wake()


class MqttListener:
    """The asyncio MQTT server of one broker process."""

    def __init__(
        self,
        qm: QueueManager,
        settings: Settings,
        endpoints: Sequence[Endpoint],
        metrics: BrokerMetrics,
        *,
        primary: bool = True,
        shared: bool = False,
    ) -> None:
        """``shared``: other listener processes serve the same ports and sessions (SO_REUSEPORT,
        takeovers through the database); only the ``primary`` one marks every session offline
        at start and runs what is one per broker (housekeeping, ``$SYS``, bridges)."""
        self.qm = qm
        self.primary = primary
        self.shared = shared
        self.settings = settings
        self.endpoints = list(endpoints)
        self.metrics = metrics
        self.gateway = Gateway(qm, settings, metrics)
        self.clients: dict[str, Connection] = {}  # by client id, once their session is open
        self.connections: set[Connection] = set()
        self.deadlines = Deadlines()
        self._by_queue: dict[str, Connection] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self.stopped = threading.Event()
        self.ready = threading.Event()
        # One thread verifies passwords: scrypt's 16 MiB stays in one malloc arena.
        self.authenticator = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mqtt-auth")
        self._verified: dict[tuple[str, str], bytes] = {}
        # The labelled counters, looked up once: a label lookup costs more than the increment.
        self._packet_counters: dict[tuple[str, type], Any] = {}
        self._byte_counters: dict[str, Any] = {}

    # -- lifecycle -------------------------------------------------------------------------

    def run(self) -> None:
        """Serve until :meth:`stop` (runs its own event loop: call it on a thread)."""
        asyncio.run(self._serve())

    def stop(self) -> None:
        """Stop accepting, end every connection (publishing wills), finish the durable work."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            loop.call_soon_threadsafe(stop.set)

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self.gateway.start(mark_offline=self.primary)
        servers: list[Server] = []
        chores: list[asyncio.Task[None]] = []
        try:
            for endpoint in self.endpoints:
                servers.append(
                    await endpoint.start(self._accept, self.settings.mqtt_max_packet_size, shared=self.shared)
                )
            watcher = threading.Thread(target=self._watch, name="mqtt-watcher", daemon=True)
            watcher.start()
            chores += [asyncio.create_task(chore) for chore in self._chores()]
            log.info("mqtt listener started", extra={"listeners": ", ".join(str(e) for e in self.endpoints)})
            self.ready.set()
            await self._stop.wait()
        finally:
            for server in servers:
                server.close()
            for chore in chores:
                chore.cancel()
            await asyncio.gather(*chores, return_exceptions=True)
            ending = list(self.connections)
            for connection in ending:
                connection.perform(connection.session.connection_lost("broker shutting down"))
            await asyncio.gather(*(c.closed() for c in ending))
            self.stopped.set()
            self.gateway.stop()
            self.authenticator.shutdown(wait=False)
            log.info("mqtt listener stopped")

    def _chores(self) -> list[Coroutine[Any, Any, None]]:
        """What runs beside the connections: disconnect requests (operators', and takeovers by
        other listener processes) in every listener; the once-per-broker chores in the primary."""
        chores = [housekeeping.honour_requests(self)]
        if self.primary:
            chores += [housekeeping.keep(self), systopics.publish(self)]
            if self.qm.engine.dialect.name == "postgresql":
                chores.append(housekeeping.vacuum(self))
            if self.shared:
                chores.append(housekeeping.release_dead_holders(self))
            chores += [Bridge(self, c).run() for c in bridging.load(self.settings.mqtt_bridges)]
        return chores

    def _accept(self, stream: Stream) -> Connection:
        self.metrics.mqtt.accepted.inc()
        connection = Connection(self, stream)
        self.connections.add(connection)
        self.metrics.mqtt.connections.set(len(self.connections))
        connection.start()
        return connection

    def ended(self, connection: Connection) -> None:
        self.connections.discard(connection)
        self.metrics.mqtt.connections.set(len(self.connections))

    # -- sessions --------------------------------------------------------------------------

    async def take_over(self, client_id: str, connection: Connection) -> None:
        """A second connection with a client id takes the session: the first is closed
        (its will published) and has ended before the second opens the session."""
        current = self.clients.get(client_id)
        if current is not None and current is not connection:
            log.info("mqtt session taken over", extra={"client_id": client_id, "address": connection.address})
            current.perform(current.session.connection_lost("session taken over"))
            await current.closed()
        elif self.shared:
            await takeover.take_over_elsewhere(self, client_id)
        self.clients[client_id] = connection

    def attach(self, connection: Connection) -> None:
        self.clients[connection.client_id] = connection
        self._by_queue[connection.queue] = connection

    def owns(self, connection: Connection) -> bool:
        """Whether ``connection`` still holds its session (no other has taken it over)."""
        return self.clients.get(connection.client_id) is connection

    def detach(self, connection: Connection) -> None:
        if self._by_queue.get(connection.queue) is connection:
            del self._by_queue[connection.queue]
        if self.owns(connection):
            del self.clients[connection.client_id]

    def authenticate(self, connect: Connect, certified: str | None) -> tuple[int, str]:
        """(0, principal) or a CONNACK return code. A verified client certificate names the
        principal (``certified``, its subject's CN): the user name must be absent or the same,
        and no password is checked. Otherwise the user name and password must match a stored
        MQTT principal; without a user name, only when anonymous clients are configured
        (``mqtt_anonymous``: the principal they act as)."""
        if certified is not None:
            if connect.username not in (None, certified) or not 0 < len(certified) <= MAX_USER_ID:
                return CONNACK_NOT_AUTHORIZED, ""
            return 0, certified
        if connect.username is None:
            anonymous = self.settings.mqtt_anonymous
            return (0, anonymous) if anonymous else (CONNACK_NOT_AUTHORIZED, "")
        if len(connect.username) > MAX_USER_ID or connect.password is None:
            return CONNACK_BAD_CREDENTIALS, ""
        with self.qm.reading() as conn:
            stored = sessions.password_hash(conn, connect.username)
        if stored is None:
            return CONNACK_BAD_CREDENTIALS, ""
        # scrypt costs tens of milliseconds and 16 MiB by design: a password once verified
        # against this very hash is recognised by a keyed digest kept in memory only.
        key = (connect.username, stored)
        digest = blake2b(connect.password, key=stored.encode()[-64:], digest_size=32).digest()
        if self._verified.get(key) != digest:
            if not sessions.verify_password(connect.password, stored):
                return CONNACK_BAD_CREDENTIALS, ""
            self._verified[key] = digest
        return 0, connect.username

    # -- deliveries ------------------------------------------------------------------------

    def _watch(self) -> None:
        """Wake the connections whose session queue received messages. When only "something
        changed" is known (SQLite's backstop reading, a lost LISTEN connection), the depth
        counters say which session queues hold messages: one read, at most every
        ``SCAN_SECONDS``, rather than a wake-up (and a drain) of every connection."""
        arrivals = self.qm.notifier.observe()
        last_scan = 0.0  # time.monotonic() of the last read of the depth counters
        scan_due: float | None = None  # when to read them next, if asked to
        try:
            while not self.stopped.is_set():
                wait = 1.0 if scan_due is None else max(0.0, scan_due - time.monotonic())
                names, everything = arrivals.take(wait)
                if everything and scan_due is None:
                    scan_due = last_scan + SCAN_SECONDS
                if scan_due is not None and time.monotonic() >= scan_due:
                    scan_due = None
                    last_scan = time.monotonic()
                    names.update(self.qm.nonempty_under(sessions.QUEUE_PREFIX))
                self._wake_queues(names)
        finally:
            arrivals.close()

    def _wake_queues(self, names: set[str]) -> None:
        waking = [c for name in names if (c := self._by_queue.get(name)) is not None]
        if waking and self._loop is not None:
            self._loop.call_soon_threadsafe(_wake_all, waking)

    # -- counters --------------------------------------------------------------------------

    def count_packets(self, direction: str, packets: Sequence[Packet]) -> None:
        """Count many packets at the cost of one increment per run of one kind (a read or a
        write is mostly one kind: building a Counter cost more than counting)."""
        kind: type | None = None
        count = 0
        for packet in packets:
            if type(packet) is kind:
                count += 1
                continue
            if count:
                self._packet_counter(direction, kind).inc(count)
            kind, count = type(packet), 1
        if count:
            self._packet_counter(direction, kind).inc(count)

    def _packet_counter(self, direction: str, kind: Any) -> Any:
        counter = self._packet_counters.get((direction, kind))
        if counter is None:
            counter = self.metrics.mqtt.packets.labels(direction, kind.__name__.upper())
            self._packet_counters[(direction, kind)] = counter
        return counter

    def count_bytes(self, direction: str, size: int) -> None:
        counter = self._byte_counters.get(direction)
        if counter is None:
            counter = self._byte_counters[direction] = self.metrics.mqtt.bytes.labels(direction)
        counter.inc(size)

    def refused(self, what: str) -> None:
        self.metrics.mqtt.refused.labels(what).inc()
