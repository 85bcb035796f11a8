"""Tests for broker.protocol.mqtt.v5.reasons: the enumeration against Table 2-6 of MQTT 5.0 and
the codes of each packet against the tables of sections 3.2 to 3.15 (typed here from the
specification)."""

from __future__ import annotations

import pytest

from broker.protocol.mqtt import (
    REASON_CODES,
    Auth,
    ConnAck,
    Disconnect,
    PubAck,
    PubComp,
    PubRec,
    PubRel,
    ReasonCode,
    SubAck,
    UnsubAck,
)

# Table 2-6 - Reason Codes: value and every name the specification gives it.
TABLE_2_6 = {
    0x00: {"Success", "Normal disconnection", "Granted QoS 0"},
    0x01: {"Granted QoS 1"},
    0x02: {"Granted QoS 2"},
    0x04: {"Disconnect with Will Message"},
    0x10: {"No matching subscribers"},
    0x11: {"No subscription existed"},
    0x18: {"Continue authentication"},
    0x19: {"Re-authenticate"},
    0x80: {"Unspecified error"},
    0x81: {"Malformed Packet"},
    0x82: {"Protocol Error"},
    0x83: {"Implementation specific error"},
    0x84: {"Unsupported Protocol Version"},
    0x85: {"Client Identifier not valid"},
    0x86: {"Bad User Name or Password"},
    0x87: {"Not authorized"},
    0x88: {"Server unavailable"},
    0x89: {"Server busy"},
    0x8A: {"Banned"},
    0x8B: {"Server shutting down"},
    0x8C: {"Bad authentication method"},
    0x8D: {"Keep Alive timeout"},
    0x8E: {"Session taken over"},
    0x8F: {"Topic Filter invalid"},
    0x90: {"Topic Name invalid"},
    0x91: {"Packet Identifier in use"},
    0x92: {"Packet Identifier not found"},
    0x93: {"Receive Maximum exceeded"},
    0x94: {"Topic Alias invalid"},
    0x95: {"Packet too large"},
    0x96: {"Message rate too high"},
    0x97: {"Quota exceeded"},
    0x98: {"Administrative action"},
    0x99: {"Payload format invalid"},
    0x9A: {"Retain not supported"},
    0x9B: {"QoS not supported"},
    0x9C: {"Use another server"},
    0x9D: {"Server moved"},
    0x9E: {"Shared Subscriptions not supported"},
    0x9F: {"Connection rate exceeded"},
    0xA0: {"Maximum connect time"},
    0xA1: {"Subscription Identifiers not supported"},
    0xA2: {"Wildcard Subscriptions not supported"},
}

# The reason codes of each packet's section.
SECTIONS = {
    ConnAck: "00 80 81 82 83 84 85 86 87 88 89 8A 8C 90 95 97 99 9A 9B 9C 9D 9F",  # 3.2.2.2
    PubAck: "00 10 80 83 87 90 91 97 99",  # 3.4.2.1
    PubRec: "00 10 80 83 87 90 91 97 99",  # 3.5.2.1
    PubRel: "00 92",  # 3.6.2.1
    PubComp: "00 92",  # 3.7.2.1
    SubAck: "00 01 02 80 83 87 8F 91 97 9E A1 A2",  # 3.9.3
    UnsubAck: "00 11 80 83 87 8F 91",  # 3.11.3
    # 3.14.2.1, with 0x8C, which Table 2-6 gives DISCONNECT and the section leaves out
    Disconnect: "00 04 80 81 82 83 87 89 8B 8C 8D 8E 8F 90 93 94 95 96 97 98 99 9A 9B 9C 9D 9E 9F A0 A1 A2",
    Auth: "00 18 19",  # 3.15.2.1
}


def constant(name: str) -> str:
    return name.upper().replace(" ", "_").replace("-", "_")


def test_every_code_of_table_2_6_under_each_of_its_names() -> None:
    assert {member.value for member in ReasonCode} == set(TABLE_2_6)
    for value, names in TABLE_2_6.items():
        for name in names:
            assert ReasonCode[constant(name)] == value, name


def test_nothing_but_table_2_6() -> None:
    assert set(ReasonCode.__members__) == {constant(name) for names in TABLE_2_6.values() for name in names}


@pytest.mark.parametrize("packet", SECTIONS, ids=lambda packet: packet.__name__)
def test_each_packet_carries_its_section_s_codes(packet: type) -> None:
    assert REASON_CODES[packet] == {int(code, 16) for code in SECTIONS[packet].split()}


def test_every_code_is_carried_by_some_packet() -> None:
    assert set().union(*REASON_CODES.values()) == set(TABLE_2_6)
