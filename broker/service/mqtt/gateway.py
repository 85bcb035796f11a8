"""The listener's durable work, committed in shared batches (group commit).

Every connection hands its durable work (route a PUBLISH, register a SUBSCRIBE, open a
session, take messages for delivery, record acknowledgements) to the one gateway thread as
a job. The thread takes every job waiting, carries them all out in ONE unit of work and
commits, then answers each job's future: many connections' QoS 1/2 publications cost one
transaction, and a PUBACK or PUBREC is only ever sent for a publication whose routing has
committed. The batch's writes go in one statement per table (the QoS 2 ids recorded and
forgotten, the outbound runs stored, rewritten and deleted, the deliveries put). The QoS 1/2
messages a batch sends one session are one run (``broker.store.mqtt.OutboundRun``), and the
acknowledgements mark bits of the runs they name (``broker.service.mqtt.inflight``): a few
rows per batch, not one per delivery and another per acknowledgement.

Publications are routed here, in the listener's process, by the one engine against a
:class:`~broker.service.effect_writer.EffectWriter`'s in-memory state (kept in step with the
other processes through the change log), which writes the effects as the routing loop's
does. Routing in the listener rather than putting on the stream saves a
second transaction and a wake-up per publication, and is what lets the PUBACK say "routed"
rather than "queued".

Deliveries to a connected client whose session queue is empty (an :class:`Outlet` that is
not ``behind``) skip that queue: QoS 1/2 ones are numbered and stored as the session's
outbound messages in the transaction that routes the publication, QoS 0 ones are not
stored at all, and all are sent once it has committed, in commit order. A delivery to a
session that is offline, behind or at its in-flight limit goes to its queue as any
subscriber's would, and the session is behind until a drain finds the queue empty, so a
publication never overtakes one queued before it.

A batch of publications and acknowledgements alone (:class:`Deferred` jobs) routes against
the in-memory state once one query outside any transaction has shown it current (QoS 0
publications alone: not even that, while it is fresher than ``FRESH_SECONDS``), and writes
what it leaves in one transaction after it: on PostgreSQL, when those are the session
tables' rows alone, its statements and the COMMIT in one exchange with the server. A batch
of QoS 1 publications then costs two exchanges (the check, then the writes and COMMIT), not
one each for BEGIN, the check, every statement and COMMIT.

A batch that fails is carried out again one job at a time, so one bad job fails alone.

The gateway is a member of the MQTT cluster (``broker.store.nodes``): the sessions it opens
record its owner name, every batch that writes asserts in its transaction that the member is
alive (``nodes.guard``), and a batch failed by that guard tells the listener, whose lease was
taken (``broker.service.mqtt.membership``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from sqlalchemy import Connection

from broker.core import engine
from broker.core.cluster import Member
from broker.core.effects import Deliver, Effect, Outcome, Put
from broker.core.state import BrokerState, QueueInfo
from broker.core.subscription import Identity
from broker.core.topics import matches, server_topic
from broker.protocol import psc, pscr, rfh2
from broker.protocol.mqtt.codec import encode
from broker.protocol.mqtt.errors import MqttProtocolError
from broker.protocol.mqtt.packets import MQTT_5, SUBACK_FAILURE, Connect, Publish, Will
from broker.protocol.mqtt.session import (
    Outbound,
    Window,
    ends_with_connection,
    inflight_limit,
    session_expiry,
    will_delay,
    will_publication,
)
from broker.protocol.options import RegOpt
from broker.service.config import Settings, node_name
from broker.service.effect_writer import EffectWriter, UnitOfWorkQueues
from broker.service.health import database_unavailable
from broker.service.metrics import BrokerMetrics
from broker.service.mqtt import translation
from broker.service.mqtt.inflight import Inflight
from broker.service.mqtt.shares import SHARE_DESCRIPTION, Hand, Share, share_of, share_queue
from broker.service.supervision import SupervisedThread
from broker.store import mqtt as sessions
from broker.store import nodes
from broker.store.changes import current_version, version_now
from queues import QueueManager, UnitOfWork, sql
from queues.database import held_connection_usable
from queues.definition import MAX_MAX_DEPTH
from queues.errors import MQError, UnknownObject
from queues.ids import now_ms
from queues.message import Message
from queues.owners import owner_name
from queues.reasons import Reason

log = logging.getLogger("broker.mqtt")

MAX_JOBS_PER_BATCH = 2000
# Publications a batch routes, about (a job is never split): a client's job that waits behind a
# flood of others waits for about this much routing (broker.service.mqtt.intake).
MAX_WEIGHT_PER_BATCH = 1000
URGENT_COMPANY = 200  # publications of the waiting clients that go in a batch with urgent jobs
LAZY_SECONDS = 0.05
FETCH_LIMIT = 500  # messages taken from one session queue in one statement
QOS_CACHE = 1024  # topics whose rules an outlet remembers
# A grant is the QoS granted with, beside it, MQTT 5.0's No Local and Retain As Published bits
# (the Subscription Options byte without Retain Handling, which acts at SUBSCRIBE only), and
# above them the subscription's Subscription Identifier (``broker.store.mqtt.ID_SHIFT``).
QOS_BITS, NO_LOCAL, AS_PUBLISHED, GRANT_BITS = 0b0011, 0b0100, 0b1000, 0b1111
SESSION_QUEUE = "MQTT session"  # the description of a session's queue
FRESH_SECONDS = 0.5  # how stale the state a batch without a unit of work routes against may be
GATEWAY_TASK = "mqtt-gateway"
KEEP = RegOpt(0)  # an UNSUBSCRIBE's DeregSub: no option, its filter alone

Send = Callable[[list[Publish]], None]


@dataclass(eq=False)
class Outlet:
    """A connected client's session as the gateway thread sees it: where its deliveries can
    go straight from a routing batch. ``send`` writes publications to the connection on
    ``loop``; ``behind``: its queue may hold messages, which go before any new delivery.
    ``lasting``: the session outlives the connection; one that ends with it (CleanSession, a
    Session Expiry Interval of 0) keeps what is in flight to it in memory alone, as nothing
    could ever send it again, and records no QoS 2 ids of its client's either."""

    client_id: str
    key: bytes  # the session's key (``broker.store.mqtt.session_key``)
    queue: str
    window: Window
    granted: dict[str, int]
    send: Send
    loop: asyncio.AbstractEventLoop
    behind: bool = True
    max_packet: int = 0  # the largest packet an MQTT 5.0 client takes (0: any)
    lasting: bool = True
    _rules: dict[str, Rules] = field(default_factory=dict)  # by topic, until the grants change

    def rules(self, topic: str) -> Rules:
        """How the session's subscriptions take a publication on ``topic`` (matching each filter
        once per topic, not per delivery)."""
        found = self._rules.get(topic)
        if found is None:
            if len(self._rules) >= QOS_CACHE:
                self._rules.clear()
            found = self._rules[topic] = Rules.of(self.granted, topic)
        return found

    def fits(self, publish: Publish, qos: int) -> bool:
        """Whether ``publish`` sent at ``qos`` is within the client's Maximum Packet Size; one
        that is not is dropped as if sent (section 3.1.2.11.4)."""
        if not self.max_packet:
            return True
        sent = replace(publish, qos=qos, packet_id=1 if qos else None)
        fits = len(encode(sent, MQTT_5))
        if fits <= self.max_packet:
            return True
        log.info(
            "mqtt delivery over the client's maximum packet size dropped",
            extra={"client_id": self.client_id, "topic": publish.topic[:256], "size": fits},
        )
        return False

    def grant(self, granted: list[tuple[str, int]]) -> None:
        self.granted.update(granted)
        self._rules.clear()

    def revoke(self, filters: tuple[str, ...]) -> None:
        for text in filters:
            self.granted.pop(text, None)
        self._rules.clear()


@dataclass(frozen=True, slots=True)
class Rules:
    """How a session's subscriptions that match one topic take a publication on it (one copy
    whatever their number): the highest QoS granted, whether RETAIN goes as published and the
    Subscription Identifiers the copy carries (section 3.3.4: all of theirs); and the same for
    its own client's publications, the No Local subscriptions left out (``own_qos`` -1: every
    one of them is No Local, and its own publications are not sent to it)."""

    qos: int
    as_published: bool
    own_qos: int
    own_as_published: bool
    ids: tuple[int, ...] = ()
    own_ids: tuple[int, ...] = ()

    @classmethod
    def of(cls, granted: dict[str, int], topic: str) -> Rules:
        matching = [grant for text, grant in granted.items() if matches(text, topic)]
        others = [grant for grant in matching if not grant & NO_LOCAL]
        return cls(
            max((grant & QOS_BITS for grant in matching), default=0),
            any(grant & AS_PUBLISHED for grant in matching),
            max((grant & QOS_BITS for grant in others), default=-1),
            any(grant & AS_PUBLISHED for grant in others),
            _identifiers(matching),
            _identifiers(others),
        )


@dataclass(frozen=True, slots=True)
class Opened:
    present: bool
    awaiting_release: list[int]
    outbound: list[Outbound]
    behind: bool  # the session queue may hold messages: drain it
    # The in-flight window of a session that ends with its connection: its connection frees
    # the ids its client acknowledges itself (nothing was stored, :meth:`Gateway.acknowledged`
    # would have nothing to write), unless a share lent it deliveries (:attr:`Gateway.lent`).
    window: Window | None = None


@dataclass(frozen=True, slots=True)
class Held:
    """The session to open is held by another listener process (of this node or another):
    ``owner``, which must let it go first (``broker.service.mqtt.takeover``)."""

    owner: str


@dataclass(frozen=True, slots=True)
class Released:
    """What the release of a dead member's sessions did (``Gateway.release``)."""

    member: Member
    persistent: int  # sessions now offline
    clean: int  # sessions ended
    wills: int  # wills published


@dataclass(slots=True)
class Later:
    """A job's result that is known only once its batch's sessions are opened or closed
    (:meth:`Gateway.open`): the batch does that for all its jobs at once."""

    value: Any = None


@dataclass(frozen=True, slots=True)
class Opening:
    """A session to open in the batch (see :meth:`Gateway.open`)."""

    connect: Connect
    client_id: str
    user_id: str
    address: str
    send: Send | None
    loop: asyncio.AbstractEventLoop
    later: Later
    expiry: int | None = None  # MQTT 5.0's Session Expiry Interval (None: 3.1 or 3.1.1)

    @property
    def queue(self) -> str:
        return sessions.queue_for(self.client_id)


@dataclass(frozen=True, slots=True)
class _Resumed:
    """What the persistent sessions a batch resumes had: their messages in flight, their
    filters' QoS and their QoS 2 ids awaiting PUBREL, a query each for them all (a fleet
    failing over from a dead node resumes at once)."""

    runs: dict[str, list[sessions.OutboundRun]]
    granted: dict[str, dict[str, int]]
    awaiting_release: dict[str, list[int]]

    @classmethod
    def read(cls, conn: Connection, client_ids: list[str]) -> _Resumed:
        if not client_ids:
            return cls({}, {}, {})
        return cls(
            sessions.load_runs_of(conn, client_ids),
            sessions.granted_of(conn, client_ids),
            sessions.awaiting_release_of(conn, client_ids),
        )


@dataclass(frozen=True, slots=True)
class Drained:
    """What a drain of a session queue (or a share's) found: ``more`` may be waiting;
    ``blocked``: the in-flight window is full, so nothing was taken; ``sharing``: a shared
    subscription of the session's has messages its members had no room for (an
    acknowledgement of the session's is a reason to look again); ``members``: a share's
    members connected here."""

    more: bool
    blocked: bool = False
    sharing: bool = False
    members: tuple[str, ...] = ()


class _Direct:
    """The local queues whose deliveries the gateway hands over itself (the engine builds a
    message for them only if it goes on the queue after all): connected sessions' queues and
    the queues of shared subscriptions with members connected here."""

    __slots__ = ("_outlets", "_shares")

    def __init__(self, outlets: dict[str, Outlet], shares: dict[str, Share]) -> None:
        self._outlets = outlets
        self._shares = shares

    def __contains__(self, name: object) -> bool:
        return name in self._outlets or name in self._shares


class Batch:
    """One unit of work shared by the jobs of a batch (opened first, or only when a job or the
    writes need it: :class:`Deferred`): the state they route against, the writes they leave,
    carried out together in :meth:`write`, and the deliveries to send once it has committed."""

    def __init__(
        self,
        gateway: Gateway,
        uow: UnitOfWork | None,
        state: BrokerState,
        now: int,
        stack: contextlib.ExitStack,
    ) -> None:
        self.gateway = gateway
        self._uow = uow
        self._stack = stack
        self.state = state
        state.direct = gateway.direct  # the engine's deliveries to them come as Deliver effects
        if uow is None:
            state.queues = _BatchQueues(self)
        self.now = now
        self.effects: list[Effect] = []
        self.queued: set[str] = set()  # outlets' queues with deliveries among ``effects``
        self.received: list[tuple[str, int]] = []  # QoS 2 ids routed, awaiting PUBREL
        self.forgotten: list[tuple[str, int]] = []  # QoS 2 ids PUBREL'd
        self.sending: dict[bytes, list[sessions.OutboundMessage]] = {}  # new, by session key
        self.touched: set[sessions.OutboundRun] = set()  # runs acknowledged or PUBREC'd
        self.refused: Counter[str] = Counter()  # publications refused, by client id
        self.sends: dict[Outlet, list[Publish]] = {}
        self.numbered: list[tuple[Window, int]] = []  # given back if the batch fails
        self.opening: list[Opening] = []  # sessions to open, all at once (Gateway.open)
        self.closing: list[tuple[str, str]] = []  # (client id, queue) of clean sessions ending
        self.grants: dict[tuple[bytes, bytes], tuple[str, int] | None] = {}  # sessions.Grants
        self.offline: list[str] = []  # persistent sessions whose clients have gone (Gateway.offline)
        self.subscribed: set[str] = set()  # session queues a SUBSCRIBE queued for: its SUBACK goes first
        self._guarded = False  # the member's lease asserted in this transaction

    @property
    def uow(self) -> UnitOfWork:
        """The batch's unit of work, opened when a job first needs one: a batch of
        :class:`Deferred` jobs may need none until its writes."""
        if self._uow is None:
            gateway = self.gateway
            self._uow = self._stack.enter_context(gateway.qm.unit_of_work(on=gateway.connection()))
        return self._uow

    def commit(self) -> None:
        """Carry out the batch's writes; the unit of work commits as the batch's stack closes.
        Writes that only the batch's own statements make (no queue's messages, no state
        change), in a unit of work not yet opened, are committed with them in one exchange
        with the server (:meth:`queues.UnitOfWork.pipelined`)."""
        if self._uow is not None or self.effects:
            self.write()
        elif self.pending:
            with self.uow.pipelined():
                self.write()

    @property
    def durable(self) -> bool:
        """Whether the batch wrote to the database (so it has shown the database usable)."""
        return self._uow is not None

    @property
    def pending(self) -> bool:
        return bool(
            self.effects
            or self.received
            or self.forgotten
            or self.sending
            or self.touched
            or self.refused
            or self.grants
            or self.offline
        )

    def write(self) -> None:
        """Carry out the writes so far: deletions before insertions, as a QoS 2 id forgotten
        may be recorded again in the same batch. The new outbound messages are one run per
        session; the runs acknowledged or PUBREC'd are rewritten, or deleted with their last
        message. Only the effects' writes read anything back. The first write of a batch
        asserts the member's lease: one declared dead commits nothing more."""
        conn = self.uow.connection
        if not self._guarded:
            nodes.guard(conn, self.gateway.owner)
            self._guarded = True
        sessions.forget_received(conn, self.forgotten)
        sessions.record_received(conn, self.received)
        if self.touched:
            sessions.delete_runs(conn, [run for run in self.touched if not run.pending])
            sessions.update_runs(conn, [run for run in self.touched if run.pending])
        if self.sending:
            self._store_runs(conn)
        sessions.count_refused(conn, self.refused)
        sessions.set_grants(conn, self.grants)
        if self.offline:
            sessions.set_offline(conn, self.now, self.offline, owner=self.gateway.owner)
        self.gateway.writer.write(self.uow, self.effects)
        for pending in (self.forgotten, self.received, self.touched, self.sending, self.grants, self.offline):
            pending.clear()
        self.refused.clear()
        self.effects = []
        self.queued.clear()

    def _store_runs(self, conn: Any) -> None:
        """Store the new outbound messages, a run per session (more if their payloads are
        over ``broker.store.mqtt.RUN_BYTES``), and index them for the acknowledgements (of the
        sessions whose index is loaded: the others load it, runs included, when they need it)."""
        gateway = self.gateway
        runs = [
            run for key, new in self.sending.items() for run in sessions.new_runs(key, new, gateway.next_seq)
        ]
        sessions.store_runs(conn, runs)
        for run in runs:
            inflight = gateway.inflight.get(run.key)
            if inflight is not None:
                inflight.add(run)

    def route(
        self,
        message: Message,
        source_queue: str,
        live: Publish | None = None,
        headers: rfh2.RFH2Body | None = None,
        command: psc.Command | None = None,
        publisher: str = "",
    ) -> Outcome:
        """Route ``message`` (its MQRFH2 decoded as ``headers``, if given) as if taken from
        ``source_queue``; later jobs see its changes. Its deliveries to outlets that are
        caught up go straight out as ``live`` (the MQTT publication routed), the others to
        their queues. ``publisher``: the client id of ``live``'s client, whose own session's
        No Local subscriptions do not take it (that session is always this gateway's: its
        client is connected here)."""
        source = engine.source_of(self.state, source_queue)
        outcome = engine.route(message, source, self.state, self.now, headers=headers, command=command)
        self.state.apply_all(outcome.effects)
        outlets, shares = self.gateway.outlets, self.gateway.shares
        effects = self.effects
        # As sent: RETAIN=0 (a live delivery); one QoS 0 copy for all the QoS 0 deliveries.
        plain = Publish(live.topic, live.payload, properties=live.properties) if live is not None else None
        qos = 0 if live is None else live.qos
        for effect in outcome.effects:
            if type(effect) is Deliver:
                outlet = outlets.get(effect.queue)
                if outlet is not None and live is not None and plain is not None:
                    rules = outlet.rules(plain.topic)
                    own = bool(publisher) and outlet.client_id == publisher
                    granted, as_published = (
                        (rules.own_qos, rules.own_as_published) if own else (rules.qos, rules.as_published)
                    )
                    if granted < 0:
                        continue  # No Local: never its own client's
                    ids = rules.own_ids if own else rules.ids
                    if self._direct(outlet, plain, min(qos, granted), as_published and live.retain, ids):
                        continue  # its MQRFH2 message is never built
                elif (
                    live is not None
                    and (share := shares.get(effect.queue)) is not None
                    and self._share(share, effect, live)
                ):
                    continue
                effect = effect.put()
            if type(effect) is Put and not effect.q_mgr:
                if (outlet := outlets.get(effect.queue)) is not None:
                    outlet.behind = True
                    self.queued.add(effect.queue)
                elif (share := shares.get(effect.queue)) is not None:
                    share.behind = True
                    self.queued.add(effect.queue)
            effects.append(effect)
        return outcome

    def route_typed(self, typed: translation.Typed, source_queue: str) -> Outcome:
        """Route a command built in this process, as it was built (nothing parsed again)."""
        return self.route(typed.message, source_queue, headers=typed.headers, command=typed.command)

    def _direct(self, outlet: Outlet, plain: Publish, qos: int, retain: bool, ids: tuple[int, ...]) -> bool:
        """Deliver a publication at QoS ``qos`` (its own and the one granted, the lower) to a
        caught-up outlet without its queue (as ``plain``, its QoS 0 form, or numbered), RETAIN 1
        if ``retain`` (Retain As Published), with the Subscription Identifiers ``ids``; False if
        it must queue."""
        if outlet.behind:
            return False
        if retain:  # Retain As Published
            plain = replace(plain, retain=True)
        if ids:
            plain = _identified(plain, ids)
        if outlet.max_packet and not outlet.fits(plain, qos):
            return True  # dropped: not queued either
        if qos:
            window = outlet.window
            if not window.room:
                return False
            sent = self.outbound(outlet.key, self.number(window), plain, qos, kept=outlet.lasting)
        else:
            sent = plain
        self._send(outlet, sent)
        return True

    def _send(self, outlet: Outlet, sent: Publish) -> None:
        sends = self.sends.get(outlet)
        if sends is None:
            self.sends[outlet] = [sent]
        else:
            sends.append(sent)

    def _share(self, share: Share, effect: Deliver, live: Publish) -> bool:
        """Hand a live publication to a member of ``share`` connected here, unless the share's
        queue may hold messages (they go first); False if it must go on the queue."""
        if share.behind:
            return False
        publish = Publish(live.topic, live.payload, live.qos, properties=live.properties)
        return self.hand(share, publish, live.retain, effect.build) is not Hand.WAIT

    def hand(self, share: Share, publish: Publish, retain: bool, message: Callable[[], Message]) -> Hand:
        """Send ``publish`` (QoS as published) to the next member of ``share`` connected here
        that can take it now, at the lower of its QoS and the member's, with RETAIN ``retain``
        to one whose subscription has Retain As Published. A QoS 1 one is lent to the member
        until it is acknowledged (``message()``: what goes back on the share's queue should the
        member leave first, built only then)."""
        outlets = self.gateway.outlets
        too_big = full = False
        for skipped, member in enumerate(share.in_turn()):
            outlet = outlets.get(member)
            grant = None if outlet is None else outlet.granted.get(share.text)
            if outlet is None or grant is None:
                continue
            qos = min(publish.qos, grant & QOS_BITS)
            if qos and not outlet.window.room:
                full = True
                continue
            sent = replace(publish, qos=qos, retain=bool(retain and grant & AS_PUBLISHED))
            sent = _identified(sent, _identifiers([grant]))
            if not outlet.fits(sent, qos):
                too_big = True
                continue
            if qos:
                sent = self.outbound(outlet.key, self.number(outlet.window), sent, qos, kept=outlet.lasting)
                assert sent.packet_id is not None  # numbered
                if qos == 1:  # a QoS 2 one is its member's for good [MQTT-4.8.2-4, -5]
                    self.gateway.lend(outlet.key, sent.packet_id, share.queue, message)
            self._send(outlet, sent)
            share.advance(skipped)
            return Hand.HANDED
        return Hand.DROPPED if too_big and not full else Hand.WAIT

    def number(self, window: Window) -> int:
        """The next packet id of ``window`` (given back if the batch fails)."""
        packet_id = window.take()
        self.numbered.append((window, packet_id))
        return packet_id

    def outbound(
        self, key: bytes, packet_id: int, publish: Publish, qos: int, *, kept: bool = True
    ) -> Publish:
        """``publish`` as sent at QoS ``qos`` (1 or 2) with ``packet_id`` to the session whose
        key is ``key``, RETAIN as given: stored until it is acknowledged if ``kept`` (the
        session outlives its connection)."""
        topic, payload, retain = publish.topic, publish.payload, publish.retain
        if kept:
            message = (packet_id, topic, payload, qos, retain, publish.properties)
            sending = self.sending.get(key)
            if sending is None:
                self.sending[key] = [message]
            else:
                sending.append(message)
        return Publish(topic, payload, qos, retain, False, packet_id, publish.properties)

    def undo(self) -> None:
        """The batch failed: its packet ids are free again, and its outlets' queues may hold
        what its drains took (the jobs, carried out again, find out)."""
        for window, packet_id in self.numbered:
            window.free(packet_id)
        for outlet in self.sends:
            outlet.behind = True


class Deferred:
    """A job that reads nothing through the batch's unit of work before its writes, and whose
    routing decides nothing a concurrent writer could contradict (publications,
    acknowledgements): a batch of such jobs routes against the in-memory state once one query
    outside any transaction has shown it current, and opens its unit of work for the writes
    alone. A ``memory`` job (routing a QoS 0 publication) needs not even that query while the
    state is fresher than ``FRESH_SECONDS``. ``weight``: the publications it routes (a
    batch takes about ``MAX_WEIGHT_PER_BATCH`` of them)."""

    __slots__ = ("memory", "run", "weight")

    def __init__(self, run: Callable[[Batch], Any], *, memory: bool = False, weight: int = 1) -> None:
        self.run = run
        self.memory = memory
        self.weight = weight

    def __call__(self, batch: Batch) -> Any:
        return self.run(batch)


class Registering:
    """A job that registers or deregisters subscriptions of the session queue ``queue``: a
    batch reads the definitions of all such queues in one query before its jobs run (each
    registration names its queue as its destination), not one query each."""

    __slots__ = ("queue", "run")

    def __init__(self, queue: str, run: Callable[[Batch], Any]) -> None:
        self.queue = queue
        self.run = run

    def __call__(self, batch: Batch) -> Any:
        return self.run(batch)


@dataclass(frozen=True, slots=True)
class Subscribed:
    """A SUBSCRIBE's answers, (return code, reason) each, and whether the batch queued
    anything for the session meanwhile (retained publications): only then is there a drain."""

    answers: list[tuple[int, int]]
    queued: bool


class _BatchQueues:
    """The engine's view of local queues in a batch that may have no unit of work yet: read
    through the batch's, opened when the engine first asks."""

    __slots__ = ("_batch",)

    def __init__(self, batch: Batch) -> None:
        self._batch = batch

    def get(self, name: str, /) -> QueueInfo | None:
        return UnitOfWorkQueues(self._batch.uow).get(name)


Job = Callable[[Batch], Any]
Future = asyncio.Future[Any]


@dataclass(frozen=True, slots=True)
class Posted:
    """A job nobody awaits (:meth:`Gateway.post`): ``failed`` is called on ``loop`` if it fails."""

    loop: asyncio.AbstractEventLoop
    failed: Callable[[BaseException], None]


Answer = Future | Posted  # where a job's result goes
_POSTED = object()  # on the queue of jobs: something was posted (see Gateway.post)


@dataclass(frozen=True, slots=True)
class Item:
    """A job handed to the gateway thread, and where its result goes."""

    job: Job
    answer: Answer
    lazy: bool
    urgent: bool


class Gateway:
    """Runs jobs in batches, one transaction each, on its own thread."""

    def __init__(self, qm: QueueManager, settings: Settings, metrics: BrokerMetrics) -> None:
        self.qm = qm
        self.settings = settings
        self.metrics = metrics
        self.writer = EffectWriter(qm, settings)
        self.stream = next(iter(self.writer.config.streams))
        self.control = self.writer.config.control_queue
        self.outlets: dict[str, Outlet] = {}  # by session queue; the gateway thread's alone
        self.shares: dict[str, Share] = {}  # by share queue: those with members connected here
        self.direct = _Direct(self.outlets, self.shares)
        # The QoS 1 deliveries from shared subscriptions not yet acknowledged, by session key
        # and packet id: their share's queue and message, put back there if the member leaves.
        # The gateway thread's, but for a connection's look at whether its session's key is
        # there (set before any delivery lent to it is sent).
        self.lent: dict[bytes, dict[int, tuple[str, Callable[[], Message]]]] = {}
        # The index of the outbound messages in flight, by session key: loaded when a session
        # opens (or an acknowledgement comes for one not loaded), dropped when it ends.
        self.inflight: dict[bytes, Inflight] = {}
        # The member it is in the cluster: what the sessions it opens record as their holder.
        self.owner = owner_name("mqtt")
        self.node = node_name(settings)
        self.address = ""  # its MQTT listeners, for people
        # Called on the gateway's thread when a batch finds the member declared dead.
        self.lease_lost: Callable[[], object] | None = None
        self.health = metrics.health
        # Bounded by what submits to it, not here: a connection's jobs count in the listener's
        # Intake, which stops reading it (and, past the total, every connection holding work);
        # session opens wait for Admission's half-open places; the chores await each job.
        self._jobs: queue.SimpleQueue[Item | object | None] = queue.SimpleQueue()
        # Posted jobs wait here, not on _jobs: taking one off _jobs wakes the thread, and a
        # client's every PUBACK would cost a wake-up (and a hand-over of the interpreter lock).
        # Bounded by the deliveries in flight: the session acknowledges only packet ids it sent,
        # at most mqtt_max_inflight per client.
        self._posted: deque[Item] = deque()
        self._posted_told = False  # the thread has been woken for what _posted holds
        # Jobs taken off _jobs and not yet run: the urgent ones go first (see submit).
        self._urgent: deque[Item] = deque()
        self._rest: deque[Item] = deque()
        self._stopping = False
        self._thread = SupervisedThread(GATEWAY_TASK, self._run, self.health)
        self._seq = 0
        self._refreshed = 0.0  # time.monotonic() of the state's last refresh
        # The thread's own connection, for every batch (see connection), and on SQLite the
        # data version it read when the state was last known current.
        self._connection: Connection | None = None
        self._connection_used = 0.0  # time.monotonic() the batches last asked for it
        self._data_version: int | None = None

    def start(self, address: str = "") -> None:
        """Join the cluster as a member serving ``address`` (its MQTT listeners), and start
        the thread."""
        self.address = address
        with self.qm.unit_of_work() as uow:
            self.join(uow.connection, address, self.owner)
            self._seq = sessions.last_outbound_seq(uow.connection)
        self._thread.start()

    def join(self, conn: Connection, address: str, owner: str) -> None:
        """Register ``owner`` as a live member (at start; with a new owner name once the
        lease of the last one was lost)."""
        now = now_ms()
        nodes.register(conn, Member(owner, self.node, address, now, 1, now, 0))

    def stop(self) -> None:
        """Finish the jobs already handed in, then end the thread (and close its connection);
        the member leaves the cluster (what its connections left is released by another)."""
        self._jobs.put(None)
        self._thread.join(30)
        self._drop_connection()
        # The database away: it is declared dead later.
        with contextlib.suppress(Exception), self.qm.unit_of_work() as uow:
            nodes.leave(uow.connection, self.owner, now_ms())

    def submit(self, job: Job, *, lazy: bool = False, urgent: bool = True) -> asyncio.Future[Any]:
        """Run ``job`` in the next batch; the future (of the calling loop) gets its result.
        A ``lazy`` job (forgetting acknowledged messages: losing it costs a duplicate QoS 1
        delivery at most, never a loss) does not call for a commit of its own: it waits up
        to ``LAZY_SECONDS`` for a batch that commits anyway. A job that is not ``urgent`` (a
        connection's while it has others waiting) goes after the urgent ones of the next
        batches: a client flooding the broker delays the others by one batch at most. A
        connection's jobs keep their order: it submits nothing urgent while it has jobs
        waiting."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._jobs.put(Item(job, future, lazy, urgent))
        return future

    def post(self, job: Job, failed: Callable[[BaseException], None]) -> None:
        """Run ``job`` lazily (as :meth:`submit` does), its result awaited by nobody: an
        acknowledgement, one per delivery, needs no future of its own. If it fails, ``failed``
        is called with the error on the calling loop. Posting wakes the thread only if nothing
        posted is waiting already: the acknowledgements of a batch's deliveries cost one
        wake-up, not one each."""
        self._posted.append(Item(job, Posted(asyncio.get_running_loop(), failed), True, True))
        if not self._posted_told:
            self._posted_told = True
            self._jobs.put(_POSTED)

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def lend(self, key: bytes, packet_id: int, queue: str, message: Callable[[], Message]) -> None:
        """Note a delivery from the share whose queue is ``queue`` in flight to a member."""
        lent = self.lent.get(key)
        if lent is None:
            self.lent[key] = {packet_id: (queue, message)}
        else:
            lent[packet_id] = (queue, message)

    # -- the thread ------------------------------------------------------------------------

    def _run(self, _: threading.Event) -> None:
        """Take the jobs in batches until :meth:`stop` (which a job cannot be: the thread runs
        every job handed in before its stop, whatever its stop event says)."""
        while (pending := self._next_batch()) is not None:
            if not pending:  # woken for posted jobs another batch has taken
                continue
            jobs = [(item.job, item.answer) for item in pending]
            try:
                self._batch(jobs)
            except Exception as exc:  # a defect outside any job: their clients must hear of it
                self.health.failed(GATEWAY_TASK, exc)
                _settle({}, [(answer, exc, True) for _, answer in jobs])

    def _next_batch(self) -> list[Item] | None:
        """The jobs of the next batch (None once stopped and done): every urgent one waiting,
        then the others in the order they came, up to ``MAX_JOBS_PER_BATCH`` jobs and about
        ``MAX_WEIGHT_PER_BATCH`` publications. Waits for a first job; a batch of lazy jobs
        alone waits up to ``LAZY_SECONDS`` for company."""
        idle = not self._urgent and not self._rest
        if idle and (self._stopping or not self._queue(self._jobs.get())):
            return None
        self._take_waiting()
        lazy = all(item.lazy for lane in (self._urgent, self._rest) for item in lane)
        deadline = time.monotonic() + LAZY_SECONDS
        while lazy and not self._stopping and (wait := deadline - time.monotonic()) > 0:
            try:
                item = self._jobs.get(timeout=wait)
            except queue.Empty:
                break
            lazy = self._queue(item) and (not isinstance(item, Item) or item.lazy)
        self._take_posted()
        if not self._urgent and not self._rest:
            return [] if not self._stopping else None
        batch: list[Item] = []
        weight = 0
        for lane in (self._urgent, self._rest):
            while lane and len(batch) < MAX_JOBS_PER_BATCH and (not batch or weight < MAX_WEIGHT_PER_BATCH):
                item = lane.popleft()
                batch.append(item)
                weight += getattr(item.job, "weight", 1)
            weight = max(weight, MAX_WEIGHT_PER_BATCH - URGENT_COMPANY) if batch else 0
        return batch

    def _take_waiting(self) -> None:
        while len(self._urgent) + len(self._rest) < MAX_JOBS_PER_BATCH:
            try:
                item = self._jobs.get_nowait()
            except queue.Empty:
                break
            self._queue(item)
        self._take_posted()

    def _take_posted(self) -> None:
        """Move what was posted to the urgent lane (the flag first: a job posted meanwhile
        wakes the thread again, or is taken here)."""
        self._posted_told = False
        posted = self._posted
        while posted:
            self._urgent.append(posted.popleft())

    def _queue(self, item: Item | object | None) -> bool:
        """Put ``item`` in its lane (the posted jobs, for the wake-up that tells of them);
        False for the stop."""
        if item is None:
            self._stopping = True
            return False
        if isinstance(item, Item):
            (self._urgent if item.urgent else self._rest).append(item)
        else:
            self._take_posted()
        return True

    def _batch(self, jobs: list[tuple[Job, Answer]]) -> None:
        """Carry out ``jobs`` in one unit of work. If the database is unavailable, they all
        fail at once (the clients waiting are told; nothing was committed); if one of them
        fails otherwise, they are carried out again one by one, so that it fails alone."""
        try:
            batch, results = self._commit([job for job, _ in jobs])
        except Exception as exc:
            # The in-memory state and the index saw changes that were not committed. What was
            # lent stays with its members' sessions (sent again when they resume).
            self.writer.forget()
            self.inflight.clear()
            self.lent.clear()
            self._drop_connection()
            if database_unavailable(exc):
                self.health.failed(GATEWAY_TASK, exc)
                _settle({}, [(answer, exc, True) for _, answer in jobs])
                return
            if not self._alive():  # the guard failed the batch: every batch would fail alike
                _settle({}, [(answer, nodes.LeaseLost(self.owner), True) for _, answer in jobs])
                if self.lease_lost is not None:
                    self.lease_lost()
                return
            if len(jobs) > 1:
                log.warning("mqtt batch failed; running its jobs one by one", extra={"error": repr(exc)})
                for one in jobs:
                    self._batch([one])
                return
            log.exception("mqtt job failed")
            self.metrics.record_error("mqtt", repr(exc))
            _settle({}, [(jobs[0][1], exc, True)])
            return
        if batch.durable:
            self.health.succeeded(GATEWAY_TASK)
        _settle(
            batch.sends, [(answer, result, False) for (_, answer), result in zip(jobs, results, strict=True)]
        )

    def _commit(self, jobs: list[Job]) -> tuple[Batch, list[Any]]:
        """Carry out the jobs and the batch's writes, and commit. A batch of :class:`Deferred`
        jobs routes against the in-memory state if it is current, and opens a unit of work
        only for its writes (if they leave any); any other batch opens one first and brings
        the state up to date in it."""
        batch: Batch | None = None
        try:
            with contextlib.ExitStack() as stack:
                uow: UnitOfWork | None = None
                state = self._current(jobs)
                if state is None:
                    connection = self.connection()
                    seen = _data_version(connection)  # before the state is read, in a transaction
                    uow = stack.enter_context(self.qm.unit_of_work(on=connection))
                    self._refreshed = time.monotonic()
                    state = self.writer.state_in(uow)
                    self._data_version = seen
                batch = Batch(self, uow, state, now_ms(), stack)
                registering = [job.queue for job in jobs if isinstance(job, Registering)]
                if len(registering) > 1:
                    batch.uow.definitions(registering)
                results = [job(batch) for job in jobs]
                self._close_all(batch)
                self._open_all(batch)
                batch.commit()
            return batch, [result.value if isinstance(result, Later) else result for result in results]
        except BaseException:
            if batch is not None:
                batch.undo()
            raise

    def _current(self, jobs: list[Job]) -> BrokerState | None:
        """The in-memory state, if the jobs are all :class:`Deferred` and it is current: as of
        a version check made now (after the jobs came, so that whatever their clients were
        told had committed before they sent them is in it), or fresher than
        ``FRESH_SECONDS`` for ``memory`` jobs alone; None otherwise."""
        state = self.writer.state
        deferred = [job for job in jobs if isinstance(job, Deferred)]
        if state is None or len(deferred) < len(jobs):
            return None
        now = time.monotonic()
        if now - self._refreshed < FRESH_SECONDS and all(job.memory for job in deferred):
            return state
        connection = self.connection()
        seen = _data_version(connection)
        if seen is None or seen != self._data_version:  # on SQLite: someone else committed
            if self._version_now(connection) != self.writer.store.version:
                return None
            self._data_version = seen
        self._refreshed = now
        return state

    def _version_now(self, connection: Connection) -> int:
        """The state's committed version: on PostgreSQL read on the batches' own connection
        (idle between batches) in one exchange, where a pooled connection's transaction would
        cost a checkout and three (BEGIN, the read, ROLLBACK); on SQLite, whose batches'
        connection would start a transaction that the next batch must not find open, on a
        reading one."""
        if sql.can_commit_together(connection):
            return version_now(connection)
        with self.qm.reading() as conn:
            return current_version(conn)

    def _alive(self) -> bool:
        """Whether this member is still alive, as far as the database answers."""
        try:
            with self.qm.reading() as conn:
                return nodes.holds(conn, self.owner)
        except Exception:
            return True

    def connection(self) -> Connection:
        """The connection every batch uses, held for as long as it works: a connection from the
        pool for each batch cost more than a small batch's own statements (its checkout, and
        on SQLite a cold page cache), and on SQLite it tells for nothing whether anybody else
        has committed since the state was last known current (``PRAGMA data_version``)."""
        held, now = self._connection, time.monotonic()
        if held is None or not held_connection_usable(held, self._connection_used):
            self._drop_connection()
            held = self._connection = self.qm.engine.connect()
            _end_when_stopped(held, self.settings.node_timeout)
        self._connection_used = now
        return held

    def _drop_connection(self) -> None:
        """Close the held connection (a batch failed on it: the next opens another)."""
        held, self._connection, self._data_version = self._connection, None, None
        if held is not None:
            with contextlib.suppress(Exception):
                held.close()

    # -- jobs ------------------------------------------------------------------------------

    def open(
        self,
        connect: Connect,
        client_id: str,
        user_id: str,
        address: str,
        send: Send | None = None,
        expiry: int | None = None,
    ) -> Job:
        """Open the stored session of ``client_id`` for this connection: a clean session
        starts empty; a persistent one resumes what it had (its queue outlives it), unless it
        has expired. ``expiry``: an MQTT 5.0 session's Session Expiry Interval as the session
        rules settled it (by default, as the CONNECT asks). With
        ``send`` (a connection's, called on this loop), deliveries may go straight to it
        once a drain has found its queue empty. The sessions a batch opens are opened
        together (:meth:`_open_all`): a wave of clients connecting is a few statements, not
        a few each."""
        loop = asyncio.get_running_loop()

        def job(batch: Batch) -> Later:
            later = Later()
            lasting = session_expiry(connect) if expiry is None else expiry
            batch.opening.append(Opening(connect, client_id, user_id, address, send, loop, later, lasting))
            return later

        return job

    def _open_all(self, batch: Batch) -> None:
        """Open the batch's sessions: their stored sessions read, their queues defined and
        their rows saved with a statement each for them all; only a persistent session
        resumed reads what it had, on its own."""
        openings = batch.opening
        if not openings:
            return
        batch.write()  # what the batch holds for these sessions so far, before they are read
        uow = batch.uow
        found = sessions.find_sessions(uow.connection, [opening.client_id for opening in openings], lock=True)
        openings = [opening for opening in openings if not self._held(opening, found.get(opening.client_id))]
        if not openings:
            return
        present: dict[str, sessions.StoredSession] = {}
        for opening in openings:
            stored = found.get(opening.client_id)
            lasting = stored is not None and not stored.clean and not opening.connect.clean_session
            if lasting and stored is not None and not self._expired(stored, batch.now):
                present[opening.client_id] = stored
            elif stored is not None:
                self._discard(batch, stored.client_id, stored.queue)
            if stored is not None and _will_ends(stored, opening.client_id in present, batch.now):
                self._end_will(batch, stored)
        names = [opening.queue for opening in openings]
        uow.ensure_queues(names, max_depth=MAX_MAX_DEPTH, description=SESSION_QUEUE)
        saved = [self._saved(opening, present.get(opening.client_id), batch.now) for opening in openings]
        sessions.save_sessions(uow.connection, saved, existing=present.keys())
        definitions = uow.definitions(names)  # one query: which new sessions' queues hold messages
        resumed = _Resumed.read(uow.connection, list(present))
        for opening in openings:
            definition = definitions[opening.queue]
            waiting = definition is not None and uow.depth(opening.queue) > 0
            opening.later.value = self._opened(opening, resumed, waiting)

    def _expired(self, stored: sessions.StoredSession, now: int) -> bool:
        """Whether a stored session has outlived its expiry (housekeeping has yet to remove
        it): its client starts a new one, as if it were gone already."""
        return sessions.expired(stored, now, self.settings.mqtt_session_expiry)

    def _held(self, opening: Opening, stored: sessions.StoredSession | None) -> bool:
        """Whether another listener process holds the session ``opening`` opens (its answer
        is then :class:`Held`): one of a live member, or of a dead one not released yet."""
        if stored is None or not stored.online or not stored.node or stored.owner == self.owner:
            return False
        opening.later.value = Held(stored.owner)
        return True

    def _saved(
        self, opening: Opening, present: sessions.StoredSession | None, now: int
    ) -> sessions.StoredSession:
        """The session ``opening`` saves (``present``: the persistent one it resumes)."""
        connect = opening.connect
        return sessions.StoredSession(
            opening.client_id,
            opening.queue,
            opening.user_id,
            ends_with_connection(connect, opening.expiry),
            connect.protocol_level,
            opening.address,
            now if present is None else present.created_at,
            now,
            owner=self.owner,
            will=connect.will,
            keepalive=connect.keepalive,
            expiry=opening.expiry,
            receive_maximum=connect.properties.receive_maximum,
            topic_alias_maximum=connect.properties.topic_alias_maximum,
        )

    def _opened(self, opening: Opening, resumed: _Resumed, waiting: bool) -> Opened:
        """The session is saved: its index of messages in flight and its outlet; what a
        persistent one resumes (``resumed``: what the batch's resumed sessions had)."""
        client_id = opening.client_id
        present = client_id in resumed.granted
        runs = resumed.runs.get(client_id, [])
        self.inflight[sessions.session_key(client_id)] = Inflight(runs)
        rows = [row for run in runs for row in run.in_flight()]
        # Its messages go on after those another listener process stored.
        self._seq = max([self._seq, *(run.seq for run in runs)])
        # A session whose queue is empty (a new one's, a discarded one's emptied, a resumed one
        # that nothing was queued for) has nothing to drain before deliveries go straight to
        # the client; a put another process commits meanwhile is announced, and drained then.
        behind = waiting
        fleeting: Window | None = None
        if opening.send is not None:
            limit = inflight_limit(opening.connect, self.settings.mqtt_max_inflight)
            window = Window(limit, [row.packet_id for row in rows])
            granted = resumed.granted.get(client_id, {})
            key = sessions.session_key(client_id)
            outlet = Outlet(
                client_id, key, opening.queue, window, granted, opening.send, opening.loop, behind
            )
            outlet.max_packet = opening.connect.properties.maximum_packet_size or 0
            outlet.lasting = not ends_with_connection(opening.connect, opening.expiry)
            fleeting = None if outlet.lasting else window
            self.outlets[opening.queue] = outlet
            for text in granted:
                if (queue_name := share_queue(text)) is not None:
                    self._seat(queue_name, text, opening.queue)
                    behind = True  # a drain deals what its shares hold
        if not present:
            return Opened(False, [], [], behind, fleeting)
        outbound = [
            Outbound(
                Publish(
                    row.topic,
                    row.payload,
                    row.qos,
                    row.retain,
                    packet_id=row.packet_id,
                    properties=row.properties,
                ),
                row.released,
            )
            for row in rows
        ]
        return Opened(True, resumed.awaiting_release[client_id], outbound, behind)

    def offline(
        self, client_id: str, expiry: int | None = None, will: Will | None = None, delay: int = 0
    ) -> Job:
        """A persistent session's client has gone: it stays, marked offline (``expiry``: the
        Session Expiry Interval an MQTT 5.0 client's DISCONNECT changed it to), with ``will``,
        if given, to publish ``delay`` seconds from now unless its client is back first."""

        def job(batch: Batch) -> None:
            key = sessions.session_key(client_id)
            outlet = self.outlets.pop(sessions.queue_for(client_id), None)
            self._give_back(batch, client_id, key)
            if outlet is not None:
                self._unseat(outlet.queue, outlet.granted)
            self.inflight.pop(key, None)
            conn = batch.uow.connection
            if will is None:
                batch.offline.append(client_id)
            else:
                sessions.delay_wills(
                    conn, batch.now, [(client_id, will, batch.now + delay * 1000)], self.owner
                )
            if expiry is not None:
                sessions.set_expiry(conn, client_id, expiry)

        return job

    def will(self, client_id: str, publish: Publish, user_id: str) -> Job:
        """Publish the will of ``client_id``'s connection, which ended without DISCONNECT, and
        forget it in the same commit: it is published once, here or, should this member die
        first, by the one releasing its sessions. Returns the reason it was refused for, or 0."""

        def job(batch: Batch) -> int:
            refused = self._route(batch, client_id, publish, user_id, "")
            if refused:
                batch.refused[client_id] += 1
            sessions.clear_will(batch.uow.connection, client_id)
            return refused

        return job

    def release(self, owner: str) -> Job:
        """Release the sessions of ``owner``, a member declared dead, unless another member
        has: in one commit, its persistent sessions offline (their queues and messages in
        flight kept), its clean ones ended, the wills of its clients published. Returns what
        was done, or None."""

        def job(batch: Batch) -> Released | None:
            batch.write()
            conn = batch.uow.connection
            member = nodes.release(conn, owner, batch.now)
            if member is None:
                return None
            held = sessions.release_owner(conn, owner, batch.now)
            wills = self._release_wills(batch, held, owner)
            clean = [stored for stored in held if stored.clean]
            for stored in clean:
                self._discard(batch, stored.client_id, stored.queue, delete=True)
            return Released(member, len(held) - len(clean), len(clean), wills)

        return job

    def _release_wills(self, batch: Batch, held: list[sessions.StoredSession], owner: str) -> int:
        """Publish the wills of a dead member's clients, but keep those that wait (their Will
        Delay Interval) with their sessions, due from now; returns how many were published."""
        delayed: list[tuple[str, Will, int]] = []
        published = 0
        for stored in held:
            delay = will_delay(stored.will, stored.expiry)
            if stored.will is not None and delay:
                delayed.append((stored.client_id, stored.will, batch.now + delay * 1000))
            elif stored.will is not None:
                published += not self._end_will(batch, stored)
        sessions.delay_wills(batch.uow.connection, batch.now, delayed, owner)
        return published

    def _end_will(self, batch: Batch, stored: sessions.StoredSession) -> int:
        """Publish the will a stored session holds, if any (its client has gone, and the will
        is due or the session ends): the reason it was refused for, or 0."""
        if stored.will is None:
            return 0
        refused = self._route(batch, stored.client_id, will_publication(stored.will), stored.user_id, "")
        if not refused:
            self.metrics.mqtt.wills.inc()
        return refused

    def _end_sessions(self, batch: Batch, ending: list[sessions.StoredSession]) -> None:
        """Discard offline sessions, queues included, and publish the wills that waited on
        them (once they are gone: never to themselves)."""
        client_ids = [stored.client_id for stored in ending]
        waiting = sessions.take_wills(batch.uow.connection, client_ids=client_ids)
        for stored in ending:
            self._discard(batch, stored.client_id, stored.queue, delete=True)
        for stored in waiting:
            self._end_will(batch, stored)

    def due_wills(self, now: int) -> Job:
        """Publish the wills that waited and are due by the epoch ms ``now``, taken from their
        sessions in the same commit; returns how many."""

        def job(batch: Batch) -> int:
            batch.write()
            due = sessions.take_wills(batch.uow.connection, due_by=now)
            return sum(not self._end_will(batch, stored) for stored in due)

        return job

    def forget(self) -> Job:
        """Forget the sessions this member served: its lease was lost, they are others' now."""

        def job(_: Batch) -> None:
            self.outlets.clear()
            self.inflight.clear()

        return Deferred(job, memory=True)

    def close(self, client_id: str, queue_name: str) -> Job:
        """A clean session ends with its connection: subscriptions, rows, messages and queue
        go. Its subscriptions go at once (the batch's later publications do not reach it);
        its rows and queue with those of the batch's other sessions ending
        (:meth:`_close_all`): a wave of clients leaving is a few statements, not a few each."""

        def job(batch: Batch) -> None:
            outlet = self.outlets.pop(queue_name, None)
            key = sessions.session_key(client_id)
            self._give_back(batch, client_id, key)
            self.inflight.pop(key, None)
            batch.route_typed(translation.discard(queue_name, self.settings.admin_group), self.control)
            granted = self._granted(batch, client_id) if outlet is None else outlet.granted
            self._leave_all(batch, client_id, queue_name, granted)
            batch.closing.append((client_id, queue_name))

        return job

    def _close_all(self, batch: Batch) -> None:
        """Delete the rows and the queues of the clean sessions ending in the batch, after
        its other writes (deliveries made to them before they went go with them)."""
        if not batch.closing:
            return
        batch.write()
        client_ids, queues = zip(*batch.closing, strict=True)
        sessions.delete_sessions(batch.uow.connection, client_ids)
        batch.uow.delete_queues(queues)

    def expire(self, now: int) -> Job:
        """Discard the offline sessions expired by the epoch ms ``now`` (their own Session
        Expiry Interval, else ``mqtt_session_expiry``), queues included; returns them."""

        def job(batch: Batch) -> list[sessions.StoredSession]:
            batch.write()
            expired = sessions.expired_sessions(batch.uow.connection, now, self.settings.mqtt_session_expiry)
            self._end_sessions(batch, expired)
            return expired

        return job

    def delete_offline(self, client_id: str) -> Job:
        """Discard the session of ``client_id``, queue included, if no client is connected to
        it (an operator's deletion); returns it, or None."""

        def job(batch: Batch) -> sessions.StoredSession | None:
            batch.write()
            stored = sessions.find_session(batch.uow.connection, client_id)
            if stored is None or stored.online:
                return None
            self._end_sessions(batch, [stored])
            return stored

        return job

    def trim(self, limit: int) -> Job:
        """Keep at most ``limit`` messages on each offline session's queue, dropping the
        oldest (the newest state is what a device coming back wants); returns
        (client id, dropped) for each session trimmed, whose ``dropped`` count grows."""

        def job(batch: Batch) -> list[tuple[str, int]]:
            batch.write()
            uow = batch.uow
            offline = sessions.offline_sessions(uow.connection)
            defined = uow.definitions([stored.queue for stored in offline])  # one query for all
            trimmed: list[tuple[str, int]] = []
            for stored in offline:
                if defined[stored.queue] is None:
                    continue
                dropped = _drop_oldest(uow, stored.queue, uow.depth(stored.queue) - limit)
                if dropped:
                    sessions.count_dropped(uow.connection, stored.client_id, dropped)
                    trimmed.append((stored.client_id, dropped))
            return trimmed

        return job

    def refresh(self) -> Job:
        """Nothing but what a batch does first: bring the state up to date with what other
        processes committed (as a :class:`Deferred` job, one version check outside any
        transaction when nothing changed). An idle member's state would fall behind by every
        subscription the others register (a fleet's, on the node that then dies), for its first
        batch after a failover to read them all, with the fleet waiting."""
        return Deferred(lambda _: None)

    def traffic(self, counts: dict[str, tuple[int, int, int]]) -> Job:
        """Write the bytes in and out of each client's connection and the deliveries in flight
        to it held in memory alone (by client id) to the sessions this member holds, in a
        batch as its other session writes (no lock taken in another order than theirs)."""

        def job(batch: Batch) -> None:
            batch.write()
            sessions.record_traffic(batch.uow.connection, self.owner, counts)

        return job

    def _discard(
        self,
        batch: Batch,
        client_id: str,
        queue_name: str,
        *,
        delete: bool = False,
        granted: dict[str, int] | None = None,
    ) -> None:
        """Deregister the session's subscriptions (``granted``: its filters, if read already),
        leave its shared ones, drop its rows and the messages queued, and with ``delete`` its
        queue. Subscription rows the batch holds for it unwritten go too."""
        key = sessions.session_key(client_id)
        self._give_back(batch, client_id, key)
        self.outlets.pop(queue_name, None)
        self.inflight.pop(key, None)
        filters = dict(self._granted(batch, client_id) if granted is None else granted)
        for pair in [pair for pair in batch.grants if pair[0] == key]:
            if (row := batch.grants.pop(pair)) is not None:
                filters[row[0]] = row[1]
        batch.route_typed(translation.discard(queue_name, self.settings.admin_group), self.control)
        self._leave_all(batch, client_id, queue_name, filters)
        sessions.delete_session(batch.uow.connection, client_id)
        if delete:
            with contextlib.suppress(UnknownObject):
                batch.uow.delete_queue(queue_name)
        elif batch.uow.definitions([queue_name])[queue_name] is not None:
            while batch.uow.get_batch(queue_name, FETCH_LIMIT):
                pass

    def publish(self, client_id: str, publishes: Sequence[Publish], user_id: str, *, origin: str = "") -> Job:
        """Route PUBLISHes, in order; a QoS 2 id is recorded in the same commit. Returns the
        reason each was refused for (0: routed; MQRCCF_NOT_AUTHORIZED: the principal may not
        publish there; MQRCCF_TOPIC_ERROR: a topic longer than MQ's; MQRC_NOT_AUTHORIZED: a
        client's (``client_id``) topic starting with ``$``, the broker's own whatever the ACL
        says, MQTT 3.1.1 4.7.2). QoS 0 ones alone need no unit of work of their own."""

        exactly_once = any(publish.qos == 2 for publish in publishes)
        queue_name = sessions.queue_for(client_id) if exactly_once else ""  # its QoS 2 ids' session

        def job(batch: Batch) -> list[int]:
            routed: list[int] = []
            lasting = exactly_once and self._lasting(queue_name)
            for publish in publishes:
                refused = self._route(batch, client_id, publish, user_id, origin)
                if publish.qos == 2 and publish.packet_id is not None and lasting:
                    batch.received.append((client_id, publish.packet_id))
                if refused:
                    batch.refused[client_id] += 1
                routed.append(refused)
            return routed

        return Deferred(job, memory=not any(publish.qos for publish in publishes), weight=len(publishes))

    def _route(self, batch: Batch, client_id: str, publish: Publish, user_id: str, origin: str) -> int:
        """Route one PUBLISH of ``client_id`` (""; the broker's, a bridge's); the reason it was
        refused for, or 0. A client's on a ``$`` topic is refused whatever the ACL says."""
        if client_id and server_topic(publish.topic):
            return int(Reason.MQRC_NOT_AUTHORIZED)
        return self._publish_one(batch, publish, user_id, origin, client_id)

    def _publish_one(self, batch: Batch, publish: Publish, user_id: str, origin: str, publisher: str) -> int:
        """Route one PUBLISH of ``publisher``'s client; the reason it was refused for, or 0."""
        typed = translation.decoded_publication(publish, user_id, origin)
        outcome = batch.route(
            typed.message, self.stream, publish, typed.headers, typed.command, publisher=publisher
        )
        if publish.retain and not publish.payload:
            batch.route(translation.retained_deletion(publish.topic, user_id), self.stream)
        return outcome.reason if outcome.completion == pscr.ERROR else 0

    def subscribe(
        self,
        client_id: str,
        queue_name: str,
        user_id: str,
        topics: tuple[tuple[str, int], ...],
        identifier: int = 0,
    ) -> Job:
        """Register each filter (with its QoS, or MQTT 5.0's Subscription Options byte, and
        the SUBSCRIBE's Subscription Identifier ``identifier``, 0: none, replacing the one it
        had); returns (return code, reason) of each: the QoS granted and 0, or 0x80 and why it
        was refused (MQRCCF_NOT_AUTHORIZED, MQRCCF_TOPIC_ERROR...). The retained publications
        sent for them are queued, and sent at the QoS granted; none with Retain Handling 2, nor
        with 1 for a filter the session had already (registered NewPubsOnly, as an MQRFH2
        application would)."""

        key = sessions.session_key(client_id)

        def job(batch: Batch) -> Subscribed:
            answers: list[tuple[int, int]] = []
            granted: list[tuple[str, int]] = []
            outlet = self.outlets.get(queue_name)
            joined = False
            for text, options in topics:
                qos, handling = options & QOS_BITS, options >> 4 & 0b11
                try:
                    shared = share_of(text)
                except MqttProtocolError:  # a 3.1.1 client's: 5.0's are refused as they are read
                    answers.append((SUBACK_FAILURE, int(Reason.MQRCCF_TOPIC_ERROR)))
                    continue
                held = outlet is not None and text in outlet.granted
                if shared is not None:
                    typed = self._joining(batch, shared, client_id, user_id)
                else:
                    options_sent = translation.subscription_options(handling == 2 or (handling == 1 and held))
                    typed = translation.typed_registration((text,), queue_name, user_id, options=options_sent)
                outcome = batch.route_typed(typed, self.control)
                if outcome.completion == pscr.ERROR or outcome.refused_topics:
                    answers.append((SUBACK_FAILURE, outcome.reason))
                else:
                    if shared is None and held and not handling and not _sent_to(outcome, queue_name):
                        # A filter the session had: its retained publications are sent again.
                        batch.route_typed(translation.typed_update(text, queue_name, user_id), self.control)
                    answers.append((qos, 0))
                    granted.append((text, (options & GRANT_BITS) | identifier << sessions.ID_SHIFT))
                    if shared is not None and outlet is not None:
                        joined = True
                        self._seat(shared[0], text, queue_name)
            if refused := sum(1 for code, _ in answers if code == SUBACK_FAILURE):
                batch.refused[client_id] += refused
            batch.grants.update({(key, sessions.filter_key(text)): (text, grant) for text, grant in granted})
            if outlet is not None:
                outlet.grant(granted)
            queued = joined or queue_name in batch.queued
            if queued:
                batch.subscribed.add(queue_name)
            return Subscribed(answers, queued)

        return Registering(queue_name, job)

    def unsubscribe(self, client_id: str, queue_name: str, user_id: str, filters: tuple[str, ...]) -> Job:
        key = sessions.session_key(client_id)

        def job(batch: Batch) -> None:
            for text in filters:
                if share_queue(text) is not None:
                    self._leave(batch, client_id, queue_name, text)
                    continue
                typed = translation.typed_registration(
                    (text,), queue_name, user_id, remove=True, options=KEEP
                )
                batch.route_typed(typed, self.control)
            batch.grants.update({(key, sessions.filter_key(text)): None for text in filters})
            if (outlet := self.outlets.get(queue_name)) is not None:
                outlet.revoke(filters)

        return Registering(queue_name, job)

    # -- shared subscriptions (broker.service.mqtt.shares) -----------------------------------

    def _joining(
        self, batch: Batch, shared: tuple[str, str, str], client_id: str, user_id: str
    ) -> translation.Typed:
        """The RegSub by which ``client_id`` joins a shared subscription, its queue defined first."""
        queue_name, _, topic_filter = shared
        batch.uow.ensure_queues([queue_name], max_depth=MAX_MAX_DEPTH, description=SHARE_DESCRIPTION)
        return translation.share_membership(topic_filter, queue_name, client_id, user_id)

    def _seat(self, queue_name: str, text: str, member: str) -> None:
        """``member``, a session queue whose client is connected here, is a member of the share
        whose queue is ``queue_name``: what that queue holds is looked at again."""
        share = self.shares.get(queue_name)
        if share is None:
            share = self.shares[queue_name] = Share(queue_name, text)
        share.members[member] = None
        share.behind = True

    def _unseat(self, member: str, texts: Iterable[str]) -> None:
        """``member``'s client is no longer connected here: its shares forget it."""
        for text in texts:
            queue_name = share_queue(text)
            share = None if queue_name is None else self.shares.get(queue_name)
            if share is not None:
                share.members.pop(member, None)
                if not share.members:
                    del self.shares[share.queue]

    def _leave(self, batch: Batch, client_id: str, member: str, text: str) -> None:
        """``client_id`` (its session queue ``member``) leaves the shared subscription
        ``text``; the last member's leaving ends it, its queue and what it holds with it."""
        shared = share_of(text)
        assert shared is not None  # a shared subscription's filter, granted once
        queue_name, _, topic_filter = shared
        self._unseat(member, (text,))
        admin = self.settings.admin_group
        batch.route_typed(
            translation.share_membership(topic_filter, queue_name, client_id, admin, leave=True), self.control
        )
        state = batch.state
        if not state.of_identity(Identity(state.qmgr, queue_name)):
            batch.write()  # what the batch put on it goes with it
            with contextlib.suppress(MQError):  # gone already, or held open by an application
                batch.uow.delete_queue(queue_name)

    def _leave_all(self, batch: Batch, client_id: str, member: str, granted: Iterable[str]) -> None:
        for text in list(granted):
            if share_queue(text) is not None:
                self._leave(batch, client_id, member, text)

    def _granted(self, batch: Batch, client_id: str) -> dict[str, int]:
        """The session's filters as stored."""
        batch.write()
        return sessions.granted_of(batch.uow.connection, [client_id])[client_id]

    def _give_back(self, batch: Batch, client_id: str, key: bytes) -> None:
        """The member leaving (its connection ended): the deliveries its shares lent it that
        it has not acknowledged go back on their queues, for another member (MQTT 5.0 section
        4.8.2), and its session forgets them."""
        lent = self.lent.pop(key, None)
        if not lent:
            return
        inflight = self._inflight(batch, client_id, key)
        defined = batch.uow.definitions({queue_name for queue_name, _ in lent.values()})
        for packet_id, (queue_name, message) in lent.items():
            if defined[queue_name] is None:
                continue  # the share has ended
            if (run := inflight.acknowledge(packet_id)) is not None:
                batch.touched.add(run)
            batch.effects.append(Put(queue_name, message()))
            batch.queued.add(queue_name)
            if (share := self.shares.get(queue_name)) is not None:
                share.behind = True

    def deal(self, queue_name: str) -> Job:
        """Hand what the queue of the share ``queue_name`` holds (put there by another process,
        or while its members here had no room) to its members connected here (:meth:`_deal`)."""

        def job(batch: Batch) -> Drained:
            share = self.shares.get(queue_name)
            if share is None:
                return Drained(more=False)
            share.behind = True
            return self._deal(batch, share)

        return job

    def _deal_shares(self, batch: Batch, outlet: Outlet, drained: Drained) -> Drained:
        """``drained``, what the drain of ``outlet``'s queue found, once what the queues of its
        shares that are behind hold is dealt too (every drain's path: nothing to look at while
        no share has members here)."""
        if not self.shares:
            return drained
        more, sharing = drained.more, False
        for text in outlet.granted:
            queue_name = share_queue(text)
            share = None if queue_name is None else self.shares.get(queue_name)
            if share is not None and share.behind:
                dealt = self._deal(batch, share)
                more = more or (dealt.more and not dealt.blocked)
                sharing = sharing or share.behind
        return replace(drained, more=more, sharing=sharing) if more != drained.more or sharing else drained

    def _deal(self, batch: Batch, share: Share) -> Drained:
        """Take what the share's queue holds, as much as its members connected here have room
        for, and hand each publication to the next of them in turn; the share is caught up
        once its queue is found empty."""
        members = [
            outlet
            for name in share.members
            if (outlet := self.outlets.get(name)) is not None and share.text in outlet.granted
        ]
        names = tuple(outlet.queue for outlet in members)
        if any(not outlet.granted[share.text] & QOS_BITS for outlet in members):
            room = FETCH_LIMIT  # a member granted QoS 0 always has room
        else:
            room = min(FETCH_LIMIT, sum(outlet.window.room for outlet in members))
        if not room:
            return Drained(more=bool(members), blocked=bool(members), members=names)
        if share.queue in batch.queued:
            batch.write()  # this batch's deliveries to it, before it is read
        taken = batch.uow.get_batch(share.queue, room)
        for place, message in enumerate(taken):
            try:
                publish = translation.delivery(message)
            except MQError as exc:
                log.warning("not a publication; dropped", extra={"queue": share.queue, "error": exc.detail})
                continue
            retain = translation.published_retained(message)
            if batch.hand(share, publish, retain, partial(_same, message)) is Hand.WAIT:
                # No member has room after all: back on the queue, in order, for when one has.
                batch.effects.extend(Put(share.queue, later) for later in taken[place:])
                batch.queued.add(share.queue)
                return Drained(more=True, blocked=True, members=names)
        if len(taken) < room:
            share.behind = False
        return Drained(more=len(taken) == room, members=names)

    def _lasting(self, queue_name: str) -> bool:
        """Whether the session whose queue is ``queue_name`` outlives its connection
        (:attr:`Outlet.lasting`; one not connected here: as far as this process knows)."""
        outlet = self.outlets.get(queue_name)
        return outlet is None or outlet.lasting

    def released(self, client_id: str, packet_ids: Sequence[int]) -> Job:
        """PUBRELs: the QoS 2 ids are forgotten (a new PUBLISH with one is a new message).
        Nothing here routes: the state may be as old as a QoS 0 publication's."""
        pairs = [(client_id, packet_id) for packet_id in packet_ids]
        queue_name = sessions.queue_for(client_id)

        def job(batch: Batch) -> None:
            if self._lasting(queue_name):
                batch.forgotten.extend(pairs)

        return Deferred(job, memory=True)

    def acknowledged(self, client_id: str, packet_ids: Sequence[int], *, received: bool) -> Job:
        """PUBRECs (``received``) mark outbound QoS 2 messages; PUBACKs/PUBCOMPs mark them
        acknowledged for good, and free their packet ids (a new message numbered with one is
        in a new run, written in the same commit as the old run's bitmap). Those of a session
        that ends with its connection were never stored: nothing to write. Nothing here
        routes: the state may be as old as a QoS 0 publication's."""
        key = sessions.session_key(client_id)
        queue_name = sessions.queue_for(client_id)

        def job(batch: Batch) -> None:
            if self._lasting(queue_name):
                inflight = self._inflight(batch, client_id, key)
                mark = inflight.release if received else inflight.acknowledge
                touched = batch.touched
                for packet_id in packet_ids:
                    run = mark(packet_id)
                    if run is not None:
                        touched.add(run)
            if (lent := self.lent.get(key)) is not None:  # the member has it: never given back
                for packet_id in packet_ids:
                    lent.pop(packet_id, None)
            if not received and (outlet := self.outlets.get(queue_name)) is not None:
                for packet_id in packet_ids:
                    outlet.window.free(packet_id)

        return Deferred(job, memory=True)

    def _inflight(self, batch: Batch, client_id: str, key: bytes) -> Inflight:
        """The session's index, loaded if it is not (after the batch's writes so far, which may
        hold a run of the session's)."""
        inflight = self.inflight.get(key)
        if inflight is None:
            batch.write()
            inflight = self.inflight[key] = Inflight(sessions.load_runs(batch.uow.connection, client_id))
        return inflight

    def fetch(
        self, client_id: str, queue_name: str, ids: list[int], granted: dict[str, int], *, origin: str = ""
    ) -> Job:
        """Take up to ``len(ids)`` publications from the session queue for sending: each at
        the lower of its QoS and the highest granted by a matching filter, QoS 1/2 ones
        numbered with ``ids`` and stored until acknowledged, in the same commit. Those that
        came over the bridge ``origin`` are taken and not sent: never back where they came from."""

        def job(batch: Batch) -> list[Publish]:
            free = iter(ids)
            key = sessions.session_key(client_id)

            def number(publish: Publish, qos: int) -> Publish:
                return batch.outbound(key, next(free), publish, qos)

            return self._take(batch, queue_name, len(ids), partial(Rules.of, granted), number, origin)[1]

        return job

    def drain(self, queue_name: str) -> Job:
        """Take what the session queue of a connected client holds, as far as its in-flight
        window allows, for sending after the commit (as :meth:`fetch` does); a queue found
        empty lets deliveries go straight to the client from then on."""

        def job(batch: Batch) -> Drained:
            outlet = self.outlets.get(queue_name)
            if outlet is None or queue_name in batch.subscribed:
                # Sent after the commit, a SUBSCRIBE's retained publications taken now would go
                # before its SUBACK; its answer has the queue drained again once that is written.
                return Drained(more=False)
            room = outlet.window.room
            if not room:
                return self._deal_shares(batch, outlet, Drained(more=True, blocked=True))
            if queue_name in batch.queued:
                batch.write()  # this batch's deliveries to it, before it is read
            count = min(room, FETCH_LIMIT)

            def number(publish: Publish, qos: int) -> Publish:
                return batch.outbound(
                    outlet.key, batch.number(outlet.window), publish, qos, kept=outlet.lasting
                )

            taken, publishes = self._take(batch, queue_name, count, outlet.rules, number, fits=outlet.fits)
            if taken < count:
                outlet.behind = False
            if publishes:
                batch.sends.setdefault(outlet, []).extend(publishes)
            return self._deal_shares(batch, outlet, Drained(more=taken == count))

        return job

    def _take(
        self,
        batch: Batch,
        queue_name: str,
        count: int,
        rules: Callable[[str], Rules],
        number: Callable[[Publish, int], Publish],
        origin: str = "",
        *,
        fits: Callable[[Publish, int], bool] | None = None,
    ) -> tuple[int, list[Publish]]:
        """Take up to ``count`` messages off ``queue_name``: how many there were, and the
        publications to send as the session's ``rules`` for their topics say (QoS granted,
        RETAIN as published, Subscription Identifiers), QoS 1/2 ones numbered and stored by
        ``number``; none that ``fits`` says the client cannot take."""
        taken = batch.uow.get_batch(queue_name, count)
        out: list[Publish] = []
        for message in taken:
            try:
                publish = translation.delivery(message)
            except MQError as exc:
                log.warning("not a publication; dropped", extra={"queue": queue_name, "error": exc.detail})
                continue
            if origin and translation.origin(message) == origin:
                continue
            found = rules(publish.topic)
            qos = min(publish.qos, found.qos)
            if found.as_published and not publish.retain:
                publish = replace(publish, retain=translation.published_retained(message))
            publish = _identified(publish, found.ids)
            if fits is not None and not fits(publish, qos):
                continue
            out.append(number(publish, qos) if qos else replace(publish, qos=0))
        return len(taken), out


def _data_version(connection: Connection) -> int | None:
    """SQLite's ``PRAGMA data_version`` of ``connection`` (it changes when another connection
    commits), read outside any transaction; None elsewhere."""
    if connection.dialect.name != "sqlite" or connection.in_transaction():
        return None
    driver = connection.connection.driver_connection
    assert driver is not None  # a connection in use has its driver's
    version: int = driver.execute("PRAGMA data_version").fetchone()[0]
    return version


def _end_when_stopped(connection: Connection, seconds: float) -> None:
    """PostgreSQL: have the server end ``connection``'s transaction (and the connection) once
    it has been idle ``seconds``. A member stopped in the middle of a batch (SIGSTOP) would
    otherwise hold its lease's row lock, and nobody could declare it dead."""
    if connection.dialect.name != "postgresql":
        return
    connection.exec_driver_sql(f"SET idle_in_transaction_session_timeout = {int(seconds * 1000)}")
    connection.commit()


def _sent_to(outcome: Outcome, queue_name: str) -> bool:
    """Whether ``outcome`` delivered anything to the local queue ``queue_name``."""
    return any(isinstance(effect, Put | Deliver) and effect.queue == queue_name for effect in outcome.effects)


def _same(message: Message) -> Message:
    return message


def _will_ends(stored: sessions.StoredSession, resumed: bool, now: int) -> bool:
    """Whether the will waiting on ``stored`` (if one does) is published as its client comes
    back: when its session ends instead of being ``resumed``, or its delay has passed by ``now``
    (the pass that publishes it has not come yet). A session resumed in time drops it."""
    return stored.will_due is not None and (not resumed or stored.will_due <= now)


def _drop_oldest(uow: UnitOfWork, queue_name: str, count: int) -> int:
    """Take the ``count`` oldest messages off ``queue_name``; returns how many there were."""
    dropped = 0
    while dropped < count and (taken := uow.get_batch(queue_name, min(count - dropped, FETCH_LIMIT))):
        dropped += len(taken)
    return dropped


def _identifiers(grants: list[int]) -> tuple[int, ...]:
    """The Subscription Identifiers of ``grants``, each once, in order (those that have one)."""
    return tuple(sorted({grant >> sessions.ID_SHIFT for grant in grants} - {0}))


def _identified(publish: Publish, ids: tuple[int, ...]) -> Publish:
    """``publish`` as sent to a session whose matching subscriptions have the Subscription
    Identifiers ``ids`` (computed per session when it is sent: the publication is shared)."""
    if not ids:
        return publish
    return replace(publish, properties=replace(publish.properties, subscription_identifiers=ids))


def _settle(sends: dict[Outlet, list[Publish]], answers: list[tuple[Answer, Any, bool]]) -> None:
    """Hand a batch's results and deliveries to their loops (the gateway runs on its own
    thread): one wake-up per loop. The answers come first and the deliveries, in commit order,
    in a callback of their own behind the steps the answers resume: a publisher's PUBACKs do
    not wait for the batch's fan-out to be encoded and written, so a client with a window
    of unacknowledged PUBLISHes sends its next ones while the fan-out goes out."""
    calls: dict[asyncio.AbstractEventLoop, list[Callable[[], object]]] = {}
    for answer, value, failed in answers:
        if isinstance(answer, Posted):  # nobody waits: only a failure is told
            if failed:
                calls.setdefault(answer.loop, []).append(partial(answer.failed, value))
            continue
        calls.setdefault(answer.get_loop(), []).append(partial(_answer, answer, value, failed))
    deliveries: dict[asyncio.AbstractEventLoop, list[Callable[[], object]]] = {}
    for outlet, publishes in sends.items():
        deliveries.setdefault(outlet.loop, []).append(partial(outlet.send, publishes))
    for loop, pending in deliveries.items():
        calls.setdefault(loop, []).append(partial(loop.call_soon, _call_all, pending))
    for loop, pending in calls.items():
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            loop.call_soon_threadsafe(_call_all, pending)


def _call_all(calls: list[Callable[[], object]]) -> None:
    for call in calls:
        call()


def _answer(future: asyncio.Future[Any], value: Any, failed: bool) -> None:
    if future.done():
        return
    if failed:
        future.set_exception(value)
    else:
        future.set_result(value)
