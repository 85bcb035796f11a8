"""One MQTT connection's protocol rules (3.1 and 3.1.1), without sockets, clocks or SQL.

The listener feeds a :class:`Session` the packets it decodes and the time, and carries
out the actions it returns: packets to send, the connection to close (with the will to
publish, if any), and the durable work only the shell can do (open the stored session,
route a publication, register a subscription, record or forget a message id). When that
work has committed, the shell tells the session (:meth:`Session.opened`,
:meth:`Session.routed`, ...) and only then does the acknowledgement go out: a PUBACK or a
PUBREC is never sent for a publication that a crash could still lose.

Exactly once for QoS 2 publications received: the id is recorded in the same commit that
routes the publication; until PUBREL any PUBLISH with that id is answered with PUBREC
again and not routed again. The records are loaded with a persistent session, so this
holds across reconnections and broker restarts.

Client identifiers: MQTT 3.1 allows 1 to 23 characters; longer or empty ones are
refused (CONNACK 2). MQTT 3.1.1 accepts any length; an empty one with CleanSession=1
gets a generated identifier, with CleanSession=0 it is refused (CONNACK 2).
Keepalive: a client silent for one and a half times its keepalive is disconnected
(its will is published); a connection that sends no CONNECT within
``connect_timeout`` seconds is closed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from enum import Enum

from broker.protocol.mqtt.packets import (
    CONNACK_ACCEPTED,
    CONNACK_IDENTIFIER_REJECTED,
    MQTT_31,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
    Will,
)

MAX_31_CLIENT_ID = 23
MAX_PACKET_ID = 65535
KEEPALIVE_GRACE = 1.5
DEFAULT_CONNECT_TIMEOUT = 10.0


class Phase(Enum):
    AWAITING_CONNECT = "awaiting connect"
    OPENING = "opening"  # CONNECT accepted by the rules; the shell is opening the stored session
    OPEN = "open"
    CLOSED = "closed"


# -- actions -------------------------------------------------------------------------------
# Values, never changed once built (not frozen: see ``broker.protocol.mqtt.packets``).


@dataclass(slots=True, unsafe_hash=True)
class Send:
    packet: Packet


@dataclass(slots=True, unsafe_hash=True)
class Close:
    """End the connection; ``will`` is published unless it is None (after DISCONNECT)."""

    reason: str
    will: Will | None


@dataclass(slots=True, unsafe_hash=True)
class Open:
    """Authenticate and open (or create) the stored session of ``client_id``; then call
    :meth:`Session.opened` or :meth:`Session.refused`."""

    connect: Connect
    client_id: str


@dataclass(slots=True, unsafe_hash=True)
class Route:
    """Route ``publish`` durably (QoS 1 and 2: recording a QoS 2 id in the same commit),
    then call :meth:`Session.routed`, whether the publication was authorised or not."""

    publish: Publish


@dataclass(slots=True, unsafe_hash=True)
class Release:
    """PUBREL of a received QoS 2 message: forget its id durably, then :meth:`Session.released`."""

    packet_id: int


@dataclass(slots=True, unsafe_hash=True)
class Register:
    """Register the filters, then :meth:`Session.subscribed` with a return code each."""

    subscribe: Subscribe


@dataclass(slots=True, unsafe_hash=True)
class Deregister:
    """Deregister the filters, then :meth:`Session.unsubscribed`."""

    unsubscribe: Unsubscribe


@dataclass(slots=True, unsafe_hash=True)
class Delivered:
    """An outbound message is acknowledged for good (PUBACK, or PUBCOMP): forget it."""

    packet_id: int


@dataclass(slots=True, unsafe_hash=True)
class Received:
    """PUBREC of an outbound QoS 2 message: record it durably, then :meth:`Session.recorded`
    sends the PUBREL (after a restart the PUBREL is sent again, never the PUBLISH)."""

    packet_id: int


Action = Send | Close | Open | Route | Release | Register | Deregister | Delivered | Received


@dataclass(frozen=True, slots=True)
class Outbound:
    """A stored outbound QoS 1/2 message not yet acknowledged, as a persistent session resumes
    it; ``released``: PUBREC came."""

    publish: Publish
    released: bool = False


RELEASED = 3  # an outbound QoS 2 message's state once PUBREC came (1 and 2: its QoS, awaiting)


# -- the machine ---------------------------------------------------------------------------


class Session:
    """The rules of one connection; the stored session's durable parts live in the shell."""

    __slots__ = (
        "_connect_timeout",
        "_early",
        "_inflight",
        "_last_seen",
        "_new_client_id",
        "_next_id",
        "_received",
        "_started",
        "client_id",
        "connect",
        "max_inflight",
        "phase",
    )

    def __init__(
        self,
        now: float,
        *,
        new_client_id: Callable[[], str],
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    ) -> None:
        self.phase = Phase.AWAITING_CONNECT
        self.connect: Connect | None = None
        self.client_id = ""
        self._new_client_id = new_client_id
        self._connect_timeout = connect_timeout
        self._started = now
        self._last_seen = now
        self._early: list[Packet] = []  # packets pipelined behind CONNECT, handled once open
        # QoS 1/2 ids received: False while being routed, True once routed (QoS 2) and
        # awaiting PUBREL. One dict rather than two sets: 64 bytes, not 432, per connection.
        self._received: dict[int, bool] = {}
        # Outbound in flight, in send order: the QoS (1 or 2), or RELEASED once PUBREC came.
        # A number rather than a record: this is every QoS 1/2 delivery's path.
        self._inflight: dict[int, int] = {}

    # -- inbound ---------------------------------------------------------------------------

    def receive(self, packet: Packet, now: float) -> list[Action]:
        """The actions a packet from the client calls for."""
        self._last_seen = now
        if self.phase is Phase.OPEN:  # every packet but the first few: straight to its handler
            # type() is, where mypy narrows only isinstance(): one comparison per packet.
            kind = type(packet)
            if kind is Publish:
                return self._on_publish(packet)  # type: ignore[arg-type]
            if kind in _ACKS:
                return self._on_ack(packet)  # type: ignore[arg-type]
            if kind is Connect:
                return self._close("a second CONNECT", will=True)
            return self._handle(packet)
        if self.phase is Phase.CLOSED:
            return []
        if self.phase is Phase.AWAITING_CONNECT:
            if not isinstance(packet, Connect):
                return self._close(f"{type(packet).__name__} before CONNECT", will=False)
            return self._on_connect(packet)
        if isinstance(packet, Connect):
            return self._close("a second CONNECT", will=True)
        if self.phase is Phase.OPENING:
            self._early.append(packet)
            return []
        return self._handle(packet)

    def _on_connect(self, connect: Connect) -> list[Action]:
        client_id = connect.client_id
        if connect.protocol_level == MQTT_31:
            acceptable = 0 < len(client_id) <= MAX_31_CLIENT_ID
        else:
            acceptable = bool(client_id) or connect.clean_session
            client_id = client_id or self._new_client_id()
        self.connect = connect
        if not acceptable:
            return self.refused(CONNACK_IDENTIFIER_REJECTED)
        self.client_id = client_id
        self.phase = Phase.OPENING
        return [Open(connect, client_id)]

    def opened(
        self, session_present: bool, awaiting_release: Iterable[int], outbound: Sequence[Outbound]
    ) -> list[Action]:
        """The stored session is open: CONNACK, then what a persistent session had in
        flight (PUBLISH again with DUP=1 in the original order, PUBREL again for those
        already PUBREC'd), then the packets that came behind CONNECT."""
        if self.phase is not Phase.OPENING:
            return []
        self.phase = Phase.OPEN
        self._received = dict.fromkeys(awaiting_release, True)
        # 3.1's CONNACK has no session-present flag: its first byte is reserved, sent as 0.
        present = session_present and self.connect is not None and self.connect.protocol_level != MQTT_31
        actions: list[Action] = [Send(ConnAck(present, CONNACK_ACCEPTED))]
        for item in outbound:
            packet_id = item.publish.packet_id
            assert packet_id is not None
            self._inflight[packet_id] = RELEASED if item.released else item.publish.qos
            packet: Packet = PubRel(packet_id) if item.released else replace(item.publish, dup=True)
            actions.append(Send(packet))
        early, self._early = self._early, []
        for packet in early:
            actions.extend(self._handle(packet))
            if self.phase is Phase.CLOSED:
                break
        return actions

    def refused(self, return_code: int) -> list[Action]:
        """The CONNECT is refused with ``return_code``: CONNACK, then close (no will)."""
        actions: list[Action] = [Send(ConnAck(False, return_code))]
        return actions + self._close(f"CONNECT refused with return code {return_code}", will=False)

    def _handle(self, packet: Packet) -> list[Action]:
        if isinstance(packet, Publish):
            return self._on_publish(packet)
        if isinstance(packet, PubRel):
            if self._received.get(packet.packet_id):
                return [Release(packet.packet_id)]
            return [Send(PubComp(packet.packet_id))]
        if isinstance(packet, PubAck | PubRec | PubComp):
            return self._on_ack(packet)
        if isinstance(packet, Subscribe):
            return [Register(packet)]
        if isinstance(packet, Unsubscribe):
            return [Deregister(packet)]
        if isinstance(packet, PingReq):
            return [Send(PingResp())]
        if isinstance(packet, Disconnect):
            return self._close("DISCONNECT", will=False)
        return self._close(f"{type(packet).__name__} is not sent to a server", will=True)

    def _on_publish(self, publish: Publish) -> list[Action]:
        if publish.qos == 0:
            return [Route(publish)]
        packet_id = publish.packet_id
        assert packet_id is not None
        routed = self._received.get(packet_id)
        if routed is False:
            return []  # a retransmission of one being routed: its acknowledgement follows
        if routed:
            return [Send(PubRec(packet_id))]  # routed already: acknowledge again, never route again
        self._received[packet_id] = False
        return [Route(publish)]

    def routed(self, publish: Publish) -> list[Action]:
        """``publish`` is durably routed (or refused): its acknowledgement, if any."""
        if publish.qos == 0 or publish.packet_id is None or self.phase is not Phase.OPEN:
            return []
        packet_id = publish.packet_id
        if publish.qos == 1:
            self._received.pop(packet_id, None)
            return [Send(PubAck(packet_id))]
        self._received[packet_id] = True
        return [Send(PubRec(packet_id))]

    def released(self, packet_id: int) -> list[Action]:
        """The QoS 2 id is durably forgotten: PUBCOMP."""
        self._received.pop(packet_id, None)
        return [Send(PubComp(packet_id))] if self.phase is Phase.OPEN else []

    def subscribed(self, packet_id: int, return_codes: Sequence[int]) -> list[Action]:
        return [Send(SubAck(packet_id, tuple(return_codes)))] if self.phase is Phase.OPEN else []

    def unsubscribed(self, packet_id: int) -> list[Action]:
        return [Send(UnsubAck(packet_id))] if self.phase is Phase.OPEN else []

    # -- outbound --------------------------------------------------------------------------

    @property
    def inflight(self) -> int:
        return len(self._inflight)

    def deliver(self, publications: Sequence[Publish]) -> list[Publish]:
        """The publications to send now (QoS 1/2 ones numbered by the shell's :class:`Window`,
        in flight from now on): all of them while the session is open, none otherwise. Plain
        packets rather than :class:`Send` actions: this is every delivery's path."""
        if self.phase is not Phase.OPEN:
            return []
        inflight = self._inflight
        for publish in publications:
            if publish.qos:
                assert publish.packet_id is not None
                inflight[publish.packet_id] = publish.qos
        return list(publications)

    def _on_ack(self, packet: PubAck | PubRec | PubComp) -> list[Action]:
        packet_id = packet.packet_id
        state = self._inflight.get(packet_id)
        kind = type(packet)
        if kind is PubRec:
            if state == 2:
                return [Received(packet_id)]
            return [Send(PubRel(packet_id))] if state == RELEASED else []
        if state != (1 if kind is PubAck else RELEASED):  # PUBACK of QoS 1, PUBCOMP after PUBREC
            return []
        del self._inflight[packet_id]
        return [Delivered(packet_id)]

    def recorded(self, packet_id: int) -> list[Action]:
        """PUBREC of an outbound QoS 2 message is durably recorded: PUBREL."""
        if self._inflight.get(packet_id) is None or self.phase is not Phase.OPEN:
            return []
        self._inflight[packet_id] = RELEASED
        return [Send(PubRel(packet_id))]

    # -- time and endings ------------------------------------------------------------------

    def deadline(self) -> float | None:
        """When the connection expires unless a packet arrives first (None: never)."""
        if self.phase is Phase.AWAITING_CONNECT:
            return self._started + self._connect_timeout
        if self.phase is Phase.CLOSED or self.connect is None or not self.connect.keepalive:
            return None
        return self._last_seen + KEEPALIVE_GRACE * self.connect.keepalive

    def tick(self, now: float) -> list[Action]:
        """Close the connection if its keepalive (or the wait for CONNECT) has run out."""
        deadline = self.deadline()
        if deadline is None or now < deadline:
            return []
        if self.phase is Phase.AWAITING_CONNECT:
            return self._close("no CONNECT in time", will=False)
        return self._close("keepalive expired", will=True)

    def connection_lost(self, reason: str) -> list[Action]:
        """The connection ended without DISCONNECT (socket error, malformed packet,
        takeover, shutdown): close, publishing the will."""
        return self._close(reason, will=True)

    def _close(self, reason: str, *, will: bool) -> list[Action]:
        if self.phase is Phase.CLOSED:
            return []
        opened = self.phase in (Phase.OPEN, Phase.OPENING)
        self.phase = Phase.CLOSED
        chosen = self.connect.will if will and opened and self.connect is not None else None
        return [Close(reason, chosen)]


_ACKS = frozenset((PubAck, PubRec, PubComp))


class Window:
    """The packet ids of one session's outbound QoS 1/2 messages in flight, kept by the shell
    that numbers them (the thread that stores a message with its id in the transaction that
    routes it, before the connection sends it): at most ``max_inflight`` at once, and an id
    is used again only once the message it numbered has been acknowledged for good."""

    def __init__(self, max_inflight: int, in_flight: Sequence[int] = ()) -> None:
        self._limit = min(max_inflight, MAX_PACKET_ID)
        self._in_use = set(in_flight)
        self._next = _following(in_flight[-1]) if in_flight else 1  # after the last one sent

    @property
    def room(self) -> int:
        """How many more messages may be numbered now."""
        return max(0, self._limit - len(self._in_use))

    def take(self) -> int:
        """The next id not in use, now in use (call only while there is :attr:`room`)."""
        assert self.room, "no room in the window"
        candidate = self._next
        while candidate in self._in_use:
            candidate = _following(candidate)
        self._in_use.add(candidate)
        self._next = _following(candidate)
        return candidate

    def free(self, packet_id: int) -> None:
        """The message numbered ``packet_id`` is acknowledged for good (or never went)."""
        self._in_use.discard(packet_id)


def _following(packet_id: int) -> int:
    return packet_id % MAX_PACKET_ID + 1
