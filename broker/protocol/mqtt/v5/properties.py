"""MQTT 5.0's properties on the wire (section 2.2.2): the table of the 27 property identifiers,
each with its data type, the packets that may carry it, whether it may repeat there and the
values it may take; and a property block read into :class:`Properties` or written from one,
by that table alone."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from broker.protocol.mqtt import wire
from broker.protocol.mqtt.errors import MqttProtocolError
from broker.protocol.mqtt.packets import NO_PROPERTIES, Properties
from broker.protocol.mqtt.v5.reasons import ReasonCode
from broker.protocol.mqtt.wire import (
    AUTH,
    CONNACK,
    CONNECT,
    DISCONNECT,
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

WILL = 0  # a will's properties, in a CONNECT: not a packet type (0 is reserved)
WHERE = {
    CONNECT: "CONNECT",
    CONNACK: "CONNACK",
    PUBLISH: "PUBLISH",
    WILL: "a will",
    PUBACK: "PUBACK",
    PUBREC: "PUBREC",
    PUBREL: "PUBREL",
    PUBCOMP: "PUBCOMP",
    SUBSCRIBE: "SUBSCRIBE",
    SUBACK: "SUBACK",
    UNSUBSCRIBE: "UNSUBSCRIBE",
    UNSUBACK: "UNSUBACK",
    DISCONNECT: "DISCONNECT",
    AUTH: "AUTH",
}
EMPTY_BLOCK = b"\x00"  # a property block with no property: its length, 0


@dataclass(frozen=True, slots=True)
class DataType:
    """One of section 1.5's data types, as a property's value is read and written."""

    read: Callable[[Reader, str], Any]
    write: Callable[[Any, str], bytes]


def _zero_or_one(value: int) -> bool:
    return value in (0, 1)


def _not_zero(value: int) -> bool:
    return value != 0


def _topic_name(value: str) -> bool:
    """A Response Topic is a Topic Name: not empty, no wildcard [MQTT-3.3.2-14]."""
    return bool(value) and "+" not in value and "#" not in value


def _read_boolean(reader: Reader, what: str) -> bool:
    value = reader.byte(what)
    if not _zero_or_one(value):
        raise MqttProtocolError(f"{what} of {value}, not 0 or 1", ReasonCode.PROTOCOL_ERROR)
    return bool(value)


def _read_pair(reader: Reader, what: str) -> tuple[str, str]:
    return reader.text(f"{what} name"), reader.text(f"{what} value")


def _write_pair(pair: tuple[str, str], _what: str) -> bytes:
    return wire.string(pair[0]) + wire.string(pair[1])


BYTE = DataType(Reader.byte, wire.byte)
BOOLEAN = DataType(_read_boolean, lambda value, _what: b"\x01" if value else b"\x00")  # a Byte of 0 or 1
TWO_BYTE_INTEGER = DataType(Reader.u16, wire.u16)
FOUR_BYTE_INTEGER = DataType(Reader.u32, wire.u32)
VARIABLE_BYTE_INTEGER = DataType(Reader.varint, wire.varint)
UTF8_STRING = DataType(Reader.text, lambda value, _what: wire.string(value))
BINARY_DATA = DataType(Reader.binary, lambda value, _what: wire.binary(value))
UTF8_STRING_PAIR = DataType(_read_pair, _write_pair)


@dataclass(frozen=True, slots=True)
class Property:
    """One row of Table 2-4. ``field``: its :class:`Properties` field, a tuple where it may
    repeat; ``repeats_in``: the packets where it may appear more than once (elsewhere a second
    one is a Protocol Error); ``valid``: the values the specification allows, any other being
    ``invalid`` (a Protocol Error but for a Topic Alias of 0, Topic Alias invalid)."""

    identifier: int
    name: str
    field: str
    type: DataType
    packets: frozenset[int]
    repeats: bool = False
    repeats_in: frozenset[int] = frozenset()
    valid: Callable[[Any], bool] | None = None
    invalid: ReasonCode = ReasonCode.PROTOCOL_ERROR


def _property(identifier: int, name: str, data_type: DataType, *packets: int, **rules: Any) -> Property:
    field = rules.pop("field", name.lower().replace(" ", "_").replace("-", ""))
    repeats = "repeats_in" in rules
    return Property(identifier, name, field, data_type, frozenset(packets), repeats, **rules)


_MESSAGE = (PUBLISH, WILL)  # what a publication carries to its subscribers
_REASONS = (CONNACK, PUBACK, PUBREC, PUBREL, PUBCOMP, SUBACK, UNSUBACK, DISCONNECT, AUTH)
_EVERY = frozenset({CONNECT, SUBSCRIBE, UNSUBSCRIBE, *_MESSAGE, *_REASONS})
_ALIAS_INVALID = ReasonCode.TOPIC_ALIAS_INVALID

TABLE: tuple[Property, ...] = (
    _property(0x01, "Payload Format Indicator", BYTE, *_MESSAGE, valid=_zero_or_one),
    _property(0x02, "Message Expiry Interval", FOUR_BYTE_INTEGER, *_MESSAGE),
    _property(0x03, "Content Type", UTF8_STRING, *_MESSAGE),
    _property(0x08, "Response Topic", UTF8_STRING, *_MESSAGE, valid=_topic_name),
    _property(0x09, "Correlation Data", BINARY_DATA, *_MESSAGE),
    _property(
        0x0B,
        "Subscription Identifier",
        VARIABLE_BYTE_INTEGER,
        PUBLISH,
        SUBSCRIBE,
        field="subscription_identifiers",
        repeats_in=frozenset({PUBLISH}),
        valid=_not_zero,
    ),
    _property(0x11, "Session Expiry Interval", FOUR_BYTE_INTEGER, CONNECT, CONNACK, DISCONNECT),
    _property(0x12, "Assigned Client Identifier", UTF8_STRING, CONNACK),
    _property(0x13, "Server Keep Alive", TWO_BYTE_INTEGER, CONNACK),
    _property(0x15, "Authentication Method", UTF8_STRING, CONNECT, CONNACK, AUTH),
    _property(0x16, "Authentication Data", BINARY_DATA, CONNECT, CONNACK, AUTH),
    _property(0x17, "Request Problem Information", BOOLEAN, CONNECT),
    _property(0x18, "Will Delay Interval", FOUR_BYTE_INTEGER, WILL),
    _property(0x19, "Request Response Information", BOOLEAN, CONNECT),
    _property(0x1A, "Response Information", UTF8_STRING, CONNACK),
    _property(0x1C, "Server Reference", UTF8_STRING, CONNACK, DISCONNECT),
    _property(0x1F, "Reason String", UTF8_STRING, *_REASONS),
    _property(0x21, "Receive Maximum", TWO_BYTE_INTEGER, CONNECT, CONNACK, valid=_not_zero),
    _property(0x22, "Topic Alias Maximum", TWO_BYTE_INTEGER, CONNECT, CONNACK),
    _property(0x23, "Topic Alias", TWO_BYTE_INTEGER, PUBLISH, valid=_not_zero, invalid=_ALIAS_INVALID),
    _property(0x24, "Maximum QoS", BYTE, CONNACK, valid=_zero_or_one),
    _property(0x25, "Retain Available", BOOLEAN, CONNACK),
    _property(0x26, "User Property", UTF8_STRING_PAIR, *_EVERY, field="user_properties", repeats_in=_EVERY),
    _property(0x27, "Maximum Packet Size", FOUR_BYTE_INTEGER, CONNECT, CONNACK, valid=_not_zero),
    _property(0x28, "Wildcard Subscription Available", BOOLEAN, CONNACK),
    _property(0x29, "Subscription Identifier Available", BOOLEAN, CONNACK),
    _property(0x2A, "Shared Subscription Available", BOOLEAN, CONNACK),
)
BY_IDENTIFIER = {prop.identifier: prop for prop in TABLE}
_TWICE = ReasonCode.PROTOCOL_ERROR  # a property more than once where it may appear once
_REPEATING_FIELDS = frozenset(prop.field for prop in TABLE if prop.repeats)
_VALUES = attrgetter(*(prop.field for prop in TABLE))  # every field's value, in TABLE's order
_ABSENT = _VALUES(NO_PROPERTIES)


# --- reading ----------------------------------------------------------------------------------


def read_properties(reader: Reader, where: int) -> Properties:
    """The property block at the reader's position, in a ``where`` (a packet type, or WILL).
    An unknown identifier or one ``where`` may not carry is a Malformed Packet (section
    2.2.2.2); one given twice where it may appear once, or a value the specification forbids,
    a Protocol Error."""
    length = reader.varint("property length")
    if not length:
        return NO_PROPERTIES
    block = Reader(reader.data, reader.pos, reader.pos + length)
    if block.end > reader.end:
        raise MqttProtocolError("packet ends inside its properties")
    reader.pos = block.end
    values: dict[str, Any] = {}
    while block.pos < block.end:
        prop = _known(block.byte("property identifier"), where)
        value = prop.type.read(block, prop.name)
        if prop.valid is not None and not prop.valid(value):
            raise MqttProtocolError(f"{prop.name} of {value!r} in {WHERE[where]}", prop.invalid)
        if prop.field not in values:
            values[prop.field] = [value] if prop.repeats else value
        elif where in prop.repeats_in:
            values[prop.field].append(value)
        else:
            raise MqttProtocolError(f"{prop.name} more than once in {WHERE[where]}", _TWICE)
    for field in _REPEATING_FIELDS.intersection(values):
        values[field] = tuple(values[field])
    return Properties(**values)


def _known(identifier: int, where: int) -> Property:
    prop = BY_IDENTIFIER.get(identifier)
    if prop is None:
        raise MqttProtocolError(f"unknown property identifier {identifier:#04x} in {WHERE[where]}")
    if where not in prop.packets:
        raise MqttProtocolError(f"{prop.name} is not a property of {WHERE[where]}")
    return prop


# --- writing ----------------------------------------------------------------------------------


def write_properties(properties: Properties, where: int) -> bytes:
    """The property block of ``properties`` in a ``where``, in the order of Table 2-4 (order has
    no meaning but among User Properties, which keep theirs). ValueError for a property
    ``where`` may not carry or a value its data type cannot hold; the rest (a Receive Maximum
    of 0, two Subscription Identifiers in a SUBSCRIBE) is written as given."""
    if properties is NO_PROPERTIES:
        return EMPTY_BLOCK
    values = _VALUES(properties)
    if values == _ABSENT:
        return EMPTY_BLOCK
    present = zip(TABLE, values, strict=True)
    body = b"".join(
        [_written(prop, value, where) for prop, value in present if value is not None and value != ()]
    )
    return wire.varint(len(body), "property length") + body


def _written(prop: Property, value: Any, where: int) -> bytes:
    if where not in prop.packets:
        raise ValueError(f"{prop.name} is not a property of {WHERE[where]}")
    head = bytes((prop.identifier,))
    if prop.repeats:
        return b"".join(head + prop.type.write(item, prop.name) for item in value)
    return head + prop.type.write(value, prop.name)
