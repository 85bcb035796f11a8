"""The MQTT 5.0 packet bodies, both ways, for :mod:`broker.protocol.mqtt.codec`, which frames
them and writes CONNECT for every level. What 5.0 adds to 3.1.1: a property block in every
packet but PINGREQ and PINGRESP, a reason code in every acknowledgement, the Subscription
Options byte, reason codes in UNSUBACK, a DISCONNECT either side sends, and AUTH. Each rule a
packet's bytes must keep is checked here, the error carrying the reason code to answer with."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from broker.protocol.mqtt import wire
from broker.protocol.mqtt.errors import MqttProtocolError
from broker.protocol.mqtt.names import shared_subscription, validate_filter, validate_topic_name
from broker.protocol.mqtt.packets import (
    NO_PROPERTIES,
    Auth,
    ConnAck,
    Disconnect,
    Packet,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    SubscriptionOptions,
    UnsubAck,
    Unsubscribe,
)
from broker.protocol.mqtt.v5.properties import EMPTY_BLOCK, read_properties, write_properties
from broker.protocol.mqtt.v5.reasons import REASON_CODES, ReasonCode
from broker.protocol.mqtt.wire import (
    AUTH,
    CONNACK,
    DISCONNECT,
    FLAGS_QOS1,
    PUBACK,
    PUBCOMP,
    PUBLISH,
    PUBREC,
    PUBREL,
    SUBACK,
    SUBSCRIBE,
    UNSUBACK,
    UNSUBSCRIBE,
    Reader,
)

_RESERVED_OPTIONS = 0b1100_0000  # Subscription Options bits 6 and 7 [MQTT-3.8.3-5]
_Ack = TypeVar("_Ack", PubAck, PubRec, PubRel, PubComp)
_Coded = TypeVar("_Coded", Disconnect, Auth)


def _reason(code: int, packet: type) -> ReasonCode:
    """A reason code received, if ``packet`` may carry it (a Protocol Error otherwise)."""
    if code not in REASON_CODES[packet]:
        raise MqttProtocolError(
            f"reason code {code:#04x} not allowed in {packet.__name__.upper()}", ReasonCode.PROTOCOL_ERROR
        )
    return ReasonCode(code)


def _code(code: int, packet: type) -> bytes:
    """A reason code to send, if ``packet`` may carry it (a ValueError otherwise)."""
    if code not in REASON_CODES[packet]:
        raise ValueError(f"reason code {code:#04x} not allowed in {packet.__name__.upper()}")
    return bytes((code,))


# --- encoding ---------------------------------------------------------------------------------


def encode_publish(packet: Publish) -> bytes:
    return wire.publish_frame(packet, write_properties(packet.properties, PUBLISH))


def _encode_connack(packet: ConnAck) -> bytes:
    head = bytes((1 if packet.session_present else 0,)) + _code(packet.return_code, ConnAck)
    return wire.frame(CONNACK << 4, head + write_properties(packet.properties, CONNACK))


def _ack(cls: type[_Ack], kind: int, flags: int = 0) -> Callable[[_Ack], bytes]:
    """PUBACK, PUBREC, PUBREL or PUBCOMP: the packet identifier alone (remaining length 2) when
    Success without properties, the reason code without a property length when only
    properties are missing (sections 3.4.2.1, 3.4.2.2.1)."""
    first = kind << 4 | flags
    short = bytes((first, 2))

    def encode_ack(packet: _Ack) -> bytes:
        identifier = wire.packet_id(packet.packet_id)
        properties = write_properties(packet.properties, kind)
        if properties == EMPTY_BLOCK:
            if not packet.reason_code:
                return short + identifier
            properties = b""
        return wire.frame(first, identifier + _code(packet.reason_code, cls) + properties)

    return encode_ack


def _encode_subscribe(packet: Subscribe) -> bytes:
    if not packet.topics:
        raise ValueError("a SUBSCRIBE needs at least one topic filter")
    body = [wire.packet_id(packet.packet_id), write_properties(packet.properties, SUBSCRIBE)]
    for text, options in packet.topics:
        if not 0 <= options <= 0xFF or options & 0b11 == 0b11:
            raise ValueError(f"subscription options {options!r} not a byte with a QoS of 0, 1 or 2")
        body += [wire.string(text), bytes((options,))]
    return wire.frame(SUBSCRIBE << 4 | FLAGS_QOS1, b"".join(body))


def _encode_suback(packet: SubAck | UnsubAck) -> bytes:
    """SUBACK or UNSUBACK: identifier, properties, a reason code for each filter."""
    if isinstance(packet, SubAck):
        kind, codes = SUBACK, packet.return_codes
    else:
        kind, codes = UNSUBACK, packet.reason_codes
    if not codes:
        raise ValueError(f"{type(packet).__name__.upper()} needs at least one reason code")
    head = wire.packet_id(packet.packet_id) + write_properties(packet.properties, kind)
    return wire.frame(kind << 4, head + b"".join(_code(code, type(packet)) for code in codes))


def _encode_unsubscribe(packet: Unsubscribe) -> bytes:
    if not packet.topics:
        raise ValueError("an UNSUBSCRIBE needs at least one topic filter")
    head = wire.packet_id(packet.packet_id) + write_properties(packet.properties, UNSUBSCRIBE)
    return wire.frame(UNSUBSCRIBE << 4 | FLAGS_QOS1, head + b"".join(map(wire.string, packet.topics)))


def _encode_coded(packet: Disconnect | Auth) -> bytes:
    """DISCONNECT or AUTH: nothing at all (remaining length 0) when Success without properties,
    the reason code alone when only properties are missing (sections 3.14.2.2.1, 3.15.2.2.1)."""
    kind = DISCONNECT if isinstance(packet, Disconnect) else AUTH
    properties = write_properties(packet.properties, kind)
    if properties == EMPTY_BLOCK:
        if not packet.reason_code:
            return bytes((kind << 4, 0))
        properties = b""
    return wire.frame(kind << 4, _code(packet.reason_code, type(packet)) + properties)


ENCODERS: dict[type, Callable[..., bytes]] = {
    Publish: encode_publish,
    PubAck: _ack(PubAck, PUBACK),
    PubRec: _ack(PubRec, PUBREC),
    PubRel: _ack(PubRel, PUBREL, FLAGS_QOS1),
    PubComp: _ack(PubComp, PUBCOMP),
    ConnAck: _encode_connack,
    Subscribe: _encode_subscribe,
    SubAck: _encode_suback,
    Unsubscribe: _encode_unsubscribe,
    UnsubAck: _encode_suback,
    Disconnect: _encode_coded,
    Auth: _encode_coded,
}


# --- decoding ---------------------------------------------------------------------------------


def decode_publish(first: int, data: bytearray, start: int, end: int) -> Publish:
    """An empty topic name is allowed only with a Topic Alias (section 3.3.2.1), whose mapping
    is the session's; a wildcard in it is Topic Name invalid [MQTT-3.3.2-2]."""
    reader = Reader(data, start, end)
    topic = reader.text("topic name")
    if topic:
        validate_topic_name(topic)
    qos = (first >> 1) & 3
    packet_id = reader.packet_id() if qos else None
    properties = read_properties(reader, PUBLISH)
    if not topic and properties.topic_alias is None:
        raise MqttProtocolError("empty topic name without a topic alias", ReasonCode.PROTOCOL_ERROR)
    payload = bytes(data[reader.pos : end])
    return Publish(topic, payload, qos, bool(first & 1), bool(first & 8), packet_id, properties)


def _decode_connack(reader: Reader) -> ConnAck:
    flags = reader.byte("acknowledge flags")
    if flags & 0xFE:
        raise MqttProtocolError(f"reserved CONNACK flags {flags:08b}")  # [MQTT-3.2.2-1]
    code = _reason(reader.byte("reason code"), ConnAck)
    if flags and code:
        raise MqttProtocolError("session present on a refused connection", ReasonCode.PROTOCOL_ERROR)
    return ConnAck(bool(flags), code, read_properties(reader, CONNACK))


def _reason_and_properties(reader: Reader, packet: type, kind: int) -> tuple[ReasonCode, Properties]:
    """What follows an acknowledgement's packet identifier, or is all of a DISCONNECT or an AUTH:
    a reason code, then properties, each absent (Success, none) where the packet ends first."""
    if not reader.left():
        return ReasonCode.SUCCESS, NO_PROPERTIES
    code = _reason(reader.byte("reason code"), packet)
    return code, read_properties(reader, kind) if reader.left() else NO_PROPERTIES


def _with_id(cls: type[_Ack], kind: int) -> Callable[[Reader], Packet]:
    def decode_ack(reader: Reader) -> Packet:
        packet_id = reader.packet_id()
        return cls(packet_id, *_reason_and_properties(reader, cls, kind))

    return decode_ack


def _coded(cls: type[_Coded], kind: int) -> Callable[[Reader], Packet]:
    def decode_coded(reader: Reader) -> Packet:
        packet = cls(*_reason_and_properties(reader, cls, kind))
        if kind == AUTH and packet.properties.authentication_method is None:
            raise MqttProtocolError("AUTH without an authentication method", ReasonCode.PROTOCOL_ERROR)
        return packet

    return decode_coded


def _decode_subscribe(reader: Reader) -> Subscribe:
    packet_id = reader.packet_id()
    properties = read_properties(reader, SUBSCRIBE)
    topics = []
    while reader.left():
        text = reader.text("topic filter")
        validate_filter(text)
        topics.append((text, _options(reader.byte("subscription options"), text)))
    if not topics:
        raise MqttProtocolError("SUBSCRIBE without a topic filter", ReasonCode.PROTOCOL_ERROR)
    return Subscribe(packet_id, tuple(topics), properties)


def _options(byte: int, text: str) -> SubscriptionOptions:
    """Reserved bits set are malformed [MQTT-3.8.3-5]; a QoS or Retain Handling of 3, and No
    Local on a shared subscription [MQTT-3.8.3-4], Protocol Errors."""
    if byte & _RESERVED_OPTIONS:
        raise MqttProtocolError(f"reserved subscription options bits in {byte:#04x}")
    options = SubscriptionOptions(byte)
    if options.qos == 3 or options.retain_handling == 3:
        raise MqttProtocolError(f"QoS or Retain Handling 3 in options {byte:#04x}", ReasonCode.PROTOCOL_ERROR)
    if shared_subscription(text) is not None and options.no_local:
        raise MqttProtocolError(f"No Local on shared subscription {text!r}", ReasonCode.PROTOCOL_ERROR)
    return options


def _with_codes(cls: type[SubAck | UnsubAck], kind: int) -> Callable[[Reader], Packet]:
    """SUBACK or UNSUBACK: identifier, properties, then one reason code for each filter."""

    def decode_codes(reader: Reader) -> Packet:
        packet_id = reader.packet_id()
        properties = read_properties(reader, kind)
        codes = tuple(_reason(code, cls) for code in reader.take(reader.left(), "reason codes"))
        if not codes:
            raise MqttProtocolError(f"{cls.__name__.upper()} without a reason code")
        return cls(packet_id, codes, properties)

    return decode_codes


def _decode_unsubscribe(reader: Reader) -> Unsubscribe:
    packet_id = reader.packet_id()
    properties = read_properties(reader, UNSUBSCRIBE)
    topics = []
    while reader.left():
        text = reader.text("topic filter")
        validate_filter(text)
        shared_subscription(text)
        topics.append(text)
    if not topics:
        raise MqttProtocolError("UNSUBSCRIBE without a topic filter", ReasonCode.PROTOCOL_ERROR)
    return Unsubscribe(packet_id, tuple(topics), properties)


DECODERS: dict[int, Callable[[Reader], Packet]] = {
    CONNACK: _decode_connack,
    PUBACK: _with_id(PubAck, PUBACK),
    PUBREC: _with_id(PubRec, PUBREC),
    PUBREL: _with_id(PubRel, PUBREL),
    PUBCOMP: _with_id(PubComp, PUBCOMP),
    SUBSCRIBE: _decode_subscribe,
    SUBACK: _with_codes(SubAck, SUBACK),
    UNSUBSCRIBE: _decode_unsubscribe,
    UNSUBACK: _with_codes(UnsubAck, UNSUBACK),
    DISCONNECT: _coded(Disconnect, DISCONNECT),
    AUTH: _coded(Auth, AUTH),
}
