"""MQTT 3.1, 3.1.1 and 5.0 on the wire, without the wire: :func:`encode` turns a packet into
bytes, :class:`Decoder` turns the bytes a connection reads, in whatever pieces they arrive, into
packets. No sockets and no clocks (in the manner of h11): the listener owns the socket and
feeds the decoder; tests and the benchmark's load generator use the same two as a client.

Every rule of a single packet is checked here (flags, lengths, identifiers, strings, names,
CONNECT flags, MQTT 5.0's properties and reason codes); the rules of a connection (CONNECT
first and once, keepalive, client identifiers, topic aliases, what a 3.1 client is answered)
are the session's. The decoder follows the level of the CONNECT it last decoded, and 3.1.1
before that (a client passes ``protocol_level``); the packet bodies MQTT 5.0 changes are
:mod:`broker.protocol.mqtt.v5.codec`'s. Every choice where the specifications leave one is
listed in docs/decisions.md.

Encoding is on the listener's hot path (one PUBLISH per delivery), so :func:`encode` checks
only what it could not otherwise write (QoS, packet identifiers, lengths, properties a packet
cannot carry) and trusts its caller with names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from broker.protocol.mqtt import wire
from broker.protocol.mqtt.errors import MqttProtocolError, UnacceptableProtocol
from broker.protocol.mqtt.names import validate_filter, validate_topic_name
from broker.protocol.mqtt.packets import (
    DEFAULT_MAX_PACKET_SIZE,
    MQTT_5,
    MQTT_31,
    MQTT_311,
    NO_PROPERTIES,
    PROTOCOL_NAMES,
    SUBACK_FAILURE,
    Auth,
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
from broker.protocol.mqtt.v5 import codec as v5
from broker.protocol.mqtt.v5.properties import WILL as WILL_PROPERTIES
from broker.protocol.mqtt.v5.properties import read_properties, write_properties
from broker.protocol.mqtt.v5.reasons import ReasonCode
from broker.protocol.mqtt.wire import (
    AUTH,
    CLEAN,
    CONNACK,
    CONNECT,
    DISCONNECT,
    FLAGS_QOS1,
    PASSWORD,
    PINGREQ,
    PINGRESP,
    PUBACK,
    PUBCOMP,
    PUBLISH,
    PUBREC,
    PUBREL,
    RESERVED,
    SUBACK,
    SUBSCRIBE,
    UNSUBACK,
    UNSUBSCRIBE,
    USERNAME,
    VARINT_BYTES,
    WILL,
    WILL_QOS_SHIFT,
    WILL_RETAIN,
    Reader,
)
from broker.protocol.mqtt.wire import text as utf8

FLAGS_QOS1_DUP = 0b1010  # the fixed flags of PUBREL, SUBSCRIBE and UNSUBSCRIBE resent by MQTT 3.1
_FIXED_FLAGS = {PUBREL: FLAGS_QOS1, SUBSCRIBE: FLAGS_QOS1, UNSUBSCRIBE: FLAGS_QOS1}
_VALID_SUBACK = frozenset({0, 1, 2, SUBACK_FAILURE})
_MAX_CONNACK_CODE = 5
_TOO_LARGE = ReasonCode.PACKET_TOO_LARGE


# --- encoding ---------------------------------------------------------------------------------


def remaining_length(length: int) -> bytes:
    """The variable-length Remaining Length field: seven bits a byte, least significant first."""
    return wire.varint(length, "remaining length")


def _encode_connect(packet: Connect) -> bytes:
    """Every level's CONNECT, written at the level it names: MQTT 5.0 adds its properties after
    the keepalive and the will's before the will topic."""
    v5_connect = packet.protocol_level == MQTT_5
    flags = CLEAN if packet.clean_session else 0
    payload = [wire.string(packet.client_id)]
    if packet.will is not None:
        will = packet.will
        flags |= WILL | (wire.valid_qos(will.qos) << WILL_QOS_SHIFT) | (WILL_RETAIN if will.retain else 0)
        if v5_connect:
            payload.append(write_properties(will.properties, WILL_PROPERTIES))
        payload += [wire.string(will.topic), wire.binary(will.payload)]
    if packet.username is not None:
        flags |= USERNAME
        payload.append(wire.string(packet.username))
    if packet.password is not None:
        flags |= PASSWORD
        payload.append(wire.binary(packet.password))
    header = wire.string(packet.protocol_name) + bytes((packet.protocol_level, flags))
    header += wire.u16(packet.keepalive, "keepalive")
    if v5_connect:
        header += write_properties(packet.properties, CONNECT)
    return wire.frame(CONNECT << 4, header + b"".join(payload))


def _encode_connack(packet: ConnAck) -> bytes:
    if not 0 <= packet.return_code <= 0xFF:
        raise ValueError(f"CONNACK return code {packet.return_code} out of 0..255")
    return bytes((CONNACK << 4, 2, 1 if packet.session_present else 0, packet.return_code))


def _ack(kind: int, flags: int = 0) -> Callable[[PubAck | PubRec | PubRel | PubComp | UnsubAck], bytes]:
    header = bytes((kind << 4 | flags, 2))

    def encode_ack(packet: PubAck | PubRec | PubRel | PubComp | UnsubAck) -> bytes:
        return header + wire.packet_id(packet.packet_id)

    return encode_ack


def _encode_subscribe(packet: Subscribe) -> bytes:
    if not packet.topics:
        raise ValueError("a SUBSCRIBE needs at least one topic filter")
    body = [wire.packet_id(packet.packet_id)]
    for text, qos in packet.topics:
        body += [wire.string(text), bytes((wire.valid_qos(qos),))]
    return wire.frame(SUBSCRIBE << 4 | FLAGS_QOS1, b"".join(body))


def _encode_suback(packet: SubAck) -> bytes:
    if not packet.return_codes:
        raise ValueError("a SUBACK needs at least one return code")
    if not _VALID_SUBACK.issuperset(packet.return_codes):
        raise ValueError(f"SUBACK return codes {packet.return_codes} not 0, 1, 2 or 0x80")
    return wire.frame(SUBACK << 4, wire.packet_id(packet.packet_id) + bytes(packet.return_codes))


def _encode_unsubscribe(packet: Unsubscribe) -> bytes:
    if not packet.topics:
        raise ValueError("an UNSUBSCRIBE needs at least one topic filter")
    body = wire.packet_id(packet.packet_id) + b"".join(wire.string(text) for text in packet.topics)
    return wire.frame(UNSUBSCRIBE << 4 | FLAGS_QOS1, body)


def _constant(data: bytes) -> Callable[[PingReq | PingResp | Disconnect], bytes]:
    return lambda _packet: data


def _mqtt5_only(packet: Auth) -> bytes:
    raise ValueError(f"no {type(packet).__name__.upper()} before MQTT 5.0")


# MQTT 3.1 and 3.1.1: what MQTT 5.0 adds to a packet (reason codes, properties) is not written.
_ENCODERS: dict[type, Callable[..., bytes]] = {
    Publish: wire.publish_frame,
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
    Auth: _mqtt5_only,
}
_ENCODERS_V5: dict[type, Callable[..., bytes]] = {
    **_ENCODERS,
    **v5.ENCODERS,
}


def encode(packet: Packet, protocol_level: int = MQTT_311) -> bytes:
    """The packet's bytes at ``protocol_level`` (a CONNECT's, at the level it names). ValueError
    for a packet that cannot be written (a QoS of 3, a packet identifier of 0 or missing, a
    string over 65,535 bytes, a body over 256 MiB, a reason code or property the packet cannot
    carry, an AUTH before 5.0); names are not checked (see the module's docstring)."""
    if protocol_level == MQTT_5:
        return _ENCODERS_V5[type(packet)](packet)
    return _ENCODERS[type(packet)](packet)


# --- decoding ---------------------------------------------------------------------------------


class Decoder:
    """Bytes in, packets out, for one connection.

    :meth:`feed` takes whatever the socket returned and gives back every packet completed by
    it, in order, keeping any partial packet for the next call. Malformed input raises
    :class:`MqttProtocolError` as soon as the bytes show it, carrying the packets of the same read
    that came before the malformed one (a packet over ``max_packet_size`` as soon as its last
    length byte arrives, before any of the body is kept); after that the decoder refuses
    everything, as the connection is to be closed.

    ``protocol_level`` selects the rules of MQTT 3.1, 3.1.1 or 5.0 where they differ; decoding a
    CONNECT sets it to the CONNECT's level. A CONNECT naming MQTT 5.0 is refused as an
    unacceptable protocol unless ``accept_mqtt5`` (or the decoder starts at 5.0): a server
    accepts one only where it can serve it.
    """

    __slots__ = ("_buffer", "_failed", "_level", "_rules", "accept_mqtt5", "max_packet_size")

    def __init__(
        self,
        max_packet_size: int = DEFAULT_MAX_PACKET_SIZE,
        *,
        protocol_level: int = MQTT_311,
        accept_mqtt5: bool = False,
    ) -> None:
        self.max_packet_size = max_packet_size
        self.accept_mqtt5 = accept_mqtt5 or protocol_level == MQTT_5
        self.protocol_level = protocol_level
        self._buffer = bytearray()
        self._failed = False

    @property
    def protocol_level(self) -> int:
        return self._level

    @protocol_level.setter
    def protocol_level(self, level: int) -> None:
        if level not in _RULES:
            raise ValueError(f"protocol level {level} is not MQTT 3.1, 3.1.1 or 5.0")
        self._level = level
        self._rules = _RULES[level]

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
                        raise MqttProtocolError("packet identifier 0", ReasonCode.PROTOCOL_ERROR)
                    packets.append(ack(packet_id))
                    pos += 4
                    continue
                rules = self._rules  # a CONNECT changes them for the packets after it
                if first not in rules.first_bytes:
                    _check_first_byte(first, self._level)  # raises
                if pos + 1 < size and data[pos + 1] < 0x80:  # one length byte: every ack, most PUBLISHes
                    length, start = data[pos + 1], pos + 2
                    if length + 2 > self.max_packet_size:
                        length, start = self._remaining_length(data, pos + 1, size)
                else:
                    length, start = self._remaining_length(data, pos + 1, size)
                if start < 0 or start + length > size:
                    break
                packets.append(self._packet(first, rules, data, start, start + length))
                pos = start + length
        except MqttProtocolError as error:
            error.packets = packets
            raise
        return packets, pos

    def _remaining_length(self, data: bytearray, pos: int, size: int) -> tuple[int, int]:
        """(Remaining Length, where the body starts), or (0, -1) while its bytes are incomplete."""
        length = 0
        for count in range(VARINT_BYTES):
            if pos + count >= size:
                return 0, -1
            digit = data[pos + count]
            length |= (digit & 0x7F) << (7 * count)
            if not digit & 0x80:
                self._check_size(length, 2 + count)
                return length, pos + count + 1
        raise MqttProtocolError("remaining length longer than four bytes")

    def _check_size(self, length: int, header: int) -> None:
        """MQTT 5.0's Maximum Packet Size counts the whole packet, ``header`` bytes and the body;
        before 5.0 the limit bounds the Remaining Length."""
        limit = self.max_packet_size
        if self._level == MQTT_5:
            if length + header > limit:
                problem = f"packet of {length + header:,} bytes"
                raise MqttProtocolError(f"{problem} over the maximum packet size {limit:,}", _TOO_LARGE)
        elif length > limit:
            raise MqttProtocolError(
                f"remaining length {length:,} over the maximum packet size {limit:,}", _TOO_LARGE
            )

    def _packet(self, first: int, rules: _Rules, data: bytearray, start: int, end: int) -> Packet:
        kind = first >> 4
        if kind == PUBLISH:
            return rules.publish(first, data, start, end)
        if end - start == 2 and (ack := rules.short_acks.get(kind)) is not None:
            packet_id = data[start] << 8 | data[start + 1]
            if not packet_id:
                raise MqttProtocolError("packet identifier 0", ReasonCode.PROTOCOL_ERROR)
            return ack(packet_id)
        reader = Reader(data, start, end)
        if kind == CONNECT:
            connect = _decode_connect(reader, self.accept_mqtt5)
            self.protocol_level = connect.protocol_level
            return connect
        packet = rules.decoders[kind](reader)
        reader.finish(type(packet).__name__.upper())
        return packet


def _check_first_byte(first: int, level: int) -> None:
    """Refuse a first byte ``level`` does not allow: a reserved packet type or fixed flags."""
    kind, flags = first >> 4, first & 0x0F
    if kind == PUBLISH:
        if flags & 0b0110 == 0b0110:
            raise MqttProtocolError("PUBLISH with QoS 3")
        if flags & 0b1110 == 0b1000 and level != MQTT_31:
            raise MqttProtocolError("DUP set on a QoS 0 PUBLISH")
        return
    if not CONNECT <= kind <= (AUTH if level == MQTT_5 else DISCONNECT):
        raise MqttProtocolError(f"reserved packet type {kind}")
    expected = _FIXED_FLAGS.get(kind, 0)
    resent_31 = expected and flags == FLAGS_QOS1_DUP and level == MQTT_31
    if flags != expected and not resent_31:
        raise MqttProtocolError(f"flags {flags:04b} on packet type {kind}, not {expected:04b}")


def _decode_publish(first: int, data: bytearray, start: int, end: int) -> Publish:
    """The hot path of every delivery: read in place, without a reader."""
    qos = (first >> 1) & 3
    if end - start < 2:
        raise MqttProtocolError("packet ends inside its topic name length")
    pos = start + 2 + (data[start] << 8 | data[start + 1])
    if pos > end:
        raise MqttProtocolError("packet ends inside its topic name")
    topic = utf8(data[start + 2 : pos], "topic name")
    validate_topic_name(topic)
    packet_id = None
    if qos:
        if pos + 2 > end:
            raise MqttProtocolError("packet ends inside its packet identifier")
        packet_id = data[pos] << 8 | data[pos + 1]
        if packet_id == 0:
            raise MqttProtocolError("packet identifier 0", ReasonCode.PROTOCOL_ERROR)
        pos += 2
    return Publish(topic, bytes(data[pos:end]), qos, bool(first & 1), bool(first & 8), packet_id)


def _decode_connect(reader: Reader, accept_mqtt5: bool) -> Connect:
    name = reader.text("protocol name")
    level = reader.byte("protocol level")
    _check_protocol(name, level, accept_mqtt5)
    flags = reader.byte("connect flags")
    _check_connect_flags(flags, level)
    keepalive = reader.u16("keepalive")
    v5_connect = level == MQTT_5
    properties = read_properties(reader, CONNECT) if v5_connect else NO_PROPERTIES
    client_id = reader.text("client identifier")
    will = _decode_will(reader, flags, v5_connect) if flags & WILL else None
    # MQTT 3.1 clients exist that set a credential flag and leave the field out: absent.
    strict = level != MQTT_31
    username = reader.text("user name") if flags & USERNAME and (strict or reader.left()) else None
    password = reader.binary("password") if flags & PASSWORD and (strict or reader.left()) else None
    reader.finish("CONNECT")
    if properties.authentication_data is not None and properties.authentication_method is None:
        raise MqttProtocolError("authentication data without a method", ReasonCode.PROTOCOL_ERROR)
    clean = bool(flags & CLEAN)
    return Connect(name, level, client_id, clean, keepalive, will, username, password, properties)


def _check_protocol(name: str, level: int, accept_mqtt5: bool) -> None:
    if PROTOCOL_NAMES.get(level) == name and (level != MQTT_5 or accept_mqtt5):
        return
    if name in PROTOCOL_NAMES.values():
        known = "MQTT 3.1, 3.1.1 or 5.0" if accept_mqtt5 else "MQTT 3.1 or 3.1.1"
        raise UnacceptableProtocol(f"protocol {name!r} level {level} is not {known}")
    raise MqttProtocolError(f"protocol name {name!r} is not MQTT")


def _check_connect_flags(flags: int, level: int) -> None:
    """3.1.1 and 5.0 refuse what 3.1 calls "not used" [MQTT-3.1.2-3, -11, -13 of 5.0]; only
    3.1.1 refuses a password without a user name."""
    strict = level != MQTT_31
    if flags & RESERVED and strict:
        raise MqttProtocolError("reserved connect flag set")
    if (flags >> WILL_QOS_SHIFT) & 3 == 3:
        raise MqttProtocolError("will QoS 3")
    if not flags & WILL and flags & (WILL_RETAIN | 0b11 << WILL_QOS_SHIFT) and strict:
        raise MqttProtocolError("will QoS or will retain set without the will flag")
    if flags & PASSWORD and not flags & USERNAME and level == MQTT_311:
        raise MqttProtocolError("password without a user name")


def _decode_will(reader: Reader, flags: int, v5_connect: bool) -> Will:
    properties = read_properties(reader, WILL_PROPERTIES) if v5_connect else NO_PROPERTIES
    topic = reader.text("will topic")
    validate_topic_name(topic)
    qos, retain = (flags >> WILL_QOS_SHIFT) & 3, bool(flags & WILL_RETAIN)
    return Will(topic, reader.binary("will message"), qos, retain, properties)


def _decode_connack(reader: Reader) -> ConnAck:
    flags = reader.byte("acknowledge flags")
    if flags & 0xFE:
        raise MqttProtocolError(f"reserved CONNACK flags {flags:08b}")
    code = reader.byte("return code")
    if code > _MAX_CONNACK_CODE:
        raise MqttProtocolError(f"CONNACK return code {code}")
    if flags and code:
        raise MqttProtocolError("session present on a refused connection")
    return ConnAck(bool(flags), code)


def _decode_subscribe(reader: Reader) -> Subscribe:
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


def _decode_suback(reader: Reader) -> SubAck:
    packet_id = reader.packet_id()
    codes = reader.take(reader.left(), "return codes")
    if not codes:
        raise MqttProtocolError("SUBACK without a return code")
    if not _VALID_SUBACK.issuperset(codes):
        raise MqttProtocolError(f"SUBACK return codes {list(codes)}")
    return SubAck(packet_id, tuple(codes))


def _decode_unsubscribe(reader: Reader) -> Unsubscribe:
    packet_id = reader.packet_id()
    topics = []
    while reader.left():
        text = reader.text("topic filter")
        validate_filter(text)
        topics.append(text)
    if not topics:
        raise MqttProtocolError("UNSUBSCRIBE without a topic filter")
    return Unsubscribe(packet_id, tuple(topics))


def _with_id(cls: type[PubAck | PubRec | PubRel | PubComp | UnsubAck]) -> Callable[[Reader], Packet]:
    return lambda reader: cls(reader.packet_id())


def _empty(cls: type[PingReq | PingResp | Disconnect]) -> Callable[[Reader], Packet]:
    return lambda _reader: cls()


_DECODERS: dict[int, Callable[[Reader], Packet]] = {
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
_ACKS: dict[int, Callable[[int], Packet]] = {
    PUBACK: PubAck,
    PUBREC: PubRec,
    PUBREL: PubRel,
    PUBCOMP: PubComp,
    UNSUBACK: UnsubAck,
}


@dataclass(frozen=True, slots=True)
class _Rules:
    """What the decoder does differently at one protocol level."""

    first_bytes: frozenset[int]  # the first bytes a packet may start with
    publish: Callable[[int, bytearray, int, int], Publish]
    short_acks: dict[int, Callable[[int], Packet]]  # acknowledgements of remaining length 2, by type
    decoders: dict[int, Callable[[Reader], Packet]]  # the other bodies but CONNECT's, by type


def _first_bytes(level: int) -> frozenset[int]:
    valid = set()
    for first in range(256):
        try:
            _check_first_byte(first, level)
        except MqttProtocolError:
            continue
        valid.add(first)
    return frozenset(valid)


_RULES = {
    MQTT_31: _Rules(_first_bytes(MQTT_31), _decode_publish, _ACKS, _DECODERS),
    MQTT_311: _Rules(_first_bytes(MQTT_311), _decode_publish, _ACKS, _DECODERS),
    # An MQTT 5.0 UNSUBACK always holds reason codes; PINGREQ and PINGRESP are as before.
    MQTT_5: _Rules(
        _first_bytes(MQTT_5),
        v5.decode_publish,
        {kind: ack for kind, ack in _ACKS.items() if kind != UNSUBACK},
        {**_DECODERS, **v5.DECODERS},
    ),
}
# The acknowledgements a client sends, by their first byte (flags as every level requires),
# read as a whole where they lie when of remaining length 2: Success without properties in 5.0.
_ACKS_BY_FIRST_BYTE: dict[int, type[PubAck | PubRec | PubRel | PubComp]] = {
    PUBACK << 4: PubAck,
    PUBREC << 4: PubRec,
    PUBREL << 4 | _FIXED_FLAGS[PUBREL]: PubRel,
    PUBCOMP << 4: PubComp,
}
