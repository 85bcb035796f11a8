"""The MQTT 3.1 / 3.1.1 control packets as values: one dataclass per packet type, holding
what the packet means, not how it is laid out (no flags bytes, no lengths). A packet is never
changed once built; the classes are not frozen only because a frozen dataclass costs seven
times as much to build, and one is built for every delivery and every acknowledgement.

The same classes serve both directions (a server decodes CONNECT and encodes CONNACK, a test
client or the benchmark's load generator the reverse). A packet is built as given:
:func:`broker.protocol.mqtt.codec.encode` refuses what cannot be written at all, and the
decoder checks everything that arrives.
"""

from __future__ import annotations

from dataclasses import dataclass

MQTT_31 = 3  # protocol name "MQIsdp"
MQTT_311 = 4  # protocol name "MQTT"
PROTOCOL_NAMES = {MQTT_31: "MQIsdp", MQTT_311: "MQTT"}

CONNACK_ACCEPTED = 0
CONNACK_UNACCEPTABLE_VERSION = 1
CONNACK_IDENTIFIER_REJECTED = 2
CONNACK_SERVER_UNAVAILABLE = 3
CONNACK_BAD_CREDENTIALS = 4
CONNACK_NOT_AUTHORIZED = 5
SUBACK_FAILURE = 0x80  # 3.1.1 only: a 3.1 client knows no such return code

MAX_REMAINING_LENGTH = 268_435_455  # four length bytes of seven bits each
DEFAULT_MAX_PACKET_SIZE = 4 * 1024 * 1024


@dataclass(slots=True, unsafe_hash=True)
class Will:
    """The publication a server makes for a client that goes away without DISCONNECT."""

    topic: str
    payload: bytes
    qos: int
    retain: bool


@dataclass(slots=True, unsafe_hash=True)
class Connect:
    protocol_name: str
    protocol_level: int
    client_id: str
    clean_session: bool
    keepalive: int
    will: Will | None = None
    username: str | None = None
    password: bytes | None = None


@dataclass(slots=True, unsafe_hash=True)
class ConnAck:
    session_present: bool
    return_code: int


@dataclass(slots=True, unsafe_hash=True)
class Publish:
    """``packet_id`` is None at QoS 0 (the packet has none) and 1..65535 otherwise."""

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None


@dataclass(slots=True, unsafe_hash=True)
class PubAck:
    packet_id: int


@dataclass(slots=True, unsafe_hash=True)
class PubRec:
    packet_id: int


@dataclass(slots=True, unsafe_hash=True)
class PubRel:
    packet_id: int


@dataclass(slots=True, unsafe_hash=True)
class PubComp:
    packet_id: int


@dataclass(slots=True, unsafe_hash=True)
class Subscribe:
    """``topics``: (filter, requested QoS) pairs, at least one."""

    packet_id: int
    topics: tuple[tuple[str, int], ...]


@dataclass(slots=True, unsafe_hash=True)
class SubAck:
    """One return code per filter of the SUBSCRIBE, in order: the granted QoS or SUBACK_FAILURE."""

    packet_id: int
    return_codes: tuple[int, ...]


@dataclass(slots=True, unsafe_hash=True)
class Unsubscribe:
    packet_id: int
    topics: tuple[str, ...]


@dataclass(slots=True, unsafe_hash=True)
class UnsubAck:
    packet_id: int


@dataclass(slots=True, unsafe_hash=True)
class PingReq:
    pass


@dataclass(slots=True, unsafe_hash=True)
class PingResp:
    pass


@dataclass(slots=True, unsafe_hash=True)
class Disconnect:
    pass


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
)
