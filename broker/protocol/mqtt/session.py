"""One MQTT connection's protocol rules (3.1, 3.1.1 and 5.0), without sockets, clocks or SQL.

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

MQTT 5.0 (``docs/decisions.md``, "MQTT 5.0"): an empty client identifier is always accepted and
the one generated is told in the CONNACK; the session lasts its Session Expiry Interval after
the connection (0: it ends with it), which a DISCONNECT may change; every refusal carries its
reason code (CONNACK, PUBACK, PUBREC, SUBACK) and a connection the server ends once open gets a
DISCONNECT saying why; the CONNACK tells the client the :class:`Limits` it is held to (inbound
publications unacknowledged at once, topic aliases, packet size), and Response Information if
asked; a will waits its Will Delay Interval (:func:`will_delay`); what is sent a client that takes
topic aliases carries them (:meth:`Session.aliased`). No enhanced authentication: a CONNECT naming
a method is refused (Bad authentication method) and an AUTH packet is a Protocol Error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from enum import Enum

from broker.protocol.mqtt.codec import encode
from broker.protocol.mqtt.packets import (
    CONNACK_ACCEPTED,
    CONNACK_IDENTIFIER_REJECTED,
    MQTT_5,
    MQTT_31,
    MQTT_311,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PingReq,
    PingResp,
    Properties,
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
from broker.protocol.mqtt.v5.reasons import ReasonCode

PROTOCOL_ERROR = ReasonCode.PROTOCOL_ERROR
MAX_31_CLIENT_ID = 23
MAX_PACKET_ID = 65535
KEEPALIVE_GRACE = 1.5
DEFAULT_CONNECT_TIMEOUT = 10.0


# The 3.1 / 3.1.1 CONNACK return codes the shell refuses with, as MQTT 5.0's reason codes.
V5_REFUSALS = {
    1: ReasonCode.UNSUPPORTED_PROTOCOL_VERSION,
    2: ReasonCode.CLIENT_IDENTIFIER_NOT_VALID,
    3: ReasonCode.SERVER_UNAVAILABLE,
    4: ReasonCode.BAD_USER_NAME_OR_PASSWORD,
    5: ReasonCode.NOT_AUTHORIZED,
}


@dataclass(frozen=True, slots=True)
class Limits:
    """What this server holds an MQTT 5.0 client to, told in its CONNACK: QoS 1/2 publications
    received and not yet acknowledged (PUBACK, or PUBCOMP) at once, topic aliases the client
    may set, and the largest packet it may send (0: none told)."""

    receive_maximum: int = 65535
    topic_alias_maximum: int = 0
    maximum_packet_size: int = 0
    session_expiry_maximum: int = 0  # seconds a session may outlive its connection (0: no cap)
    response_prefix: str = ""  # the Response Information's start (docs/decisions.md; "": none)

    def expiry(self, requested: int) -> int:
        """The Session Expiry Interval granted for ``requested`` (never, 0xFFFFFFFF, included)."""
        cap = self.session_expiry_maximum
        return min(requested, cap) if cap else requested

    def response_information(self, client_id: str) -> str | None:
        """What a client asking for Response Information is told: a topic prefix of its own,
        :attr:`response_prefix` then its client id and a slash (None: no prefix is set, or the
        id holds a wildcard, which no topic may)."""
        if not self.response_prefix or "+" in client_id or "#" in client_id:
            return None
        return f"{self.response_prefix}{client_id}/"

    def connack(
        self, assigned: str | None, expiry: int | None = None, response: str | None = None
    ) -> Properties:
        """The CONNACK's properties (those at their default left out; ``expiry``: the Session
        Expiry Interval granted, when it is not the one asked for; ``response``: the Response
        Information, when asked for)."""
        return Properties(
            session_expiry_interval=expiry,
            assigned_client_identifier=assigned,
            response_information=response,
            receive_maximum=self.receive_maximum if self.receive_maximum < 65535 else None,
            topic_alias_maximum=self.topic_alias_maximum or None,
            maximum_packet_size=self.maximum_packet_size or None,
        )


NO_LIMITS = Limits()


def session_expiry(connect: Connect) -> int | None:
    """MQTT 5.0's Session Expiry Interval of ``connect`` in seconds (absent: 0); None in 3.1
    and 3.1.1, whose CleanSession says whether the session outlives the connection."""
    if connect.protocol_level != MQTT_5:
        return None
    return connect.properties.session_expiry_interval or 0


def ends_with_connection(connect: Connect, expiry: int | None) -> bool:
    """Whether the stored session ends with the connection: an ``expiry`` of 0 (MQTT 5.0),
    CleanSession (3.1 and 3.1.1, ``expiry`` None)."""
    return connect.clean_session if expiry is None else expiry == 0


def inflight_limit(connect: Connect, most: int) -> int:
    """QoS 1/2 messages sent to the client unacknowledged at once: ``most``, or fewer if an
    MQTT 5.0 client's Receive Maximum says so."""
    return min(most, connect.properties.receive_maximum or most)


def will_delay(will: Will | None, expiry: int | None) -> int:
    """Seconds ``will`` waits once its connection has ended: its Will Delay Interval, but never
    past the end of the session, which outlives the connection by ``expiry`` seconds (section
    3.1.3.2.2). 0 (published at once) in 3.1 and 3.1.1 (``expiry`` None)."""
    if will is None or not expiry:
        return 0
    return min(will.properties.will_delay_interval or 0, expiry)


def will_publication(will: Will) -> Publish:
    """The publication ``will`` makes, with its properties as a PUBLISH carries them (the Will
    Delay Interval is the server's alone)."""
    properties = will.properties
    if properties.will_delay_interval is not None:
        properties = replace(properties, will_delay_interval=None)
    return Publish(will.topic, will.payload, will.qos, will.retain, properties=properties)


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
    """PUBREL of a received QoS 2 message: forget its id durably, then :meth:`Session.released`
    (which answers PUBCOMP, unless the id is forgotten because an MQTT 5.0 PUBREC refused it)."""

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
        "_aliases",
        "_assigned",
        "_connect_timeout",
        "_early",
        "_inflight",
        "_last_seen",
        "_limits",
        "_new_client_id",
        "_next_id",
        "_quiet",
        "_received",
        "_sending_aliases",
        "_started",
        "client_id",
        "connect",
        "expiry",
        "expiry_changed",
        "max_inflight",
        "phase",
    )

    def __init__(
        self,
        now: float,
        *,
        new_client_id: Callable[[], str],
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        limits: Limits = NO_LIMITS,
    ) -> None:
        self.phase = Phase.AWAITING_CONNECT
        self.connect: Connect | None = None
        self.client_id = ""
        # MQTT 5.0: seconds the session outlives the connection (3.1 and 3.1.1: None), and
        # whether a DISCONNECT changed it (the stored session is told)
        self.expiry: int | None = None
        self.expiry_changed = False
        self._limits = limits
        self._assigned = False  # the client identifier was generated: the CONNACK tells it
        # MQTT 5.0 only, made when first needed (most connections never need them): the topic
        # aliases the client set, the QoS 2 ids a PUBREC refused (forgotten without PUBCOMP),
        # and the SUBACK codes decided here for the SUBSCRIBEs being registered.
        self._aliases: dict[int, str] | None = None
        # The topic aliases this server sets on what it sends (None: the client takes none), by
        # topic; the connection's own, as the client's are.
        self._sending_aliases: dict[str, int] | None = None
        self._quiet: set[int] | None = None
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
                return self._close("a second CONNECT", will=True, code=PROTOCOL_ERROR)
            return self._handle(packet)
        if self.phase is Phase.CLOSED:
            return []
        if self.phase is Phase.AWAITING_CONNECT:
            if not isinstance(packet, Connect):
                return self._close(f"{type(packet).__name__} before CONNECT", will=False)
            return self._on_connect(packet)
        if isinstance(packet, Connect):
            return self._close("a second CONNECT", will=True, code=PROTOCOL_ERROR)
        if self.phase is Phase.OPENING:
            self._early.append(packet)
            return []
        return self._handle(packet)

    @property
    def level(self) -> int:
        """The protocol level of the CONNECT (3.1.1's before one came)."""
        return MQTT_311 if self.connect is None else self.connect.protocol_level

    @property
    def ends_with_connection(self) -> bool:
        """Whether the stored session ends with this connection: 3.1 and 3.1.1's CleanSession,
        MQTT 5.0's Session Expiry Interval of 0 (as the CONNECT or the DISCONNECT set it)."""
        return self.connect is not None and ends_with_connection(self.connect, self.expiry)

    @property
    def will_delay(self) -> int:
        """Seconds the will waits once the connection has ended (:func:`will_delay`), by the
        Session Expiry Interval as the CONNECT or the DISCONNECT set it."""
        return 0 if self.connect is None else will_delay(self.connect.will, self.expiry)

    def _on_connect(self, connect: Connect) -> list[Action]:
        client_id = connect.client_id
        self.connect = connect
        if connect.protocol_level == MQTT_5:
            if connect.properties.authentication_method is not None:
                return self.refused(ReasonCode.BAD_AUTHENTICATION_METHOD)
            self.expiry = self._limits.expiry(connect.properties.session_expiry_interval or 0)
            self._assigned = not client_id
            if min(connect.properties.topic_alias_maximum or 0, self._limits.topic_alias_maximum):
                self._sending_aliases = {}
            acceptable = True
            client_id = client_id or self._new_client_id()
        elif connect.protocol_level == MQTT_31:
            acceptable = 0 < len(client_id) <= MAX_31_CLIENT_ID
        else:
            acceptable = bool(client_id) or connect.clean_session
            client_id = client_id or self._new_client_id()
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
        present = session_present and self.level != MQTT_31
        if self.level == MQTT_5:
            asked = session_expiry(self.connect) if self.connect is not None else None
            granted = self.expiry if self.expiry != asked else None
            asking = self.connect is not None and self.connect.properties.request_response_information
            response = self._limits.response_information(self.client_id) if asking else None
            properties = self._limits.connack(self.client_id if self._assigned else None, granted, response)
            actions: list[Action] = [Send(ConnAck(present, CONNACK_ACCEPTED, properties))]
        else:
            actions = [Send(ConnAck(present, CONNACK_ACCEPTED))]
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
        """The CONNECT is refused with ``return_code`` (3.1.1's, or an MQTT 5.0 reason code):
        CONNACK, then close (no will). An MQTT 5.0 client is told the reason code."""
        if self.level == MQTT_5:
            return_code = V5_REFUSALS.get(return_code, return_code)
        actions: list[Action] = [Send(ConnAck(False, return_code))]
        return actions + self._close(f"CONNECT refused with return code {return_code:#04x}", will=False)

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
            return self._on_subscribe(packet)
        if isinstance(packet, Unsubscribe):
            return [Deregister(packet)]
        if isinstance(packet, PingReq):
            return [Send(PingResp())]
        if isinstance(packet, Disconnect):
            return self._on_disconnect(packet)
        if isinstance(packet, Auth):  # no authentication method was agreed [MQTT-4.12.0-1]
            return self._close(
                "AUTH without an authentication method", will=True, code=ReasonCode.PROTOCOL_ERROR
            )
        return self._close(
            f"{type(packet).__name__} is not sent to a server", will=True, code=ReasonCode.PROTOCOL_ERROR
        )

    def _on_disconnect(self, packet: Disconnect) -> list[Action]:
        """A DISCONNECT: the will goes only with MQTT 5.0's Disconnect with Will Message, and a
        Session Expiry Interval it sets replaces the CONNECT's, except that a session that was
        to end with the connection cannot be made to outlive it (section 3.14.2.2.2)."""
        expiry = packet.properties.session_expiry_interval
        if expiry is not None and self.expiry is not None:
            if expiry and not self.expiry:
                reason = "DISCONNECT set a Session Expiry Interval after 0"
                return self._close(reason, will=True, code=PROTOCOL_ERROR)
            granted = self._limits.expiry(expiry)
            self.expiry_changed = granted != self.expiry
            self.expiry = granted
        will = packet.reason_code == ReasonCode.DISCONNECT_WITH_WILL_MESSAGE
        return self._close(f"DISCONNECT ({packet.reason_code:#04x})" if will else "DISCONNECT", will=will)

    def _on_subscribe(self, packet: Subscribe) -> list[Action]:
        """Register the filters (the decoder has refused malformed ones)."""
        return [Register(packet)]

    def _on_publish(self, publish: Publish) -> list[Action]:
        if self.level == MQTT_5 and publish.properties.subscription_identifiers:
            reason = "a Subscription Identifier from a client"  # [MQTT-3.3.4-6]
            return self._close(reason, will=True, code=PROTOCOL_ERROR)
        if self.level == MQTT_5 and publish.properties.topic_alias is not None:
            aliased = self._alias(publish)
            if aliased is None:
                return self._close("topic alias not valid", will=True, code=ReasonCode.TOPIC_ALIAS_INVALID)
            publish = aliased
        if publish.qos == 0:
            return [Route(publish)]
        packet_id = publish.packet_id
        assert packet_id is not None
        routed = self._received.get(packet_id)
        if routed is False:
            return []  # a retransmission of one being routed: its acknowledgement follows
        if routed:
            return [Send(PubRec(packet_id))]  # routed already: acknowledge again, never route again
        if len(self._received) >= self._limits.receive_maximum and self.level == MQTT_5:
            return self._close(
                "more publications unacknowledged than Receive Maximum",
                will=True,
                code=ReasonCode.RECEIVE_MAXIMUM_EXCEEDED,
            )
        self._received[packet_id] = False
        return [Route(publish)]

    def _alias(self, publish: Publish) -> Publish | None:
        """The PUBLISH with its topic alias resolved (None: an alias over the maximum announced,
        or one with no topic set yet): a topic name sets the alias for the later ones."""
        alias = publish.properties.topic_alias
        assert alias is not None
        if not 0 < alias <= self._limits.topic_alias_maximum:
            return None
        if self._aliases is None:
            self._aliases = {}
        topic = publish.topic
        if topic:
            self._aliases[alias] = topic
        elif (found := self._aliases.get(alias)) is not None:
            topic = found
        else:
            return None
        return replace(publish, topic=topic, properties=replace(publish.properties, topic_alias=None))

    def routed(self, publish: Publish, reason: int = 0) -> list[Action]:
        """``publish`` is durably routed, or refused (MQTT 5.0: with ``reason``, the reason code
        its acknowledgement carries; 3.1 and 3.1.1 acknowledge a refused one as any other)."""
        if publish.qos == 0 or publish.packet_id is None or self.phase is not Phase.OPEN:
            return []
        packet_id = publish.packet_id
        if self.level != MQTT_5:
            reason = 0
        if publish.qos == 1:
            self._received.pop(packet_id, None)
            return [Send(PubAck(packet_id, reason))]
        if reason < ReasonCode.UNSPECIFIED_ERROR:
            self._received[packet_id] = True
            return [Send(PubRec(packet_id, reason))]
        # A PUBREC that refuses ends the exchange (section 4.3.3): no PUBREL follows, and the id
        # may number the client's next publication, so the record of it goes, unanswered.
        self._received.pop(packet_id, None)
        if self._quiet is None:
            self._quiet = set()
        self._quiet.add(packet_id)
        return [Send(PubRec(packet_id, reason)), Release(packet_id)]

    def released(self, packet_id: int) -> list[Action]:
        """The QoS 2 id is durably forgotten: PUBCOMP (none for one a PUBREC refused)."""
        if self._quiet is not None and packet_id in self._quiet:
            self._quiet.discard(packet_id)
            return []
        self._received.pop(packet_id, None)
        return [Send(PubComp(packet_id))] if self.phase is Phase.OPEN else []

    def subscribed(self, packet_id: int, return_codes: Sequence[int]) -> list[Action]:
        """SUBACK with a return code (MQTT 5.0: reason code) for each filter."""
        if self.phase is not Phase.OPEN:
            return []
        return [Send(SubAck(packet_id, tuple(return_codes)))]

    def unsubscribed(self, packet_id: int, count: int = 1) -> list[Action]:
        """UNSUBACK; MQTT 5.0's has a reason code for each of the ``count`` filters."""
        if self.phase is not Phase.OPEN:
            return []
        codes = (ReasonCode.SUCCESS,) * count if self.level == MQTT_5 else ()
        return [Send(UnsubAck(packet_id, codes))]

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

    def aliased(self, publications: list[Publish]) -> list[Publish]:
        """``publications`` as written to the client: with topic aliases if it takes them (its
        Topic Alias Maximum, MQTT 5.0). The first topics sent get one each, up to the smaller of
        its maximum and this server's; a later publication on one of them goes with the alias
        and an empty topic (section 3.3.2.3.4). Only what is written comes here: a delivery
        dropped before never sets an alias the client would not know, and the messages sent
        again at :meth:`opened` keep their topics."""
        aliases = self._sending_aliases
        if aliases is None:
            return publications
        return [self._aliased(publish, aliases) for publish in publications]

    def _aliased(self, publish: Publish, aliases: dict[str, int]) -> Publish:
        alias = aliases.get(publish.topic)
        if alias is not None:
            return replace(publish, topic="", properties=replace(publish.properties, topic_alias=alias))
        assert self.connect is not None
        properties = self.connect.properties
        if len(aliases) >= min(properties.topic_alias_maximum or 0, self._limits.topic_alias_maximum):
            return publish
        alias = len(aliases) + 1
        setting = replace(publish, properties=replace(publish.properties, topic_alias=alias))
        if properties.maximum_packet_size and len(encode(setting, MQTT_5)) > properties.maximum_packet_size:
            return publish  # the alias would take it over the client's maximum: it goes without
        aliases[publish.topic] = alias
        return setting

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
        return self._close("keepalive expired", will=True, code=ReasonCode.KEEP_ALIVE_TIMEOUT)

    def connection_lost(self, reason: str, code: int = 0) -> list[Action]:
        """The connection ends without DISCONNECT (socket error, malformed packet, takeover,
        shutdown): close, publishing the will. ``code``: the reason an MQTT 5.0 client is told
        in a DISCONNECT, if it can still hear one (0: the connection is gone, none is sent)."""
        return self._close(reason, will=True, code=code)

    def _close(self, reason: str, *, will: bool, code: int = 0) -> list[Action]:
        """Close; an open MQTT 5.0 connection is first sent a DISCONNECT with ``code``, if any
        (only once the CONNACK went: before it, a refusal is the CONNACK's)."""
        if self.phase is Phase.CLOSED:
            return []
        opened = self.phase in (Phase.OPEN, Phase.OPENING)
        told = code and self.phase is Phase.OPEN and self.level == MQTT_5
        self.phase = Phase.CLOSED
        chosen = self.connect.will if will and opened and self.connect is not None else None
        if told:
            return [Send(Disconnect(code)), Close(reason, chosen)]
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
    def used(self) -> int:
        """How many messages are in flight."""
        return len(self._in_use)

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
