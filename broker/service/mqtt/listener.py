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
from dataclasses import dataclass
from functools import partial
from itertools import groupby
from typing import Any

from broker.protocol.mqtt.codec import Decoder, encode
from broker.protocol.mqtt.errors import MqttProtocolError, UnacceptableProtocol
from broker.protocol.mqtt.packets import (
    CONNACK_SERVER_UNAVAILABLE,
    Packet,
    Publish,
)
from broker.protocol.mqtt.session import (
    Action,
    Close,
    Delivered,
    Deregister,
    Limits,
    Open,
    Received,
    Register,
    Release,
    Route,
    Send,
    Session,
    Window,
    will_publication,
)
from broker.protocol.mqtt.v5.reasons import ReasonCode
from broker.service.config import Settings
from broker.service.event_loop import loop_factory
from broker.service.health import database_unavailable
from broker.service.metrics import BrokerMetrics
from broker.service.mqtt import bridging, housekeeping, systopics, takeover, translation
from broker.service.mqtt.admission import Admission
from broker.service.mqtt.bridging import Bridge
from broker.service.mqtt.deadlines import Deadlines
from broker.service.mqtt.gateway import Drained, Gateway, Job, Opened, Subscribed
from broker.service.mqtt.intake import Held, Intake
from broker.service.mqtt.logins import Logins
from broker.service.mqtt.membership import Membership
from broker.service.mqtt.streams import Server, Stream
from broker.service.mqtt.transports import Endpoint
from broker.service.supervision import Backoff, SupervisedThread, every, supervise
from broker.store import mqtt as sessions
from queues import QueueManager
from queues.ids import now_ms
from queues.reasons import Reason, reason_name

log = logging.getLogger("broker.mqtt")

SCAN_SECONDS = 0.5  # the watch reads the depth counters at most this often
WATCHER_TASK = "mqtt-watcher"
UNAVAILABLE = "database unavailable"  # why a connection is closed during an outage
STOP_GRACE_SECONDS = 10.0  # how long a stopping listener retries the end of sessions meanwhile
PAUSED_RECHECK_SECONDS = 1.0  # a connection not read is not held to its keepalive meanwhile
# Why a publication or subscription is refused, in the log and in broker_mqtt_refused_total
# ("" there: "publish" or "subscribe", as the ACL's refusals have always been counted).
NOUNS = {"publish": "publication", "subscribe": "subscription"}
REFUSALS: dict[int, tuple[str, str]] = {
    Reason.MQRCCF_NOT_AUTHORIZED: ("not authorised", ""),
    Reason.MQRCCF_TOPIC_ERROR: ("topic too long or not valid", "topic"),
    Reason.MQRC_NOT_AUTHORIZED: ("$ topics are the broker's", "reserved"),
}
TOPIC_LOGGED = 256  # characters of a refused topic the log line carries


def generated_client_id() -> str:
    """The client id of a 3.1.1 client that sent an empty one with CleanSession=1."""
    return f"auto-{os.urandom(8).hex()}"


@dataclass(slots=True)
class Step:
    """Work whose answer must be handled in packet order: ``then`` turns the awaited result
    into the session's next actions. ``count`` packets of ``size`` bytes wait for it
    (``broker.service.mqtt.intake``)."""

    awaitable: Awaitable[Any] | None
    then: Callable[[Any], list[Action]]
    count: int = 0
    size: int = 0


def _abandon(steps: deque[Step]) -> None:
    """The steps behind a failed one are not awaited: the connection closes. Their jobs fail
    alike when the database is away, and a failure nobody retrieves is logged as an error."""
    for step in steps:
        if asyncio.isfuture(step.awaitable):
            step.awaitable.add_done_callback(lambda done: done.cancelled() or done.exception())


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
        "_half_open",
        "_held",
        "_pumping",
        "_sharing",
        "_shedding",
        "_steps",
        "_waiters",
        "_window",
        "address",
        "bytes_in",
        "bytes_out",
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
        self.bytes_in = 0  # read from the client: its session's row has them every few seconds
        self.bytes_out = 0  # written to it (``housekeeping.Traffic``)
        self.session = Session(
            time.monotonic(),
            new_client_id=generated_client_id,
            connect_timeout=listener.settings.mqtt_connect_timeout,
            limits=listener.limits,
        )
        self.decoder = Decoder(listener.settings.mqtt_max_packet_size, accept_mqtt5=True)
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
        self._sharing = False  # a shared subscription's messages wait for its members' windows
        self._shedding = False  # QoS 0 deliveries are being dropped: the client does not read
        self._held = Held()  # packets read and not yet routed or recorded
        self._half_open = True  # accepted, its CONNECT not answered yet (listener.admission)
        self._window: Window | None = None  # a session ending with it: ids freed here (Opened)

    @property
    def client_id(self) -> str:
        return self.session.client_id

    @property
    def in_flight_held(self) -> int:
        """Deliveries in flight to a session that ends with this connection (none stored)."""
        return 0 if self._window is None else self._window.used

    @property
    def clean(self) -> bool:
        """Whether the stored session ends with this connection."""
        return self.session.ends_with_connection

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
        self.bytes_in += len(data)
        try:
            packets = self.decoder.feed(data)
        except UnacceptableProtocol as exc:
            self.perform(self.session.refused(exc.return_code))
            return
        except MqttProtocolError as exc:
            # The packets of the same read before the malformed one count, whatever TCP's split.
            self._handle(exc.packets)
            self.listener.refused("malformed")
            self.perform(self.session.connection_lost(f"protocol error: {exc.reason}", exc.reason_code))
            return
        self._handle(packets)
        self.listener.intake.check(self, self._held)
        self._arm()  # nothing if the deadline only moved later: found out when it comes

    def pause(self) -> None:
        """Stop reading the client: it holds as much unrouted work as it may."""
        self.stream.pause_reading()

    def resume(self) -> None:
        if not self.closing:
            self.stream.resume_reading()

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
        else wait for the new one. A client the listener does not read meanwhile (its work
        waits, ``broker.service.mqtt.intake``) is not held to its keepalive: its PINGREQs wait
        in the socket."""
        if self._held.paused:
            self.listener.deadlines.add(self, time.monotonic() + PAUSED_RECHECK_SECONDS)
            return
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
                self._after(
                    partial(gateway.acknowledged, self.client_id, ids, received=True), ids, session.recorded
                )
            elif kind is Release:  # PUBREL of inbound ones: PUBCOMP once forgotten
                ids = [action.packet_id for action in run if isinstance(action, Release)]
                self._after(partial(gateway.released, self.client_id, ids), ids, session.released)
            else:
                for action in run:
                    self._perform(action)

    def _perform(self, action: Action) -> None:
        if isinstance(action, Send):
            if self._answering is None:
                self._write([action.packet])
            else:
                self._step(None, partial(_itself, action))
        elif isinstance(action, Close):
            self.closing = True
            self._step(None, partial(_itself, action))
        elif isinstance(action, Open):
            self._step(self._open(action), lambda actions: actions)
        elif isinstance(action, Register):
            self._register(action)
        elif isinstance(action, Deregister):
            self._deregister(action)

    def _delivered(self, packet_ids: list[int]) -> None:
        """PUBACKs and PUBCOMPs: the gateway records them, but those of a session that ends
        with the connection, which it never stored: their ids are free again at once."""
        gateway, window = self.listener.gateway, self._window
        lent = gateway.lent  # read here: the key is in it before any delivery lent is sent
        if window is None or (lent and sessions.session_key(self.client_id) in lent):
            gateway.post(gateway.acknowledged(self.client_id, packet_ids, received=False), self._work_failed)
        else:
            for packet_id in packet_ids:
                window.free(packet_id)
        # There is room in the window again: for a drain that found it full, and for one
        # under way, which may find it full before these acknowledgements are recorded.
        if self._blocked or self._sharing or self._pumping is not None:
            self._blocked = False
            self.wake()

    def _after(
        self, job: Callable[[], Job], packet_ids: list[int], answer: Callable[[int], list[Action]]
    ) -> None:
        """Have ``job()`` record ``packet_ids`` durably, then answer each of them in order. A
        session that ends with its connection stored none of its QoS 2 ids nor deliveries: they
        are answered at once, behind whatever answer is still awaited, without a job."""

        def then(_: object) -> list[Action]:
            actions: list[Action] = []
            for packet_id in packet_ids:
                actions += answer(packet_id)
            return actions

        if self._window is None:
            self._step(self._submit(job()), then, len(packet_ids))
        elif self._answering is not None:
            self._step(None, then)
        else:
            actions = then(None)
            packets = [action.packet for action in actions if isinstance(action, Send)]
            if len(packets) == len(actions):  # one write for them all
                self._write(packets)
            else:
                self.perform(actions)

    def _submit(self, job: Job) -> asyncio.Future[Any]:
        """Hand ``job`` to the gateway: urgent unless this connection has work waiting already
        (a client flooding the broker waits its turn, behind the others' first packets)."""
        return self.listener.gateway.submit(job, urgent=not self._held.count)

    def _step(
        self,
        awaitable: Awaitable[Any] | None,
        then: Callable[[Any], list[Action]],
        count: int = 0,
        size: int = 0,
    ) -> None:
        """Queue ``then`` behind the earlier steps, for when ``awaitable`` is done; ``count``
        packets of ``size`` bytes wait for it meanwhile."""
        if self._steps is None:
            self._steps = deque()
        self._steps.append(Step(awaitable, then, count, size))
        if count:
            self.listener.intake.read(self, self._held, count, size)
        if self._answering is None:
            self._answering = asyncio.get_running_loop().create_task(self._answer())

    def _route(self, publishes: list[Publish]) -> None:
        gateway = self.listener.gateway
        future = self._submit(gateway.publish(self.client_id, publishes, self.user_id))

        def then(refusals: list[int]) -> list[Action]:
            actions: list[Action] = []
            for publish, reason in zip(publishes, refusals, strict=True):
                if reason:
                    self._refused("publish", reason, publish.topic)
                actions += self.session.routed(publish, translation.reason_code(reason))
            return actions

        self._step(future, then, len(publishes), sum(len(p.payload) for p in publishes))

    def _register(self, action: Register) -> None:
        packet = action.subscribe
        gateway = self.listener.gateway
        future = self._submit(
            gateway.subscribe(
                self.client_id, self.queue, self.user_id, packet.topics, packet.subscription_identifier
            )
        )

        def then(subscribed: Subscribed) -> list[Action]:
            for (text, _), (_, reason) in zip(packet.topics, subscribed.answers, strict=True):
                if reason:
                    self._refused("subscribe", reason, text)
            if subscribed.queued:
                self.wake()  # retained publications for the new subscriptions
            codes = [
                translation.suback_code(code, reason, self.session.level)
                for code, reason in subscribed.answers
            ]
            return self.session.subscribed(packet.packet_id, codes)

        self._step(future, then, 1)

    def _refused(self, packet: str, reason: int, topic: str) -> None:
        """Log and count a PUBLISH or SUBSCRIBE (``packet``: "publish" or "subscribe") the
        broker refused, by its reason: the ACL's (not authorised), the topic's (longer than
        MQ's topic strings) or the broker's own (``$`` topics), never one for another."""
        because, counted = REFUSALS.get(reason, (reason_name(reason), reason_name(reason)))
        self.listener.refused(counted or packet)
        log.warning(
            f"mqtt {NOUNS[packet]} refused: {because}",
            extra={
                "client_id": self.client_id,
                "user": self.user_id,
                "topic": topic[:TOPIC_LOGGED],
                "topic_length": len(topic),
                "reason": reason,
                "reason_name": reason_name(reason),
            },
        )

    def _deregister(self, action: Deregister) -> None:
        packet = action.unsubscribe
        gateway = self.listener.gateway
        future = self._submit(gateway.unsubscribe(self.client_id, self.queue, self.user_id, packet.topics))

        self._step(future, lambda _: self.session.unsubscribed(packet.packet_id, len(packet.topics)), 1)

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
                    _abandon(steps)
                    await self._end(Close(self._failure(exc), self._will()))
                    return
                if step.count:
                    self.listener.intake.answered(self, self._held, step.count, step.size)
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

    def _write(self, packets: Sequence[Packet]) -> None:
        """Write ``packets`` in one write."""
        if not packets or self.stream.is_closing():
            return
        level = self.session.level
        data = b"".join([encode(packet, level) for packet in packets])
        self.listener.count_packets("out", packets)
        self.listener.count_bytes("out", len(data))
        self.bytes_out += len(data)
        self.stream.write(data)

    def _will(self) -> Any:
        connect = self.session.connect
        return None if connect is None else connect.will

    def _failure(self, exc: BaseException) -> str:
        """Why a connection whose durable work failed is closed. The client hears of it by the
        close, with nothing acknowledged that was not committed: a QoS 1/2 publication comes
        again once it reconnects. A database outage is the process's to log (once, as a
        warning), and so is this node's lease lost (``membership``); any other failure is
        logged here."""
        if database_unavailable(exc):
            return UNAVAILABLE
        if isinstance(exc, takeover.UNAVAILABLE):
            return exc.detail
        log.warning("mqtt work failed; closing", extra={"client_id": self.client_id, "error": repr(exc)})
        return f"internal error: {exc!r}"

    def _work_failed(self, exc: BaseException) -> None:
        """Work nobody awaited failed (acknowledgements not recorded): the session as the client
        and this connection know it is no longer what is stored, so the connection ends, and
        the client resumes from what is stored."""
        self.perform(self.session.connection_lost(self._failure(exc)))

    # -- opening and ending ----------------------------------------------------------------

    async def _open(self, action: Open) -> list[Action]:
        """Authenticate the client and open its session; refuse it with return code 3 (server
        unavailable, so it tries again later) while the database is."""
        try:
            return await self._open_session(action)
        except Exception as exc:
            if not database_unavailable(exc) and not isinstance(exc, takeover.UNAVAILABLE):
                raise
            self.listener.detach(self)
            self.queue = ""
            self.listener.refused("connect")
            return self.session.refused(CONNACK_SERVER_UNAVAILABLE)
        finally:
            self._settle_admission()

    def _settle_admission(self) -> None:
        """The connection is no longer half-open (its CONNECT answered, or it has ended)."""
        if self._half_open:
            self._half_open = False
            self.listener.admission.settled()

    async def _open_session(self, action: Open) -> list[Action]:
        login = await self.listener.logins.check(action.connect, self.stream.principal, self.address)
        if login.code:
            self.listener.refused("throttled" if login.throttled else "connect")
            log.warning(
                "mqtt connection refused",
                extra={
                    "client_id": action.client_id,
                    "user": action.connect.username,
                    "address": self.address,
                    "return_code": login.code,
                    **login.throttled,
                },
            )
            return self.session.refused(login.code)
        self.user_id = user_id = login.principal
        await self.listener.take_over(action.client_id, self)
        self.queue = sessions.queue_for(action.client_id)
        gateway = self.listener.gateway
        expiry = self.session.expiry
        job = gateway.open(action.connect, action.client_id, user_id, self.address, self.deliver, expiry)
        opened: Opened = await takeover.opened(self.listener, action.client_id, job)
        self.listener.attach(self)
        self._window = opened.window
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
        """Close the socket, then publish the will (if the connection ended without
        DISCONNECT) and discard a clean session or mark a persistent one offline. While the
        database is unavailable that is retried until it is done (a stopping listener gives up
        after ``STOP_GRACE_SECONDS``: another node, or its own next start, releases the
        session, its will published); a new
        connection with the same client id waits for it."""
        self.closing = True
        self.listener.deadlines.discard(self)
        self.stream.close()  # at once: the client has nothing more to hear (what was written goes first)
        steps = self._ending(close)
        try:
            await self._finish(steps)
        except Exception as exc:
            log.warning(
                "mqtt session not ended cleanly", extra={"client_id": self.client_id, "error": repr(exc)}
            )
        finally:
            # Only now: a connection with the same client id waits until this one has ended.
            self._settle_admission()
            self.listener.intake.forget(self, self._held)
            self.listener.detach(self)
            self.listener.ended(self)
            log.info("mqtt client disconnected", extra={"client_id": self.client_id, "reason": close.reason})
            if self._pumping is not None and self._pumping is not asyncio.current_task():
                self._pumping.cancel()
            self.done = True
            for waiter in self._waiters or ():
                if not waiter.done():
                    waiter.set_result(None)

    def _ending(self, close: Close) -> deque[Callable[[], Awaitable[Any]]]:
        """The durable work that ends this connection's session, in order. A will that waits
        (MQTT 5.0's Will Delay Interval) stays with the session, offline, until it is due."""
        gateway, listener = self.listener.gateway, self.listener
        steps: deque[Callable[[], Awaitable[Any]]] = deque()
        owned = bool(self.queue) and listener.owns(self)
        delay = self.session.will_delay if owned and close.will is not None else 0
        if close.will is not None and self.queue and not delay:
            publish = will_publication(close.will)
            steps.append(lambda: self._publish_will(publish))
        if owned:
            if self.clean:
                job = gateway.close(self.client_id, self.queue)
            else:
                expiry = self.session.expiry if self.session.expiry_changed else None
                job = gateway.offline(self.client_id, expiry, close.will if delay else None, delay)
            steps.append(lambda: gateway.submit(job, lazy=not self.clean))
        return steps

    async def _publish_will(self, publish: Publish) -> None:
        gateway = self.listener.gateway
        refused = await gateway.submit(gateway.will(self.client_id, publish, self.user_id))
        if refused:
            self._refused("publish", refused, publish.topic)
        else:
            self.listener.metrics.mqtt.wills.inc()

    async def _finish(self, steps: deque[Callable[[], Awaitable[Any]]]) -> None:
        """Carry out ``steps``; while the database is unavailable, retry them."""
        backoff = Backoff()
        while steps:
            try:
                await steps[0]()
            except Exception as exc:
                if not database_unavailable(exc):
                    raise
                if self.listener.given_up():
                    log.warning(
                        "mqtt session not ended: the database is unavailable and the listener stops",
                        extra={"client_id": self.client_id, "will_lost": len(steps) > 1},
                    )
                    return
                await asyncio.sleep(backoff.next())
                continue
            steps.popleft()

    def sharing(self) -> None:
        """A shared subscription of the session's has messages its members here had no room
        for: an acknowledgement is a reason to drain (and deal them) again."""
        self._sharing = True

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
                    self._sharing = drained.sharing
                    if drained.blocked:
                        self._blocked = True
                        break
                    if not drained.more:
                        break
        except Exception as exc:
            if not database_unavailable(exc):
                self.perform(self.session.connection_lost(self._failure(exc)))
                return
            # Nothing was taken: the watcher looks at every session queue again once the
            # database answers, and wakes this connection if its queue holds something.
            self._dirty = True
            self.listener.rescan()
        finally:
            self._pumping = None

    def deliver(self, publications: list[Publish]) -> None:
        """Send publications the gateway has committed for this client (QoS 1/2 ones numbered
        and stored), in one write. A QoS 0 one that finds the client's unsent output over
        ``mqtt_max_output_bytes`` (it does not read) is dropped, so the bound holds to within
        one message; QoS 1/2 ones are stored before they are written, and once the client's
        window is full the rest wait on its session queue: a slow client never holds up the
        others."""
        if self.stream.is_closing():
            return
        limit = self.listener.settings.mqtt_max_output_bytes
        backlog = self.stream.backlog()
        packets: list[Publish] = []
        for publish in self.session.deliver(publications):
            if publish.qos or backlog <= limit:
                packets.append(publish)
                backlog += len(publish.payload) + len(publish.topic)
            else:
                self._shed(backlog)
        if backlog <= limit:
            self._shedding = False
        self._write(self.session.aliased(packets))  # only what is written sets a topic alias

    def _shed(self, backlog: int) -> None:
        """Drop a QoS 0 delivery: counted each time, logged once per spell of not reading."""
        self.listener.metrics.mqtt.slow_dropped.inc()
        if not self._shedding:
            self._shedding = True
            log.warning(
                "mqtt deliveries dropped: client not reading",
                extra={"client_id": self.client_id, "unsent_bytes": backlog},
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
        takeovers through the database); only the ``primary`` one releases its node's earlier
        run's sessions at start and runs what is one per node (housekeeping, ``$SYS``,
        bridges: the first and the last under a lease, one node of the cluster each)."""
        self.qm = qm
        self.primary = primary
        self.shared = shared
        self.settings = settings
        self.endpoints = list(endpoints)
        self.metrics = metrics
        self.gateway = Gateway(qm, settings, metrics)
        # What MQTT 5.0 clients are told and held to (receive maximum: the unrouted packets a
        # connection may have before it is no longer read).
        self.limits = Limits(
            receive_maximum=min(settings.mqtt_max_unrouted, 65535),
            topic_alias_maximum=settings.mqtt_topic_alias_maximum,
            maximum_packet_size=settings.mqtt_max_packet_size,
            session_expiry_maximum=settings.mqtt_session_expiry,
            response_prefix=settings.mqtt_response_information,
        )
        self.admission = Admission(settings.mqtt_max_connect_rate, settings.mqtt_max_half_open)
        self.intake = Intake(
            settings.mqtt_max_unrouted,
            settings.mqtt_max_unrouted_bytes,
            settings.mqtt_max_unrouted_total,
            settings.mqtt_max_unrouted_total_bytes,
        )
        self.clients: dict[str, Connection] = {}  # by client id, once their session is open
        self.connections: set[Connection] = set()
        self.deadlines = Deadlines()
        self._by_queue: dict[str, Connection] = {}
        # Shared subscriptions' queues being dealt to their members here, and those that
        # received messages meanwhile (dealt again when the task has done).
        self._dealing: dict[str, asyncio.Task[None]] = {}
        self._deal_again: set[str] = set()
        # Connections whose session was attached and has gone, by client id, until the traffic
        # chore takes them to write their last byte counts (``housekeeping.Traffic``).
        self._departed: dict[str, Connection] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._stopping_since: float | None = None  # time.monotonic()
        self.stopped = threading.Event()
        self.health = metrics.health
        self.ready = threading.Event()
        self.logins = Logins(qm, settings, metrics.mqtt)
        self.membership = Membership(self)
        # This thread's counts, collected for /metrics and $SYS (broker.service.metrics.Tally).
        self._packet_counts = metrics.mqtt.packets.part()
        self._byte_counts = metrics.mqtt.bytes.part()

    # -- lifecycle -------------------------------------------------------------------------

    def run(self) -> None:
        """Serve until :meth:`stop` (runs its own event loop: call it on a thread)."""
        with asyncio.Runner(loop_factory=loop_factory(self.settings.event_loop)) as runner:
            runner.run(self._serve())

    def stop(self) -> None:
        """Stop accepting, end every connection (publishing wills), finish the durable work."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            loop.call_soon_threadsafe(stop.set)

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self.gateway.start(", ".join(str(e) for e in self.endpoints))
        self.gateway.lease_lost = partial(self._loop.call_soon_threadsafe, self.membership.lost)
        servers: list[Server] = []
        chores: list[asyncio.Task[None]] = []
        watcher = SupervisedThread(WATCHER_TASK, self._watch, self.health)
        try:
            await self.membership.start()
            for endpoint in self.endpoints:
                servers.append(
                    await endpoint.start(
                        self._accept, self.settings.mqtt_max_packet_size, self.admission, shared=self.shared
                    )
                )
            watcher.start()
            chores += [asyncio.create_task(chore, name=name) for name, chore in self._chores()]
            log.info(
                "mqtt listener started",
                extra={
                    "listeners": ", ".join(str(e) for e in self.endpoints),
                    "event_loop": type(self._loop).__module__.partition(".")[0],  # uvloop or asyncio
                },
            )
            for endpoint in self.endpoints:  # as the API's: one line per address, the same fields
                log.info("listening", extra={"listener": endpoint.kind, "url": str(endpoint)})

            self.ready.set()
            await self._stop.wait()
        finally:
            self._stopping_since = time.monotonic()
            for server in servers:
                server.close()
            for chore in chores:
                chore.cancel()
            await asyncio.gather(*chores, return_exceptions=True)
            ending = list(self.connections)
            for connection in ending:
                lost = connection.session.connection_lost(
                    "broker shutting down", ReasonCode.SERVER_SHUTTING_DOWN
                )
                connection.perform(lost)
            await asyncio.gather(*(c.closed() for c in ending))
            self.stopped.set()
            watcher.join(timeout=5)
            self.gateway.stop()
            self.logins.close()
            log.info("mqtt listener stopped")

    @property
    def stopping(self) -> bool:
        return self._stopping_since is not None

    def given_up(self) -> bool:
        """Whether work waiting for the database is given up: the listener has been stopping
        for ``STOP_GRACE_SECONDS``."""
        since = self._stopping_since
        return since is not None and time.monotonic() - since > STOP_GRACE_SECONDS

    def _chores(self) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        """(name, coroutine) of what runs beside the connections, each supervised: disconnect
        requests (operators', and takeovers by other listener processes) in every listener;
        the once-per-broker chores, ``$SYS`` and the bridges in the primary."""
        health = self.health
        chores = [
            (name, every(name, seconds, step, health)) for name, seconds, step in housekeeping.chores(self)
        ]
        if not self.primary:
            return chores
        interval = self.settings.mqtt_sys_interval
        if interval:
            step = partial(systopics.publish, self, time.monotonic())
            chores.append(("mqtt-sys", every("mqtt-sys", interval, step, health, at_once=True)))
        for config in bridging.load(self.settings.mqtt_bridges):
            name = f"mqtt-bridge-{config.name}"
            chores.append((name, supervise(name, partial(self._bridge, config, name), health)))
        return chores

    async def _bridge(self, config: bridging.BridgeConfig, name: str) -> None:
        """A bridge, run whenever this member holds its lease (one node of the cluster runs
        it): a new one each time it runs."""
        await bridging.leased(self, config, lambda: Bridge(self, config, name).run())

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
            current.perform(
                current.session.connection_lost("session taken over", ReasonCode.SESSION_TAKEN_OVER)
            )
            await current.closed()
        self.clients[client_id] = connection

    def attach(self, connection: Connection) -> None:
        self.clients[connection.client_id] = connection
        self._by_queue[connection.queue] = connection

    def owns(self, connection: Connection) -> bool:
        """Whether ``connection`` still holds its session (no other has taken it over)."""
        return self.clients.get(connection.client_id) is connection

    async def orphan_all(self, reason: str) -> None:
        """End every connection as a lost one (``reason``), without its session's end (no
        will, no offline mark: the sessions are no longer this member's); return once they
        are closed."""
        ending = list(self.connections)
        for connection in ending:
            self.detach(connection)
            connection.queue = ""
            connection.perform(connection.session.connection_lost(reason))
        await asyncio.gather(*(connection.closed() for connection in ending))

    def detach(self, connection: Connection) -> None:
        if self._by_queue.get(connection.queue) is connection:
            del self._by_queue[connection.queue]
            self._departed[connection.client_id] = connection  # its last bytes are yet to be written
        if self.owns(connection):
            del self.clients[connection.client_id]

    def take_departed(self) -> dict[str, Connection]:
        """The connections whose session has gone since the last call, by client id."""
        taken, self._departed = self._departed, {}
        return taken

    # -- deliveries ------------------------------------------------------------------------

    def _watch(self, stop: threading.Event) -> None:
        """Wake the connections whose session queue received messages. When only "something
        changed" is known (SQLite's backstop reading, a lost LISTEN connection, a drain that
        failed), the depth counters say which session queues hold messages: one read, at most
        every ``SCAN_SECONDS``, rather than a wake-up (and a drain) of every connection. A
        read that fails (the database is unavailable) is tried again until it works: what
        arrived meanwhile is found then. A (re)started watcher reads them at once."""
        arrivals = self.qm.notifier.observe()
        last_scan = 0.0  # time.monotonic() of the last read of the depth counters
        scan_due: float | None = time.monotonic()  # when to read them next, if asked to
        backoff = Backoff()
        try:
            while not self.stopped.is_set() and not stop.is_set():
                wait = 1.0 if scan_due is None else max(0.0, scan_due - time.monotonic())
                names, everything = arrivals.take(wait)
                if everything and scan_due is None:
                    scan_due = last_scan + SCAN_SECONDS
                if scan_due is not None and time.monotonic() >= scan_due:
                    try:
                        names.update(self.qm.nonempty_under(sessions.QUEUE_PREFIX))
                    except Exception as exc:
                        self.health.failed(WATCHER_TASK, exc)
                        scan_due = time.monotonic() + backoff.next()
                    else:
                        self.health.succeeded(WATCHER_TASK)
                        backoff.reset()
                        scan_due = None
                        last_scan = time.monotonic()
                self._wake_queues(names)
        finally:
            arrivals.close()

    def rescan(self) -> None:
        """Have the watcher read which session queues hold messages (as soon as it can)."""
        self.qm.notifier.announce_everything()

    def _wake_queues(self, names: set[str]) -> None:
        waking = [c for name in names if (c := self._by_queue.get(name)) is not None]
        shares = [name for name in names if name.startswith(sessions.SHARE_QUEUE_PREFIX)]
        if (waking or shares) and self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake, waking, shares)

    def _wake(self, connections: list[Connection], shares: list[str]) -> None:
        _wake_all(connections)
        for name in shares:
            self._deal_again.add(name)
            if name not in self._dealing:
                self._dealing[name] = asyncio.get_running_loop().create_task(self._deal(name))

    async def _deal(self, queue: str) -> None:
        """Have what the queue of a shared subscription holds dealt to its members connected
        here, as far as their in-flight windows allow; once those are full, their
        acknowledgements have it dealt again (``Connection.sharing``)."""
        gateway = self.gateway
        try:
            while queue in self._deal_again:
                self._deal_again.discard(queue)
                while True:
                    dealt: Drained = await gateway.submit(gateway.deal(queue))
                    if dealt.blocked:
                        for member in dealt.members:
                            if (connection := self._by_queue.get(member)) is not None:
                                connection.sharing()
                        break
                    if not dealt.more:
                        break
        except Exception as exc:
            if not database_unavailable(exc):
                log.warning("mqtt shared subscription not dealt", extra={"queue": queue, "error": repr(exc)})
            self.rescan()
        finally:
            self._dealing.pop(queue, None)

    # -- counters --------------------------------------------------------------------------

    def count_packets(self, direction: str, packets: Sequence[Packet]) -> None:
        """Count many packets at the cost of one addition per run of one kind (a read or a
        write is mostly one kind)."""
        counts = self._packet_counts
        kind: type | None = None
        count = 0
        for packet in packets:
            if type(packet) is kind:
                count += 1
                continue
            if count:
                counts[direction, kind] = counts.get((direction, kind), 0) + count
            kind, count = type(packet), 1
        if count:
            counts[direction, kind] = counts.get((direction, kind), 0) + count

    def count_bytes(self, direction: str, size: int) -> None:
        counts = self._byte_counts
        counts[direction] = counts.get(direction, 0) + size

    def refused(self, what: str) -> None:
        self.metrics.mqtt.refused.labels(what).inc()


def _itself(action: Action, _: object) -> list[Action]:
    """A step's answer that is ``action`` itself, whatever the step awaited (nothing)."""
    return [action]
