"""MQTT 3.1 / 3.1.1 control packets as frozen data (the listener's stand-in until the codec lands)."""

from __future__ import annotations

from dataclasses import dataclass

MQTT_31 = 3
MQTT_311 = 4
CONNACK_ACCEPTED = 0
CONNACK_UNACCEPTABLE_VERSION = 1
CONNACK_IDENTIFIER_REJECTED = 2
CONNACK_SERVER_UNAVAILABLE = 3
CONNACK_BAD_CREDENTIALS = 4
CONNACK_NOT_AUTHORIZED = 5
SUBACK_FAILURE = 0x80
MAX_REMAINING_LENGTH = 268_435_455
DEFAULT_MAX_PACKET_SIZE = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Will:
    topic: str
    payload: bytes
    qos: int
    retain: bool


@dataclass(frozen=True, slots=True)
class Connect:
    protocol_name: str
    protocol_level: int
    client_id: str
    clean_session: bool
    keepalive: int
    will: Will | None = None
    username: str | None = None
    password: bytes | None = None


@dataclass(frozen=True, slots=True)
class ConnAck:
    session_present: bool
    return_code: int


@dataclass(frozen=True, slots=True)
class Publish:
    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None


@dataclass(frozen=True, slots=True)
class PubAck:
    packet_id: int


@dataclass(frozen=True, slots=True)
class PubRec:
    packet_id: int


@dataclass(frozen=True, slots=True)
class PubRel:
    packet_id: int


@dataclass(frozen=True, slots=True)
class PubComp:
    packet_id: int


@dataclass(frozen=True, slots=True)
class Subscribe:
    packet_id: int
    topics: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class SubAck:
    packet_id: int
    return_codes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    packet_id: int
    topics: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class UnsubAck:
    packet_id: int


@dataclass(frozen=True, slots=True)
class PingReq:
    pass


@dataclass(frozen=True, slots=True)
class PingResp:
    pass


@dataclass(frozen=True, slots=True)
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
