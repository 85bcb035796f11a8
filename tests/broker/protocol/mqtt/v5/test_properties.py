"""Tests for broker.protocol.mqtt.v5.properties: the table against Table 2-4 of MQTT 5.0 (typed
here from the specification, not from the code), every property block of every packet
round-tripping, and both directions against paho-mqtt's own property encoding."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties

from broker.protocol.mqtt import NO_PROPERTIES, Properties
from broker.protocol.mqtt.v5 import properties as table
from broker.protocol.mqtt.v5.properties import read_properties, write_properties
from broker.protocol.mqtt.wire import PUBLISH, Reader
from tests.broker.protocol.mqtt.v5.packet_strategies import properties

# Table 2-4 - Properties: identifier, name, data type, where ("Will" for Will Properties).
ACKS = "PUBACK PUBREC PUBREL PUBCOMP SUBACK UNSUBACK"
SPECIFICATION = (
    (0x01, "Payload Format Indicator", "Byte", "PUBLISH Will"),
    (0x02, "Message Expiry Interval", "Four Byte Integer", "PUBLISH Will"),
    (0x03, "Content Type", "UTF-8 Encoded String", "PUBLISH Will"),
    (0x08, "Response Topic", "UTF-8 Encoded String", "PUBLISH Will"),
    (0x09, "Correlation Data", "Binary Data", "PUBLISH Will"),
    (0x0B, "Subscription Identifier", "Variable Byte Integer", "PUBLISH SUBSCRIBE"),
    (0x11, "Session Expiry Interval", "Four Byte Integer", "CONNECT CONNACK DISCONNECT"),
    (0x12, "Assigned Client Identifier", "UTF-8 Encoded String", "CONNACK"),
    (0x13, "Server Keep Alive", "Two Byte Integer", "CONNACK"),
    (0x15, "Authentication Method", "UTF-8 Encoded String", "CONNECT CONNACK AUTH"),
    (0x16, "Authentication Data", "Binary Data", "CONNECT CONNACK AUTH"),
    (0x17, "Request Problem Information", "Byte", "CONNECT"),
    (0x18, "Will Delay Interval", "Four Byte Integer", "Will"),
    (0x19, "Request Response Information", "Byte", "CONNECT"),
    (0x1A, "Response Information", "UTF-8 Encoded String", "CONNACK"),
    (0x1C, "Server Reference", "UTF-8 Encoded String", "CONNACK DISCONNECT"),
    (0x1F, "Reason String", "UTF-8 Encoded String", f"CONNACK {ACKS} DISCONNECT AUTH"),
    (0x21, "Receive Maximum", "Two Byte Integer", "CONNECT CONNACK"),
    (0x22, "Topic Alias Maximum", "Two Byte Integer", "CONNECT CONNACK"),
    (0x23, "Topic Alias", "Two Byte Integer", "PUBLISH"),
    (0x24, "Maximum QoS", "Byte", "CONNACK"),
    (0x25, "Retain Available", "Byte", "CONNACK"),
    (
        0x26,
        "User Property",
        "UTF-8 String Pair",
        f"CONNECT CONNACK PUBLISH Will {ACKS} SUBSCRIBE UNSUBSCRIBE DISCONNECT AUTH",
    ),
    (0x27, "Maximum Packet Size", "Four Byte Integer", "CONNECT CONNACK"),
    (0x28, "Wildcard Subscription Available", "Byte", "CONNACK"),
    (0x29, "Subscription Identifier Available", "Byte", "CONNACK"),
    (0x2A, "Shared Subscription Available", "Byte", "CONNACK"),
)
TYPE_NAMES = {
    table.BYTE: "Byte",
    table.BOOLEAN: "Byte",
    table.TWO_BYTE_INTEGER: "Two Byte Integer",
    table.FOUR_BYTE_INTEGER: "Four Byte Integer",
    table.VARIABLE_BYTE_INTEGER: "Variable Byte Integer",
    table.UTF8_STRING: "UTF-8 Encoded String",
    table.BINARY_DATA: "Binary Data",
    table.UTF8_STRING_PAIR: "UTF-8 String Pair",
}
WHERE_NAMES = {name: where for where, name in table.WHERE.items()} | {"Will": table.WILL}
PAHO_WHERE = {
    where: getattr(PacketTypes, name.upper(), PacketTypes.WILLMESSAGE) for where, name in table.WHERE.items()
}


def specified() -> dict[int, tuple[str, str, frozenset[int]]]:
    return {
        identifier: (name, type_name, frozenset(WHERE_NAMES[place] for place in where.split()))
        for identifier, name, type_name, where in SPECIFICATION
    }


# --- the table ----------------------------------------------------------------------------------


def test_the_table_is_table_2_4() -> None:
    ours = {prop.identifier: (prop.name, TYPE_NAMES[prop.type], prop.packets) for prop in table.TABLE}
    assert ours == specified()
    assert len(ours) == 27


def test_every_property_has_its_field_and_every_field_its_property() -> None:
    assert sorted(prop.field for prop in table.TABLE) == sorted(
        f.name for f in dataclasses.fields(Properties)
    )


def test_only_user_property_and_a_publish_s_subscription_identifiers_repeat() -> None:
    """Sections 2.2.2.2 and 3.3.2.3.8: every other property may appear once in a packet."""
    repeating = {(prop.name, where) for prop in table.TABLE for where in prop.repeats_in}
    users = {("User Property", where) for where in table.BY_IDENTIFIER[0x26].packets}
    assert repeating == users | {("Subscription Identifier", PUBLISH)}


# --- round trips --------------------------------------------------------------------------------


def read(block: bytes, where: int) -> Properties:
    reader = Reader(bytearray(block), 0, len(block))
    value = read_properties(reader, where)
    assert not reader.left()
    return value


@pytest.mark.parametrize("where", table.WHERE, ids=table.WHERE.get)
@given(data=st.data())
def test_every_block_round_trips(where: int, data: st.DataObject) -> None:
    value = data.draw(properties(where))
    assert read(write_properties(value, where), where) == value


def test_no_properties_is_one_byte_of_zero() -> None:
    """[MQTT-2.2.2-1] No property is a Property Length of zero."""
    assert write_properties(NO_PROPERTIES, PUBLISH) == b"\x00"
    assert write_properties(Properties(), PUBLISH) == b"\x00"
    assert read(b"\x00", PUBLISH) is NO_PROPERTIES


def test_user_properties_keep_their_order_and_repeats() -> None:
    """[MQTT-3.3.2-18]: the order of User Properties is kept; a name may repeat."""
    pairs = (("b", "1"), ("a", "2"), ("b", "1"), ("", ""))
    assert (
        read(write_properties(Properties(user_properties=pairs), PUBLISH), PUBLISH).user_properties == pairs
    )


# --- paho-mqtt ----------------------------------------------------------------------------------

# paho refuses U+FEFF in strings (MQTT 5.0 only says a receiver must not strip it) and a Maximum
# Packet Size over 268,435,455 (the specification allows any non-zero four-byte integer).
PAHO_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00\ufeff"), max_size=20)


def to_paho(value: Properties, where: int) -> PahoProperties:
    paho = PahoProperties(PAHO_WHERE[where])
    for prop in table.TABLE:
        field = getattr(value, prop.field)
        if field is None or (prop.repeats and not field):
            continue
        setattr(
            paho,
            prop.name.replace(" ", ""),
            list(field) if prop.repeats else int(field) if isinstance(field, bool) else field,
        )
    return paho


@pytest.mark.parametrize("where", table.WHERE, ids=table.WHERE.get)
@given(data=st.data())
def test_paho_encodes_and_we_decode(where: int, data: st.DataObject) -> None:
    value = data.draw(properties(where, PAHO_TEXT))
    assume(value.maximum_packet_size is None or value.maximum_packet_size <= 268_435_455)
    assert read(to_paho(value, where).pack(), where) == value


@pytest.mark.parametrize("where", table.WHERE, ids=table.WHERE.get)
@given(data=st.data())
def test_we_encode_and_paho_decodes(where: int, data: st.DataObject) -> None:
    value = data.draw(properties(where, PAHO_TEXT))
    assume(value.maximum_packet_size is None or value.maximum_packet_size <= 268_435_455)
    block = write_properties(value, where)
    paho, used = PahoProperties(PAHO_WHERE[where]).unpack(block)
    assert used == len(block)
    assert paho.json() == to_paho(value, where).json()
