"""MQTT 3.1 / 3.1.1 on the wire, without the wire: :func:`encode` turns a packet into bytes,
:class:`Decoder` turns the bytes a connection reads, in whatever pieces they arrive, into
packets. No sockets and no clocks (in the manner of h11): the listener owns the socket and
feeds the decoder; tests and the benchmark's load generator use the same two as a client.

Every rule of a single packet is checked here (flags, lengths, identifiers, strings, names,
CONNECT flags); the rules of a connection (CONNECT first and once, keepalive, client
identifiers, what a 3.1 client is answered) are the session's. Where MQTT 3.1 and 3.1.1 differ
the decoder follows the level of the CONNECT it last decoded, and 3.1.1 before that (a client
passes ``protocol_level``); every such choice is listed in docs/decisions.md.

Encoding is on the listener's hot path (one PUBLISH per delivery), so :func:`encode` checks
only what it could not otherwise write (QoS, packet identifiers, lengths) and trusts its
caller with names.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import lru_cache

from broker.protocol.mqtt.errors import MqttProtocolError, UnacceptableProtocol
from broker.protocol.mqtt.names import MAX_STRING_BYTES, validate_filter, validate_topic_name
from broker.protocol.mqtt.packets import (
    DEFAULT_MAX_PACKET_SIZE,
    MAX_REMAINING_LENGTH,
    MQTT_31,
    MQTT_311,
    PROTOCOL_NAMES,
    SUBACK_FAILURE,
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

CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = 1, 2, 3, 4, 5, 6, 7
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK, PINGREQ, PINGRESP, DISCONNECT = 8, 9, 10, 11, 12, 13, 14
FLAGS_QOS1 = 0b0010  # the fixed flags of PUBREL, SUBSCRIBE and UNSUBSCRIBE
FLAGS_QOS1_DUP = 0b1010  # the same resent, as MQTT 3.1 marks a retry
_FIXED_FLAGS = {PUBREL: FLAGS_QOS1, SUBSCRIBE: FLAGS_QOS1, UNSUBSCRIBE: FLAGS_QOS1}
_LENGTH_BYTES = 4
_VALID_SUBACK = frozenset({0, 1, 2, SUBACK_FAILURE})
_MAX_CONNACK_CODE = 5

_U16 = struct.Struct("!H")
# CONNECT flags
_USERNAME, _PASSWORD, _WILL_RETAIN, _WILL, _CLEAN, _RESERVED = 0x80, 0x40, 0x20, 0x04, 0x02, 0x01
_WILL_QOS_SHIFT = 3


# --- encoding ---------------------------------------------------------------------------------


def remaining_length(length: int) -> bytes:
    """The variable-length Remaining Length field: seven bits a byte, least significant first."""
    if length < 128:
        if length < 0:
            raise ValueError(f"negative remaining length {length}")
        return bytes((length,))
    if length > MAX_REMAINING_LENGTH:
        raise ValueError(f"remaining length {length:,} over the MQTT limit of {MAX_REMAINING_LENGTH:,}")
    out = bytearray()
    while length:
        length, digit = divmod(length, 128)
        out.append(digit | 0x80 if length else digit)
    return bytes(out)


def _u16(value: int, what: str) -> bytes:
    if not 0 <= value <= 0xFFFF:
        raise ValueError(f"{what} {value} out of 0..65535")
    return _U16.pack(value)


def _packet_id(value: int | None) -> bytes:
    if value is None or not 1 <= value <= 0xFFFF:
        raise ValueError(f"packet identifier {value!r} out of 1..65535")
    return _U16.pack(value)


def _binary(data: bytes) -> bytes:
    if len(data) > MAX_STRING_BYTES:
        raise ValueError(f"field of {len(data):,} bytes, over {MAX_STRING_BYTES}")
    return _U16.pack(len(data)) + data


def _string(text: str) -> bytes:
    return _binary(text.encode("utf-8"))


def _qos(value: int) -> int:
    if value not in (0, 1, 2):
        raise ValueError(f"QoS {value!r} is not 0, 1 or 2")
    return value


def _frame(first: int, body: bytes) -> bytes:
    return bytes((first,)) + remaining_length(len(body)) + body


def _encode_publish(packet: Publish) -> bytes:
    name = _topic_field(packet.topic)
    qos = packet.qos
    payload = packet.payload
    if qos:
        if qos != 1 and qos != 2:
            raise ValueError(f"QoS {qos!r} is not 0, 1 or 2")
        packet_id = _packet_id(packet.packet_id)
    elif packet.packet_id is not None:
        raise ValueError("a QoS 0 PUBLISH has no packet identifier")
    else:
        packet_id = b""
    first = 0x30 | (qos << 1) | (8 if packet.dup else 0) | (1 if packet.retain else 0)
    length = len(name) + len(packet_id) + len(payload)
    header = bytes((first, length)) if length < 128 else bytes((first,)) + _length_field(length)
    return b"".join((header, name, packet_id, payload))


@lru_cache(maxsize=4096)
def _topic_field(topic: str) -> bytes:
    """A PUBLISH's topic name as written (remembered: a publication's deliveries share it)."""
    name = topic.encode("utf-8")
    if len(name) > MAX_STRING_BYTES:
        raise ValueError(f"topic name of {len(name):,} bytes, over {MAX_STRING_BYTES}")
    return _U16.pack(len(name)) + name


_length_field = lru_cache(maxsize=1024)(remaining_length)


def _encode_connect(packet: Connect) -> bytes:
    flags = _CLEAN if packet.clean_session else 0
    payload = [_string(packet.client_id)]
    if packet.will is not None:
        will = packet.will
        flags |= _WILL | (_qos(will.qos) << _WILL_QOS_SHIFT) | (_WILL_RETAIN if will.retain else 0)
        payload += [_string(will.topic), _binary(will.payload)]
    if packet.username is not None:
        flags |= _USERNAME
        payload.append(_string(packet.username))
    if packet.password is not None:
        flags |= _PASSWORD
        payload.append(_binary(packet.password))
    header = _string(packet.protocol_name) + bytes((packet.protocol_level, flags))
    return _frame(CONNECT << 4, header + _u16(packet.keepalive, "keepalive") + b"".join(payload))


def _encode_connack(packet: ConnAck) -> bytes:
    if not 0 <= packet.return_code <= 0xFF:
        raise ValueError(f"CONNACK return code {packet.return_code} out of 0..255")
    return bytes((CONNACK << 4, 2, 1 if packet.session_present else 0, packet.return_code))


def _ack(kind: int, flags: int = 0) -> Callable[[PubAck | PubRec | PubRel | PubComp | UnsubAck], bytes]:
    first = kind << 4 | flags

    header = bytes((first, 2))

    def encode_ack(packet: PubAck | PubRec | PubRel | PubComp | UnsubAck) -> bytes:
        return header + _packet_id(packet.packet_id)

    return encode_ack


def _encode_subscribe(packet: Subscribe) -> bytes:
    if not packet.topics:
        raise ValueError("a SUBSCRIBE needs at least one topic filter")
    body = [_packet_id(packet.packet_id)]
    for text, qos in packet.topics:
        body += [_string(text), bytes((_qos(qos),))]
    return _frame(SUBSCRIBE << 4 | FLAGS_QOS1, b"".join(body))


def _encode_suback(packet: SubAck) -> bytes:
    if not packet.return_codes:
        raise ValueError("a SUBACK needs at least one return code")
    if not _VALID_SUBACK.issuperset(packet.return_codes):
        raise ValueError(f"SUBACK return codes {packet.return_codes} not 0, 1, 2 or 0x80")
    return _frame(SUBACK << 4, _packet_id(packet.packet_id) + bytes(packet.return_codes))


def _encode_unsubscribe(packet: Unsubscribe) -> bytes:
    if not packet.topics:
        raise ValueError("an UNSUBSCRIBE needs at least one topic filter")
    body = _packet_id(packet.packet_id) + b"".join(_string(text) for text in packet.topics)
    return _frame(UNSUBSCRIBE << 4 | FLAGS_QOS1, body)


def _constant(data: bytes) -> Callable[[PingReq | PingResp | Disconnect], bytes]:
    return lambda _packet: data


_ENCODERS: dict[type, Callable[..., bytes]] = {
    Publish: _encode_publish,
    PubAck: _ack(PUBACK),
    PubRec: _ack(PUBREC),
    PubRel: _ack(PUBREL, FLAGS_QOS1),
    PubComp: _ack(PUBCOMP),
    Connect: _encode_connect,
    ConnAck: _encode_connack,
    Subscribe: _encode_subscribe,
    SubAck: _encode_suback,
    Unsubscribe: _encode_unsubscribe,
    UnsubAck: _ack(UNSUBACK),
    PingReq: _constant(bytes((PINGREQ << 4, 0))),
    PingResp: _constant(bytes((PINGRESP << 4, 0))),
    Disconnect: _constant(bytes((DISCONNECT << 4, 0))),
}


def encode(packet: Packet) -> bytes:
    """The packet's bytes. ValueError for a packet that cannot be written (a QoS of 3, a packet
    identifier of 0 or missing, a string over 65,535 bytes, a body over 256 MiB); names are
    not checked (see the module's docstring)."""
    return _ENCODERS[type(packet)](packet)


# --- decoding ---------------------------------------------------------------------------------


class _Reader:
    """The fields of one packet's body, front to back; running off its end is malformed."""

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
        high, low = self.take(2, what)
        return high << 8 | low

    def packet_id(self) -> int:
        value = self.u16("packet identifier")
        if value == 0:
            raise MqttProtocolError("packet identifier 0")
        return value

    def binary(self, what: str) -> bytes:
        return self.take(self.u16(f"{what} length"), what)

    def text(self, what: str) -> str:
        return _text(self.binary(what), what)

    def finish(self, what: str) -> None:
        if self.pos != self.end:
            raise MqttProtocolError(f"{self.end - self.pos} bytes after the end of a {what}")


def _text(raw: bytes, what: str) -> str:
    """A UTF-8 string as both specifications define it: well-formed (no surrogates, no overlong
    forms, which Python's strict codec refuses) and without U+0000."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise MqttProtocolError(f"{what} is not valid UTF-8") from None
    if "\x00" in text:
        raise MqttProtocolError(f"{what} contains U+0000")
    return text


class Decoder:
    """Bytes in, packets out, for one connection.

    :meth:`feed` takes whatever the socket returned and gives back every packet completed by
    it, in order, keeping any partial packet for the next call. Malformed input raises
    :class:`MqttProtocolError` as soon as the bytes show it, carrying the packets of the same read
    that came before the malformed one (a Remaining Length over
    ``max_packet_size`` as soon as its last length byte arrives, before any of the body is
    kept); after that the decoder refuses everything, as the connection is to be closed.

    ``protocol_level`` selects the MQTT 3.1 or 3.1.1 rules where they differ; decoding a
    CONNECT sets it to the CONNECT's level.
    """

    __slots__ = ("_buffer", "_failed", "max_packet_size", "protocol_level")

    def __init__(
        self, max_packet_size: int = DEFAULT_MAX_PACKET_SIZE, *, protocol_level: int = MQTT_311
    ) -> None:
        self.max_packet_size = max_packet_size
        self.protocol_level = protocol_level
        self._buffer = bytearray()
        self._failed = False

    def feed(self, data: bytes) -> list[Packet]:
        if self._failed:
            raise MqttProtocolError("input after a protocol error")
        buffer = self._buffer
        buffer += data
        try:
            packets, used = self._packets(buffer)
        except MqttProtocolError:
            self._failed = True
            buffer.clear()
            raise
        if used:
            del buffer[:used]
        return packets

    def _packets(self, data: bytearray) -> tuple[list[Packet], int]:
        """Every whole packet at the front of ``data``, and how many bytes they took."""
        packets: list[Packet] = []
        size = len(data)
        pos = 0
        acks = _ACKS_BY_FIRST_BYTE
        try:
            while pos < size:
                first = data[pos]
                # The hot path of QoS 1 and 2: a whole acknowledgement, read where it lies.
                if (ack := acks.get(first)) is not None and pos + 3 < size and data[pos + 1] == 2:
                    packet_id = data[pos + 2] << 8 | data[pos + 3]
                    if not packet_id:
                        raise MqttProtocolError("packet identifier 0")
                    packets.append(ack(packet_id))
                    pos += 4
                    continue
                if first not in _VALID_FIRST_BYTES[self.protocol_level == MQTT_31]:
                    self._check_first_byte(first)  # raises
                if pos + 1 < size and data[pos + 1] < 0x80:  # one length byte: every ack, most PUBLISHes
                    length, start = data[pos + 1], pos + 2
                    if length > self.max_packet_size:
                        self._remaining_length(data, pos + 1, size)  # raises
                else:
                    length, start = self._remaining_length(data, pos + 1, size)
                if start < 0 or start + length > size:
                    break
                packets.append(self._packet(first, data, start, start + length))
                pos = start + length
        except MqttProtocolError as error:
            error.packets = packets
            raise
        return packets, pos

    def _check_first_byte(self, first: int) -> None:
        kind, flags = first >> 4, first & 0x0F
        if kind == PUBLISH:
            if flags & 0b0110 == 0b0110:
                raise MqttProtocolError("PUBLISH with QoS 3")
            if flags & 0b1110 == 0b1000 and self.protocol_level != MQTT_31:
                raise MqttProtocolError("DUP set on a QoS 0 PUBLISH")
            return
        if not CONNECT <= kind <= DISCONNECT:
            raise MqttProtocolError(f"reserved packet type {kind}")
        expected = _FIXED_FLAGS.get(kind, 0)
        resent_31 = expected and flags == FLAGS_QOS1_DUP and self.protocol_level == MQTT_31
        if flags != expected and not resent_31:
            raise MqttProtocolError(f"flags {flags:04b} on packet type {kind}, not {expected:04b}")

    def _remaining_length(self, data: bytearray, pos: int, size: int) -> tuple[int, int]:
        """(Remaining Length, where the body starts), or (0, -1) while its bytes are incomplete."""
        length = 0
        for count in range(_LENGTH_BYTES):
            if pos + count >= size:
                return 0, -1
            digit = data[pos + count]
            length |= (digit & 0x7F) << (7 * count)
            if not digit & 0x80:
                if length > self.max_packet_size:
                    raise MqttProtocolError(
                        f"remaining length {length:,} over the maximum packet size {self.max_packet_size:,}"
                    )
                return length, pos + count + 1
        raise MqttProtocolError("remaining length longer than four bytes")

    def _packet(self, first: int, data: bytearray, start: int, end: int) -> Packet:
        kind = first >> 4
        if kind == PUBLISH:
            return _decode_publish(first, data, start, end)
        if end - start == 2 and (ack := _ACKS.get(kind)) is not None:
            packet_id = data[start] << 8 | data[start + 1]
            if not packet_id:
                raise MqttProtocolError("packet identifier 0")
            return ack(packet_id)
        reader = _Reader(data, start, end)
        if kind == CONNECT:
            connect = _decode_connect(reader)
            self.protocol_level = connect.protocol_level
            return connect
        packet = _DECODERS[kind](reader)
        reader.finish(type(packet).__name__.upper())
        return packet


def _decode_publish(first: int, data: bytearray, start: int, end: int) -> Publish:
    """The hot path of every delivery: read in place, without a reader."""
    qos = (first >> 1) & 3
    if end - start < 2:
        raise MqttProtocolError("packet ends inside its topic name length")
    pos = start + 2 + (data[start] << 8 | data[start + 1])
    if pos > end:
        raise MqttProtocolError("packet ends inside its topic name")
    topic = _text(bytes(data[start + 2 : pos]), "topic name")
    validate_topic_name(topic)
    packet_id = None
    if qos:
        if pos + 2 > end:
            raise MqttProtocolError("packet ends inside its packet identifier")
        packet_id = data[pos] << 8 | data[pos + 1]
        if packet_id == 0:
            raise MqttProtocolError("packet identifier 0")
        pos += 2
    return Publish(topic, bytes(data[pos:end]), qos, bool(first & 1), bool(first & 8), packet_id)


def _decode_connect(reader: _Reader) -> Connect:
    name = reader.text("protocol name")
    level = reader.byte("protocol level")
    if PROTOCOL_NAMES.get(level) != name:
        if name in PROTOCOL_NAMES.values():
            raise UnacceptableProtocol(f"protocol {name!r} level {level} is not MQTT 3.1 or 3.1.1")
        raise MqttProtocolError(f"protocol name {name!r} is not MQTT")
    strict = level == MQTT_311
    flags = reader.byte("connect flags")
    if flags & _RESERVED and strict:
        raise MqttProtocolError("reserved connect flag set")
    will_qos = (flags >> _WILL_QOS_SHIFT) & 3
    if will_qos == 3:
        raise MqttProtocolError("will QoS 3")
    if not flags & _WILL and flags & (_WILL_RETAIN | 0b11 << _WILL_QOS_SHIFT) and strict:
        raise MqttProtocolError("will QoS or will retain set without the will flag")
    if flags & _PASSWORD and not flags & _USERNAME and strict:
        raise MqttProtocolError("password without a user name")
    keepalive = reader.u16("keepalive")
    client_id = reader.text("client identifier")
    will = None
    if flags & _WILL:
        topic = reader.text("will topic")
        validate_topic_name(topic)
        will = Will(topic, reader.binary("will message"), will_qos, bool(flags & _WILL_RETAIN))
    # MQTT 3.1 clients exist that set a credential flag and leave the field out: absent.
    username = reader.text("user name") if flags & _USERNAME and (strict or reader.left()) else None
    password = reader.binary("password") if flags & _PASSWORD and (strict or reader.left()) else None
    reader.finish("CONNECT")
    return Connect(name, level, client_id, bool(flags & _CLEAN), keepalive, will, username, password)


def _decode_connack(reader: _Reader) -> ConnAck:
    flags = reader.byte("acknowledge flags")
    if flags & 0xFE:
        raise MqttProtocolError(f"reserved CONNACK flags {flags:08b}")
    code = reader.byte("return code")
    if code > _MAX_CONNACK_CODE:
        raise MqttProtocolError(f"CONNACK return code {code}")
    if flags and code:
        raise MqttProtocolError("session present on a refused connection")
    return ConnAck(bool(flags), code)


def _decode_subscribe(reader: _Reader) -> Subscribe:
    packet_id = reader.packet_id()
    topics = []
    while reader.left():
        text = reader.text("topic filter")
        validate_filter(text)
        qos = reader.byte("requested QoS")
        if qos > 2:
            raise MqttProtocolError(f"requested QoS byte {qos:#04x}")
        topics.append((text, qos))
    if not topics:
        raise MqttProtocolError("SUBSCRIBE without a topic filter")
    return Subscribe(packet_id, tuple(topics))


def _decode_suback(reader: _Reader) -> SubAck:
    packet_id = reader.packet_id()
    codes = reader.take(reader.left(), "return codes")
    if not codes:
        raise MqttProtocolError("SUBACK without a return code")
    if not _VALID_SUBACK.issuperset(codes):
        raise MqttProtocolError(f"SUBACK return codes {list(codes)}")
    return SubAck(packet_id, tuple(codes))


def _decode_unsubscribe(reader: _Reader) -> Unsubscribe:
    packet_id = reader.packet_id()
    topics = []
    while reader.left():
        text = reader.text("topic filter")
        validate_filter(text)
        topics.append(text)
    if not topics:
        raise MqttProtocolError("UNSUBSCRIBE without a topic filter")
    return Unsubscribe(packet_id, tuple(topics))


def _with_id(cls: type[PubAck | PubRec | PubRel | PubComp | UnsubAck]) -> Callable[[_Reader], Packet]:
    return lambda reader: cls(reader.packet_id())


def _empty(cls: type[PingReq | PingResp | Disconnect]) -> Callable[[_Reader], Packet]:
    return lambda _reader: cls()


_DECODERS: dict[int, Callable[[_Reader], Packet]] = {
    CONNACK: _decode_connack,
    PUBACK: _with_id(PubAck),
    PUBREC: _with_id(PubRec),
    PUBREL: _with_id(PubRel),
    PUBCOMP: _with_id(PubComp),
    SUBSCRIBE: _decode_subscribe,
    SUBACK: _decode_suback,
    UNSUBSCRIBE: _decode_unsubscribe,
    UNSUBACK: _with_id(UnsubAck),
    PINGREQ: _empty(PingReq),
    PINGRESP: _empty(PingResp),
    DISCONNECT: _empty(Disconnect),
}
_ACKS: dict[int, type[PubAck | PubRec | PubRel | PubComp | UnsubAck]] = {
    PUBACK: PubAck,
    PUBREC: PubRec,
    PUBREL: PubRel,
    PUBCOMP: PubComp,
    UNSUBACK: UnsubAck,
}


def _first_bytes(protocol_level: int) -> frozenset[int]:
    """The first bytes a packet may start with under ``protocol_level``'s rules."""
    decoder = Decoder(protocol_level=protocol_level)
    valid = set()
    for first in range(256):
        try:
            decoder._check_first_byte(first)
        except MqttProtocolError:
            continue
        valid.add(first)
    return frozenset(valid)


_VALID_FIRST_BYTES = (_first_bytes(MQTT_311), _first_bytes(MQTT_31))  # by "is 3.1"
# The acknowledgements a client sends, by their first byte (flags as both versions require).
_ACKS_BY_FIRST_BYTE: dict[int, type[PubAck | PubRec | PubRel | PubComp]] = {
    PUBACK << 4: PubAck,
    PUBREC << 4: PubRec,
    PUBREL << 4 | _FIXED_FLAGS[PUBREL]: PubRel,
    PUBCOMP << 4: PubComp,
}
