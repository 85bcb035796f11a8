"""Tests for broker.protocol.mqtt.wire: the Variable Byte Integer both ways at each of its
boundaries, the integers, UTF-8 strings as section 1.5 defines them, and the PUBLISH frame's
property block."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.protocol.mqtt import MqttProtocolError, Publish, ReasonCode, wire
from broker.protocol.mqtt.wire import Reader

BOUNDARIES = {
    0: "00",
    127: "7f",
    128: "8001",
    16383: "ff7f",
    16384: "808001",
    2097151: "ffff7f",
    2097152: "80808001",
    268435455: "ffffff7f",
}


def reader(data: bytes) -> Reader:
    return Reader(bytearray(data), 0, len(data))


@pytest.mark.parametrize(("value", "hex_"), BOUNDARIES.items())
def test_variable_byte_integer_at_each_boundary(value: int, hex_: str) -> None:
    """Section 1.5.5, Table 1-1: the fewest bytes [MQTT-1.5.5-1] written, read back."""
    assert wire.varint(value).hex() == hex_
    assert reader(bytes.fromhex(hex_)).varint("value") == value


@given(st.integers(0, 268_435_455))
def test_variable_byte_integer_round_trips(value: int) -> None:
    assert reader(wire.varint(value)).varint("value") == value


def test_a_fifth_byte_is_malformed() -> None:
    with pytest.raises(MqttProtocolError, match="property length longer than four bytes") as caught:
        reader(bytes.fromhex("ffffffff7f")).varint("property length")
    assert caught.value.reason_code == ReasonCode.MALFORMED_PACKET


def test_a_non_minimal_encoding_is_read() -> None:
    """As the Remaining Length's are (docs/decisions.md): [MQTT-1.5.5-1] binds the sender."""
    assert reader(bytes.fromhex("8000")).varint("value") == 0


@pytest.mark.parametrize(("value", "what"), [(-1, "negative"), (268_435_456, "over the MQTT limit")])
def test_what_a_variable_byte_integer_cannot_hold(value: int, what: str) -> None:
    with pytest.raises(ValueError, match=what):
        wire.varint(value)


def test_four_byte_integer() -> None:
    assert wire.u32(0xDEADBEEF, "x").hex() == "deadbeef"
    assert reader(bytes.fromhex("deadbeef")).u32("x") == 0xDEADBEEF
    with pytest.raises(ValueError, match=r"out of 0\.\.4294967295"):
        wire.u32(2**32, "x")


def test_mqtt_1_5_4_3_a_byte_order_mark_is_kept() -> None:
    """[MQTT-1.5.4-3] 0xEF 0xBB 0xBF is U+FEFF wherever it appears, never skipped or stripped."""
    assert wire.text(b"\xef\xbb\xbfa", "x") == "\ufeffa"


def test_text_reads_a_slice_of_the_buffer() -> None:
    assert wire.text(bytearray(b"a/b"), "topic name") == "a/b"


def test_publish_frame_puts_properties_between_identifier_and_payload() -> None:
    packet = Publish("t", b"p", qos=1, packet_id=2)
    assert wire.publish_frame(packet).hex() == "3206" + "000174" + "0002" + "70"
    assert wire.publish_frame(packet, b"\x00").hex() == "3207" + "000174" + "0002" + "00" + "70"
    assert wire.publish_frame(Publish("t", b"p"), b"\x00").hex() == "3005" + "000174" + "00" + "70"
