"""Tests for broker.protocol.mqtt.codec: golden bytes from the MQTT 3.1 / 3.1.1 specifications
(and the PUBLISH example of the IBM MQ Telemetry documents), every packet type both ways, the
Remaining Length at each of its boundaries, and the decoder's handling of partial input."""

from __future__ import annotations

import pytest

from broker.protocol.mqtt import (
    CONNACK_ACCEPTED,
    CONNACK_NOT_AUTHORIZED,
    DEFAULT_MAX_PACKET_SIZE,
    MAX_REMAINING_LENGTH,
    MQTT_31,
    MQTT_311,
    SUBACK_FAILURE,
    ConnAck,
    Connect,
    Decoder,
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
    encode,
)
from broker.protocol.mqtt.codec import remaining_length


def decode_one(data: bytes, **options: int) -> Packet:
    packets = Decoder(**options).feed(data)
    assert len(packets) == 1, packets
    return packets[0]


# --- golden bytes -------------------------------------------------------------------------------


def test_publish_example_of_the_mq_telemetry_documents() -> None:
    """Fixed header 0x32 (PUBLISH, QoS 1), topic "a/b", message id 10, as the seed documents draw it."""
    packet = Publish("a/b", b"", qos=1, packet_id=10)
    wire = bytes([0x32, 0x07, 0x00, 0x03, 0x61, 0x2F, 0x62, 0x00, 0x0A])
    assert encode(packet) == wire
    assert decode_one(wire) == packet


def test_connect_variable_header_example_of_3_1_1() -> None:
    """3.1.1 section 3.1.2.10: "MQTT", level 4, flags 0xCE (user name, password, will QoS 1,
    will flag, clean session), keepalive 10."""
    packet = Connect("MQTT", MQTT_311, "c", True, 10, Will("w", b"m", 1, False), "u", b"p")
    wire = encode(packet)
    assert wire[2:12] == bytes([0x00, 0x04, 0x4D, 0x51, 0x54, 0x54, 0x04, 0xCE, 0x00, 0x0A])
    assert wire[:2] == bytes([0x10, len(wire) - 2])
    assert decode_one(wire) == packet


def test_connect_of_3_1_names_mqisdp() -> None:
    packet = Connect("MQIsdp", MQTT_31, "client", False, 60)
    wire = encode(packet)
    assert wire == bytes([0x10, 20, 0, 6]) + b"MQIsdp" + bytes([3, 0x00, 0, 60, 0, 6]) + b"client"
    assert decode_one(wire) == packet


def test_subscribe_example_of_3_1_1() -> None:
    """3.1.1 section 3.8.3.1: packet id 10, "a/b" at QoS 1 and "c/d" at QoS 2."""
    packet = Subscribe(10, (("a/b", 1), ("c/d", 2)))
    wire = bytes.fromhex("820e000a0003612f6201" + "0003632f6402")
    assert encode(packet) == wire
    assert decode_one(wire) == packet


def test_suback_example_of_3_1_1() -> None:
    packet = SubAck(10, (0, 2, SUBACK_FAILURE))
    wire = bytes.fromhex("9005000a000280")
    assert encode(packet) == wire
    assert decode_one(wire) == packet


def test_unsubscribe_example_of_3_1_1() -> None:
    packet = Unsubscribe(10, ("a/b", "c/d"))
    wire = bytes.fromhex("a20c000a0003612f620003632f64")
    assert encode(packet) == wire
    assert decode_one(wire) == packet


@pytest.mark.parametrize(
    ("packet", "wire"),
    [
        (ConnAck(False, CONNACK_ACCEPTED), "20020000"),
        (ConnAck(True, CONNACK_ACCEPTED), "20020100"),
        (ConnAck(False, CONNACK_NOT_AUTHORIZED), "20020005"),
        (PubAck(1), "40020001"),
        (PubRec(0x1234), "50021234"),
        (PubRel(65535), "6202ffff"),
        (PubComp(7), "70020007"),
        (UnsubAck(10), "b002000a"),
        (PingReq(), "c000"),
        (PingResp(), "d000"),
        (Disconnect(), "e000"),
        (Publish("t", b"x"), "300400017478"),
        (Publish("t", b"", retain=True), "3103000174"),
        (Publish("t", b"", qos=2, dup=True, packet_id=3), "3c050001740003"),
    ],
)
def test_fixed_packets(packet: Packet, wire: str) -> None:
    assert encode(packet).hex() == wire
    assert decode_one(bytes.fromhex(wire)) == packet


def test_connect_with_every_field_round_trips() -> None:
    packet = Connect(
        "MQTT", MQTT_311, "ü-client", False, 65535, Will("a/ü", b"\x00\xff", 2, True), "user", b"\x00"
    )
    assert decode_one(encode(packet)) == packet


def test_empty_client_id_and_empty_payloads_round_trip() -> None:
    packet = Connect("MQTT", MQTT_311, "", True, 0, Will("w", b"", 0, False))
    assert decode_one(encode(packet)) == packet


# --- Remaining Length ---------------------------------------------------------------------------

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


@pytest.mark.parametrize(("length", "wire"), BOUNDARIES.items())
def test_remaining_length_encoding_at_each_boundary(length: int, wire: str) -> None:
    assert remaining_length(length).hex() == wire


def test_a_remaining_length_beyond_four_bytes_cannot_be_encoded() -> None:
    with pytest.raises(ValueError, match="over the MQTT limit"):
        remaining_length(MAX_REMAINING_LENGTH + 1)


@pytest.mark.parametrize("length", [127, 128, 16383, 16384, 2097151, 2097152])
def test_publish_at_each_boundary_round_trips(length: int) -> None:
    packet = Publish("t", b"\xab" * (length - 3))  # 2 length bytes + "t"
    wire = encode(packet)
    assert wire[1 : 1 + len(BOUNDARIES[length]) // 2].hex() == BOUNDARIES[length]
    assert len(wire) == 1 + len(BOUNDARIES[length]) // 2 + length
    assert decode_one(wire, max_packet_size=MAX_REMAINING_LENGTH) == packet


def test_the_largest_remaining_length_waits_for_its_body() -> None:
    decoder = Decoder(max_packet_size=MAX_REMAINING_LENGTH)
    assert decoder.feed(bytes.fromhex("30ffffff7f") + b"\x00\x01t") == []


def test_remaining_length_zero() -> None:
    assert decode_one(bytes.fromhex("c000")) == PingReq()


# --- partial input ------------------------------------------------------------------------------

SAMPLE = (
    Connect("MQTT", MQTT_311, "id", True, 30),
    Publish("bench/1/x", b"p" * 300, qos=1, packet_id=1),
    PubRel(1),
    Subscribe(2, (("bench/#", 2),)),
    PingReq(),
    Publish("a", b""),
)


def test_one_byte_reads() -> None:
    wire = b"".join(map(encode, SAMPLE))
    decoder = Decoder()
    out: list[Packet] = []
    for index in range(len(wire)):
        out += decoder.feed(wire[index : index + 1])
    assert out == list(SAMPLE)


def test_several_packets_in_one_read_and_a_partial_one_kept() -> None:
    wire = b"".join(map(encode, SAMPLE))
    decoder = Decoder()
    assert decoder.feed(wire[:-2]) == list(SAMPLE[:-1])
    assert decoder.feed(b"") == []
    assert decoder.feed(wire[-2:]) == [SAMPLE[-1]]


def test_decoder_learns_the_level_from_connect() -> None:
    decoder = Decoder()
    assert decoder.protocol_level == MQTT_311
    decoder.feed(encode(Connect("MQIsdp", MQTT_31, "id", True, 30)))
    assert decoder.protocol_level == MQTT_31


def test_default_maximum_packet_size() -> None:
    assert DEFAULT_MAX_PACKET_SIZE == 4 * 1024 * 1024
    assert decode_one(encode(Publish("t", bytes(DEFAULT_MAX_PACKET_SIZE - 3)))).payload == bytes(
        DEFAULT_MAX_PACKET_SIZE - 3
    )


# --- what encode refuses ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("packet", "match"),
    [
        (Publish("t", b"", qos=3, packet_id=1), "QoS 3"),
        (Publish("t", b"", qos=1), "packet identifier None"),
        (Publish("t", b"", qos=1, packet_id=0), "packet identifier 0"),
        (Publish("t", b"", qos=0, packet_id=5), "QoS 0 PUBLISH has no packet identifier"),
        (Publish("t" * 65536, b""), "topic name of 65,536 bytes"),
        (PubAck(0), "packet identifier 0"),
        (PubRel(65536), "packet identifier 65536"),
        (Subscribe(1, ()), "at least one topic filter"),
        (Subscribe(1, (("a", 3),)), "QoS 3"),
        (Unsubscribe(1, ()), "at least one topic filter"),
        (SubAck(1, ()), "at least one return code"),
        (SubAck(1, (3,)), "not 0, 1, 2 or 0x80"),
        (ConnAck(False, 256), "out of 0..255"),
        (Connect("MQTT", 4, "c", True, 70000), "keepalive 70000"),
        (Connect("MQTT", 4, "c", True, 1, Will("w", b"", 3, False)), "QoS 3"),
        (Connect("MQTT", 4, "c", True, 1, password=bytes(65536)), "65,536 bytes"),
    ],
)
def test_encode_refuses_what_cannot_be_written(packet: Packet, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        encode(packet)
