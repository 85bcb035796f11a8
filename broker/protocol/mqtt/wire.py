"""MQTT's data representation, shared by every level's codec: the packet type numbers, the
field types of section 1.5 (two- and four-byte integers, Variable Byte Integers, UTF-8 strings,
binary data) written and read, and the PUBLISH layout all levels share."""

from __future__ import annotations

import struct
from functools import lru_cache

from broker.protocol.mqtt.errors import MqttProtocolError
from broker.protocol.mqtt.names import MAX_STRING_BYTES
from broker.protocol.mqtt.packets import MAX_REMAINING_LENGTH, Publish
from broker.protocol.mqtt.v5.reasons import ReasonCode

CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = 1, 2, 3, 4, 5, 6, 7
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK, PINGREQ, PINGRESP, DISCONNECT = 8, 9, 10, 11, 12, 13, 14
AUTH = 15  # MQTT 5.0 only; reserved before
FLAGS_QOS1 = 0b0010  # the fixed flags of PUBREL, SUBSCRIBE and UNSUBSCRIBE
# CONNECT flags
USERNAME, PASSWORD, WILL_RETAIN, WILL, CLEAN, RESERVED = 0x80, 0x40, 0x20, 0x04, 0x02, 0x01
WILL_QOS_SHIFT = 3
VARINT_BYTES = 4

U16 = struct.Struct("!H")
U32 = struct.Struct("!I")


# --- writing ----------------------------------------------------------------------------------


def varint(value: int, what: str = "variable byte integer") -> bytes:
    """A Variable Byte Integer: seven bits a byte, least significant first, in the fewest bytes."""
    if value < 128:
        if value < 0:
            raise ValueError(f"negative {what} {value}")
        return bytes((value,))
    if value > MAX_REMAINING_LENGTH:
        raise ValueError(f"{what} {value:,} over the MQTT limit of {MAX_REMAINING_LENGTH:,}")
    out = bytearray()
    while value:
        value, digit = divmod(value, 128)
        out.append(digit | 0x80 if value else digit)
    return bytes(out)


@lru_cache(maxsize=1024)
def length_field(length: int) -> bytes:
    """A Remaining Length as written (remembered: most packets have one of few lengths)."""
    return varint(length, "remaining length")


def byte(value: int, what: str) -> bytes:
    if not 0 <= value <= 0xFF:
        raise ValueError(f"{what} {value} out of 0..255")
    return bytes((value,))


def u16(value: int, what: str) -> bytes:
    if not 0 <= value <= 0xFFFF:
        raise ValueError(f"{what} {value} out of 0..65535")
    return U16.pack(value)


def u32(value: int, what: str) -> bytes:
    if not 0 <= value <= 0xFFFF_FFFF:
        raise ValueError(f"{what} {value} out of 0..4294967295")
    return U32.pack(value)


def packet_id(value: int | None) -> bytes:
    if value is None or not 1 <= value <= 0xFFFF:
        raise ValueError(f"packet identifier {value!r} out of 1..65535")
    return U16.pack(value)


def binary(data: bytes) -> bytes:
    if len(data) > MAX_STRING_BYTES:
        raise ValueError(f"field of {len(data):,} bytes, over {MAX_STRING_BYTES}")
    return U16.pack(len(data)) + data


def string(text: str) -> bytes:
    return binary(text.encode("utf-8"))


def valid_qos(value: int) -> int:
    if value not in (0, 1, 2):
        raise ValueError(f"QoS {value!r} is not 0, 1 or 2")
    return value


def frame(first: int, body: bytes) -> bytes:
    return bytes((first,)) + length_field(len(body)) + body


@lru_cache(maxsize=4096)
def topic_field(topic: str) -> bytes:
    """A PUBLISH's topic name as written (remembered: a publication's deliveries share it)."""
    name = topic.encode("utf-8")
    if len(name) > MAX_STRING_BYTES:
        raise ValueError(f"topic name of {len(name):,} bytes, over {MAX_STRING_BYTES}")
    return U16.pack(len(name)) + name


def publish_frame(packet: Publish, properties: bytes = b"") -> bytes:
    """A PUBLISH's bytes, with ``properties`` (an MQTT 5.0 property block; none before) between
    its packet identifier and its payload. On the path of every delivery, so written inline."""
    name = topic_field(packet.topic)
    qos = packet.qos
    payload = packet.payload
    if qos:
        if qos != 1 and qos != 2:
            raise ValueError(f"QoS {qos!r} is not 0, 1 or 2")
        value = packet.packet_id
        if value is None or not 0 < value < 0x10000:  # packet_id()'s check, without the call
            raise ValueError(f"packet identifier {value!r} out of 1..65535")
        middle = U16.pack(value) + properties if properties else U16.pack(value)
    elif packet.packet_id is not None:
        raise ValueError("a QoS 0 PUBLISH has no packet identifier")
    else:
        middle = properties
    first = 0x30 | (qos << 1) | (8 if packet.dup else 0) | (1 if packet.retain else 0)
    length = len(name) + len(middle) + len(payload)
    header = bytes((first, length)) if length < 128 else bytes((first,)) + length_field(length)
    return b"".join((header, name, middle, payload))


# --- reading ----------------------------------------------------------------------------------


def text(raw: bytes | bytearray, what: str) -> str:
    """A UTF-8 string as every level defines it: well-formed (no surrogates, no overlong forms,
    which Python's strict codec refuses) and without U+0000 [MQTT-1.5.4-1, -2]."""
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise MqttProtocolError(f"{what} is not valid UTF-8") from None
    if "\x00" in decoded:
        raise MqttProtocolError(f"{what} contains U+0000")
    return decoded


class Reader:
    """The fields of one packet's body (or of a part of it), front to back; running off its end
    is malformed."""

    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytearray, start: int, end: int) -> None:
        self.data = data
        self.pos = start
        self.end = end

    def left(self) -> int:
        return self.end - self.pos

    def take(self, count: int, what: str) -> bytes:
        if self.pos + count > self.end:
            raise MqttProtocolError(f"packet ends inside its {what}")
        start = self.pos
        self.pos += count
        return bytes(self.data[start : self.pos])

    def byte(self, what: str) -> int:
        if self.pos >= self.end:
            raise MqttProtocolError(f"packet ends before its {what}")
        self.pos += 1
        return self.data[self.pos - 1]

    def u16(self, what: str) -> int:
        pos = self.pos
        if pos + 2 > self.end:
            raise MqttProtocolError(f"packet ends inside its {what}")
        self.pos = pos + 2
        return self.data[pos] << 8 | self.data[pos + 1]

    def u32(self, what: str) -> int:
        value: int = U32.unpack(self.take(4, what))[0]
        return value

    def varint(self, what: str) -> int:
        """A Variable Byte Integer: at most four bytes [MQTT-1.5.5]; a longer one is malformed.
        Non-minimal encodings are read, as the Remaining Length's are."""
        value = 0
        for count in range(VARINT_BYTES):
            digit = self.byte(what)
            value |= (digit & 0x7F) << (7 * count)
            if not digit & 0x80:
                return value
        raise MqttProtocolError(f"{what} longer than four bytes")

    def packet_id(self) -> int:
        value = self.u16("packet identifier")
        if value == 0:
            raise MqttProtocolError("packet identifier 0", ReasonCode.PROTOCOL_ERROR)
        return value

    def binary(self, what: str) -> bytes:
        return self.take(self.u16(f"{what} length"), what)

    def text(self, what: str) -> str:
        return text(self.binary(what), what)

    def finish(self, what: str) -> None:
        if self.pos != self.end:
            raise MqttProtocolError(f"{self.end - self.pos} bytes after the end of a {what}")
