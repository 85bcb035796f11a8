"""The MQTT 3.1, 3.1.1 and 5.0 control packets as values: one dataclass per packet type, holding
what the packet means, not how it is laid out (no flags bytes, no lengths). A packet is never
changed once built; the classes are not frozen only because a frozen dataclass costs seven
times as much to build, and one is built for every delivery and every acknowledgement.

The same classes serve every level and both directions (a server decodes CONNECT and encodes
CONNACK, a test client or the benchmark's load generator the reverse). What MQTT 5.0 adds (reason
codes, properties) are fields with defaults, which a 3.1 or 3.1.1 packet leaves as they are. A
packet is built as given: :func:`broker.protocol.mqtt.codec.encode` refuses what cannot be
written at all, and the decoder checks everything that arrives.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

MQTT_31 = 3  # protocol name "MQIsdp"
MQTT_311 = 4  # protocol name "MQTT"
MQTT_5 = 5  # protocol name "MQTT"
PROTOCOL_NAMES = {MQTT_31: "MQIsdp", MQTT_311: "MQTT", MQTT_5: "MQTT"}

CONNACK_ACCEPTED = 0
CONNACK_UNACCEPTABLE_VERSION = 1
CONNACK_IDENTIFIER_REJECTED = 2
CONNACK_SERVER_UNAVAILABLE = 3
CONNACK_BAD_CREDENTIALS = 4
CONNACK_NOT_AUTHORIZED = 5
SUBACK_FAILURE = 0x80  # 3.1.1 only: a 3.1 client knows no such return code

NEVER_EXPIRES = 0xFFFFFFFF  # a Session (or Message) Expiry Interval that never ends (MQTT 5.0)
MAX_REMAINING_LENGTH = 268_435_455  # four length bytes of seven bits each
DEFAULT_MAX_PACKET_SIZE = 4 * 1024 * 1024


@dataclass(slots=True, unsafe_hash=True, repr=False)
class Properties:
    """The properties of an MQTT 5.0 packet (section 2.2.2.2), one field per property identifier,
    None (or empty) when absent. Which packet may carry which is the codec's to check. The two
    properties that may repeat are tuples in the order sent: every User Property (name, value),
    and the Subscription Identifiers of a PUBLISH (one at most in a SUBSCRIBE). Never changed
    once built, and not frozen, for the packets' reason: one is built for every packet that
    carries properties. Most packets share :data:`NO_PROPERTIES`."""

    payload_format_indicator: int | None = None
    message_expiry_interval: int | None = None
    content_type: str | None = None
    response_topic: str | None = None
    correlation_data: bytes | None = None
    subscription_identifiers: tuple[int, ...] = ()
    session_expiry_interval: int | None = None
    assigned_client_identifier: str | None = None
    server_keep_alive: int | None = None
    authentication_method: str | None = None
    authentication_data: bytes | None = None
    request_problem_information: bool | None = None
    will_delay_interval: int | None = None
    request_response_information: bool | None = None
    response_information: str | None = None
    server_reference: str | None = None
    reason_string: str | None = None
    receive_maximum: int | None = None
    topic_alias_maximum: int | None = None
    topic_alias: int | None = None
    maximum_qos: int | None = None
    retain_available: bool | None = None
    user_properties: tuple[tuple[str, str], ...] = ()
    maximum_packet_size: int | None = None
    wildcard_subscription_available: bool | None = None
    subscription_identifier_available: bool | None = None
    shared_subscription_available: bool | None = None

    def __repr__(self) -> str:
        """Only the properties present: a packet's repr stays readable."""
        values = ((field.name, getattr(self, field.name)) for field in fields(self))
        present = ", ".join(f"{name}={value!r}" for name, value in values if value not in (None, ()))
        return f"Properties({present})"


NO_PROPERTIES = Properties()


class SubscriptionOptions(int):
    """The byte after a topic filter in a SUBSCRIBE: in MQTT 5.0 the Subscription Options (bits
    0-1 the maximum QoS, 2 No Local, 3 Retain As Published, 4-5 Retain Handling), in 3.1 and
    3.1.1 the requested QoS alone. An int, so that a plain QoS serves at every level; the MQTT
    5.0 decoder gives instances of this class, whose properties name the bits."""

    __slots__ = ()

    @classmethod
    def of(
        cls, qos: int, *, no_local: bool = False, retain_as_published: bool = False, retain_handling: int = 0
    ) -> SubscriptionOptions:
        return cls(qos | no_local << 2 | retain_as_published << 3 | retain_handling << 4)

    @property
    def qos(self) -> int:
        return self & 0b11

    @property
    def no_local(self) -> bool:
        return bool(self & 0b100)

    @property
    def retain_as_published(self) -> bool:
        return bool(self & 0b1000)

    @property
    def retain_handling(self) -> int:
        return self >> 4 & 0b11

    def __repr__(self) -> str:
        return (
            f"SubscriptionOptions.of({self.qos}, no_local={self.no_local}, "
            f"retain_as_published={self.retain_as_published}, retain_handling={self.retain_handling})"
        )


@dataclass(slots=True, unsafe_hash=True)
class Will:
    """The publication a server makes for a client that goes away without DISCONNECT."""

    topic: str
    payload: bytes
    qos: int
    retain: bool
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True, unsafe_hash=True)
class Connect:
    """``clean_session`` is MQTT 5.0's Clean Start; the password may come without a user name in
    3.1 and 5.0. A CONNECT is written at the level it names, whatever the encoder is told."""

    protocol_name: str
    protocol_level: int
    client_id: str
    clean_session: bool
    keepalive: int
    will: Will | None = None
    username: str | None = None
    password: bytes | None = None
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True, unsafe_hash=True)
class ConnAck:
    """``return_code``: the 3.1 / 3.1.1 return code (0 to 5), or the MQTT 5.0 Connect Reason Code."""

    session_present: bool
    return_code: int
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True, unsafe_hash=True)
class Publish:
    """``packet_id`` is None at QoS 0 (the packet has none) and 1..65535 otherwise. In MQTT 5.0
    the topic may be empty when ``properties.topic_alias`` names it."""

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True, unsafe_hash=True)
class PubAck:
    packet_id: int
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True, unsafe_hash=True)
class PubRec:
    packet_id: int
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True, unsafe_hash=True)
class PubRel:
    packet_id: int
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True, unsafe_hash=True)
class PubComp:
    packet_id: int
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True, unsafe_hash=True)
class Subscribe:
    """``topics``: (filter, requested QoS) pairs, at least one; in MQTT 5.0 (filter, Subscription
    Options byte), see :class:`SubscriptionOptions`."""

    packet_id: int
    topics: tuple[tuple[str, int], ...]
    properties: Properties = NO_PROPERTIES

    @property
    def subscription_identifier(self) -> int:
        """MQTT 5.0's Subscription Identifier of every filter here (0: none; one at most)."""
        return next(iter(self.properties.subscription_identifiers), 0)


@dataclass(slots=True, unsafe_hash=True)
class SubAck:
    """One return code per filter of the SUBSCRIBE, in order: the granted QoS or SUBACK_FAILURE;
    in MQTT 5.0 a Subscribe Reason Code."""

    packet_id: int
    return_codes: tuple[int, ...]
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True, unsafe_hash=True)
class Unsubscribe:
    packet_id: int
    topics: tuple[str, ...]
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True, unsafe_hash=True)
class UnsubAck:
    """``reason_codes``: MQTT 5.0's, one per filter of the UNSUBSCRIBE; 3.1 and 3.1.1 have none."""

    packet_id: int
    reason_codes: tuple[int, ...] = ()
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True, unsafe_hash=True)
class PingReq:
    pass


@dataclass(slots=True, unsafe_hash=True)
class PingResp:
    pass


@dataclass(slots=True, unsafe_hash=True)
class Disconnect:
    """``reason_code`` and ``properties``: MQTT 5.0's, sent by either side."""

    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True, unsafe_hash=True)
class Auth:
    """MQTT 5.0's extended authentication exchange (packet type 15)."""

    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


Packet = (
    Connect
    | ConnAck
    | Publish
    | PubAck
    | PubRec
    | PubRel
    | PubComp
    | Subscribe
    | SubAck
    | Unsubscribe
    | UnsubAck
    | PingReq
    | PingResp
    | Disconnect
    | Auth
)
