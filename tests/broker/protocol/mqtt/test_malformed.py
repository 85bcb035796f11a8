"""Every malformed packet the decoder must refuse, one test each (raw bytes in,
MqttProtocolError out, with the reason that names the check), and where MQTT 3.1 is more
lenient than 3.1.1 the same bytes accepted after a 3.1 CONNECT."""

from __future__ import annotations

import pytest

from broker.protocol.mqtt import (
    CONNACK_UNACCEPTABLE_VERSION,
    MQTT_31,
    Connect,
    Decoder,
    MqttProtocolError,
    Packet,
    Publish,
    PubRel,
    Subscribe,
    UnacceptableProtocol,
    Unsubscribe,
    encode,
)


def s(text: str | bytes) -> bytes:
    """A length-prefixed string field."""
    raw = text.encode() if isinstance(text, str) else text
    return len(raw).to_bytes(2, "big") + raw


def frame(first: int, body: bytes) -> bytes:
    assert len(body) < 128
    return bytes((first, len(body))) + body


def connect_body(flags: int, *payload: bytes, name: str = "MQTT", level: int = 4) -> bytes:
    return s(name) + bytes((level, flags)) + b"\x00\x3c" + s("client") + b"".join(payload)


def refused(data: bytes, match: str, decoder: Decoder | None = None) -> MqttProtocolError:
    with pytest.raises(MqttProtocolError, match=match) as caught:
        (decoder or Decoder()).feed(data)
    return caught.value


def after_31_connect() -> Decoder:
    decoder = Decoder()
    decoder.feed(encode(Connect("MQIsdp", MQTT_31, "c", True, 60)))
    return decoder


# --- fixed header -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "first",
    [
        0x11,  # CONNECT
        0x28,  # CONNACK
        0x41,  # PUBACK
        0x54,  # PUBREC
        0x60,  # PUBREL without its 0b0010
        0x63,  # PUBREL
        0x72,  # PUBCOMP
        0x80,  # SUBSCRIBE without its 0b0010
        0x8A,  # SUBSCRIBE with DUP, a 3.1 retry
        0x92,  # SUBACK
        0xA0,  # UNSUBSCRIBE without its 0b0010
        0xB1,  # UNSUBACK
        0xC1,  # PINGREQ
        0xD8,  # PINGRESP
        0xE2,  # DISCONNECT
    ],
)
def test_reserved_fixed_header_flags(first: int) -> None:
    refused(bytes((first,)), f"flags {first & 0xF:04b} on packet type {first >> 4}")


@pytest.mark.parametrize("first", [0x00, 0xF0])
def test_reserved_packet_types(first: int) -> None:
    refused(bytes((first, 0)), f"reserved packet type {first >> 4}")


def test_publish_with_qos_3() -> None:
    refused(b"\x36", "QoS 3")


def test_dup_on_a_qos_0_publish() -> None:
    refused(b"\x38", "DUP set on a QoS 0 PUBLISH")


def test_a_fifth_remaining_length_byte_is_refused_at_the_fourth() -> None:
    refused(b"\x30\xff\xff\xff\xff", "longer than four bytes")


def test_a_remaining_length_over_the_maximum_is_refused_from_the_header_alone() -> None:
    decoder = Decoder(max_packet_size=1000)
    assert decoder.feed(b"\x30\xe9") == []  # 1001 continues into a second byte
    refused(b"\x07", "remaining length 1,001 over the maximum packet size 1,000", decoder)


def test_a_remaining_length_at_the_maximum_is_accepted() -> None:
    packet = Publish("t", bytes(997))
    assert Decoder(max_packet_size=1000).feed(encode(packet)) == [packet]


# --- packet identifiers and trailing bytes ------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        frame(0x32, s("a") + b"\x00\x00"),
        frame(0x40, b"\x00\x00"),
        frame(0x50, b"\x00\x00"),
        frame(0x62, b"\x00\x00"),
        frame(0x70, b"\x00\x00"),
        frame(0x82, b"\x00\x00" + s("a") + b"\x00"),
        frame(0x90, b"\x00\x00\x00"),
        frame(0xA2, b"\x00\x00" + s("a")),
        frame(0xB0, b"\x00\x00"),
    ],
)
def test_packet_identifier_zero(data: bytes) -> None:
    refused(data, "packet identifier 0")


@pytest.mark.parametrize(
    ("data", "what"),
    [
        (frame(0x40, b"\x00\x01\x00"), "PUBACK"),
        (frame(0x62, b"\x00\x01\x00"), "PUBREL"),
        (frame(0xB0, b"\x00\x01\x00"), "UNSUBACK"),
        (frame(0x20, b"\x00\x00\x00"), "CONNACK"),
        (frame(0xC0, b"\x00"), "PINGREQ"),
        (frame(0xD0, b"\x00"), "PINGRESP"),
        (frame(0xE0, b"\x00"), "DISCONNECT"),
        (frame(0x10, connect_body(0x02) + b"\x00"), "CONNECT"),
    ],
)
def test_trailing_bytes_inside_a_packet(data: bytes, what: str) -> None:
    refused(data, f"1 bytes after the end of a {what}")


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (frame(0x30, b"\x00"), "ends inside its topic name length"),
        (frame(0x30, b"\x00\x05ab"), "ends inside its topic name"),
        (frame(0x32, s("a") + b"\x00"), "ends inside its packet identifier"),
        (frame(0x40, b"\x00"), "ends inside its packet identifier"),
        (frame(0x20, b"\x00"), "ends before its return code"),
        (frame(0x10, s("MQTT")), "ends before its protocol level"),
        (frame(0x82, b"\x00\x01" + s("a")), "ends before its requested QoS"),
    ],
)
def test_fields_cut_short(data: bytes, match: str) -> None:
    refused(data, match)


# --- strings ------------------------------------------------------------------------------------

INVALID_UTF8 = {
    "bad continuation": b"\xc3\x28",
    "encoded surrogate": b"\xed\xa0\x80",
    "overlong slash": b"\xc0\xaf",
    "truncated sequence": b"a\xe2\x82",
}


@pytest.mark.parametrize("raw", INVALID_UTF8.values(), ids=INVALID_UTF8.keys())
def test_invalid_utf8_in_a_topic_name(raw: bytes) -> None:
    refused(frame(0x30, s(raw)), "topic name is not valid UTF-8")


@pytest.mark.parametrize(
    ("data", "what"),
    [
        (frame(0x30, s("a\x00b")), "topic name"),
        (frame(0x82, b"\x00\x01" + s("a/\x00") + b"\x00"), "topic filter"),
        (frame(0xA2, b"\x00\x01" + s("\x00")), "topic filter"),
        (frame(0x10, s("MQTT") + b"\x04\x02\x00\x3c" + s("cli\x00ent")), "client identifier"),
        (frame(0x10, connect_body(0x06, s("w\x00"), s(""))), "will topic"),
        (frame(0x10, connect_body(0x82, s("us\x00er"))), "user name"),
        (frame(0x10, s("MQ\x00T") + b"\x04\x02\x00\x3c" + s("c")), "protocol name"),
    ],
)
def test_u0000_in_any_string(data: bytes, what: str) -> None:
    refused(data, f"{what} contains U\\+0000")


def test_invalid_utf8_in_a_client_identifier() -> None:
    refused(frame(0x10, s("MQTT") + b"\x04\x02\x00\x3c" + s(b"\xff")), "client identifier is not valid UTF-8")


def test_invalid_utf8_in_a_user_name() -> None:
    refused(frame(0x10, connect_body(0x82, s(b"\xfe"))), "user name is not valid UTF-8")


def test_invalid_utf8_in_a_filter() -> None:
    refused(frame(0x82, b"\x00\x01" + s(b"\xc3\x28") + b"\x00"), "topic filter is not valid UTF-8")


# --- names --------------------------------------------------------------------------------------


@pytest.mark.parametrize("topic", ["a/+", "+", "a/#", "#", "a+b", "sport/te#nnis"])
def test_wildcard_in_a_publish_topic(topic: str) -> None:
    refused(frame(0x30, s(topic)), "wildcard in topic name")


def test_empty_publish_topic() -> None:
    refused(frame(0x30, s("")), "empty topic name")


def test_wildcard_in_a_will_topic() -> None:
    refused(frame(0x10, connect_body(0x06, s("w/#"), s("m"))), "wildcard in topic name")


@pytest.mark.parametrize("text", ["a/#/b", "a#", "#/", "a/b#"])
def test_hash_not_alone_in_the_last_level(text: str) -> None:
    refused(frame(0x82, b"\x00\x01" + s(text) + b"\x00"), "'#' not alone in the last level")


@pytest.mark.parametrize("text", ["a+", "+a/b", "a/b+/c", "++"])
def test_plus_not_a_whole_level(text: str) -> None:
    refused(frame(0x82, b"\x00\x01" + s(text) + b"\x00"), "'\\+' not a whole level")


def test_empty_filter_in_subscribe() -> None:
    refused(frame(0x82, b"\x00\x01" + s("") + b"\x00"), "empty topic filter")


def test_invalid_filter_in_unsubscribe() -> None:
    refused(frame(0xA2, b"\x00\x01" + s("a/#/b")), "'#' not alone")


def test_empty_filter_in_unsubscribe() -> None:
    refused(frame(0xA2, b"\x00\x01" + s("")), "empty topic filter")


# --- SUBSCRIBE, UNSUBSCRIBE, SUBACK, CONNACK ----------------------------------------------------


def test_subscribe_with_no_topics() -> None:
    refused(frame(0x82, b"\x00\x01"), "SUBSCRIBE without a topic filter")


def test_unsubscribe_with_no_topics() -> None:
    refused(frame(0xA2, b"\x00\x01"), "UNSUBSCRIBE without a topic filter")


@pytest.mark.parametrize("qos", [3, 0x41, 0x80])
def test_requested_qos_over_2_or_reserved_bits(qos: int) -> None:
    refused(frame(0x82, b"\x00\x01" + s("a") + bytes((qos,))), "requested QoS byte")


def test_suback_with_a_reserved_return_code() -> None:
    refused(frame(0x90, b"\x00\x01\x00\x03"), "SUBACK return codes")


def test_suback_without_return_codes() -> None:
    refused(frame(0x90, b"\x00\x01"), "SUBACK without a return code")


def test_connack_reserved_flags() -> None:
    refused(frame(0x20, b"\x02\x00"), "reserved CONNACK flags")


def test_connack_reserved_return_code() -> None:
    refused(frame(0x20, b"\x00\x06"), "CONNACK return code 6")


def test_connack_session_present_on_a_refusal() -> None:
    refused(frame(0x20, b"\x01\x05"), "session present on a refused connection")


# --- CONNECT ------------------------------------------------------------------------------------


def test_connect_reserved_flag() -> None:
    refused(frame(0x10, connect_body(0x03)), "reserved connect flag")


@pytest.mark.parametrize("flags", [0x0A, 0x12, 0x22])
def test_will_qos_or_retain_without_the_will_flag(flags: int) -> None:
    refused(frame(0x10, connect_body(flags)), "without the will flag")


def test_will_qos_3() -> None:
    refused(frame(0x10, connect_body(0x1E, s("w"), s("m"))), "will QoS 3")


def test_password_without_user_name_in_3_1_1() -> None:
    refused(frame(0x10, connect_body(0x42, s("pw"))), "password without a user name")


def test_user_name_flag_without_the_field_in_3_1_1() -> None:
    refused(frame(0x10, connect_body(0x82)), "ends inside its user name length")


@pytest.mark.parametrize(("name", "level"), [("MQTT", 5), ("MQTT", 3), ("MQIsdp", 4), ("MQTT", 0x84)])
def test_unacceptable_protocol_level(name: str, level: int) -> None:
    error = refused(frame(0x10, connect_body(0x02, name=name, level=level)), "is not MQTT 3.1 or 3.1.1")
    assert isinstance(error, UnacceptableProtocol)
    assert error.return_code == CONNACK_UNACCEPTABLE_VERSION


def test_unknown_protocol_name_is_closed_without_connack() -> None:
    error = refused(frame(0x10, connect_body(0x02, name="HTTP", level=4)), "protocol name 'HTTP' is not MQTT")
    assert not isinstance(error, UnacceptableProtocol)


# --- the decoder after an error -----------------------------------------------------------------


def test_the_decoder_refuses_everything_after_an_error() -> None:
    decoder = Decoder()
    refused(b"\x36", "QoS 3", decoder)
    refused(encode(Publish("a", b"")), "input after a protocol error", decoder)


def test_the_error_carries_the_packets_before_it_in_the_same_read() -> None:
    """What a client's packets do must not depend on how TCP cut them into reads."""
    decoder = Decoder()
    good = [Publish("a", b"1"), PubRel(3)]
    error = refused(b"".join(map(encode, good)) + b"\x36", "QoS 3", decoder)
    assert error.packets == good
    assert refused(b"\x36", "QoS 3").packets == []


def test_reason_is_kept() -> None:
    assert refused(b"\x36", "QoS 3").reason == "PUBLISH with QoS 3"


# --- MQTT 3.1: what its specification allows that 3.1.1 forbids ---------------------------------


def test_3_1_accepts_dup_on_qos_0() -> None:
    assert after_31_connect().feed(frame(0x38, s("a"))) == [Publish("a", b"", dup=True)]


@pytest.mark.parametrize(
    ("data", "packet"),
    [
        (frame(0x6A, b"\x00\x05"), PubRel(5)),
        (frame(0x8A, b"\x00\x05" + s("a") + b"\x01"), Subscribe(5, (("a", 1),))),
        (frame(0xAA, b"\x00\x05" + s("a")), Unsubscribe(5, ("a",))),
    ],
)
def test_3_1_accepts_the_dup_flag_of_a_retry(data: bytes, packet: Packet) -> None:
    assert after_31_connect().feed(data) == [packet]


def test_3_1_accepts_a_password_without_user_name() -> None:
    data = frame(0x10, connect_body(0x42, s("pw"), name="MQIsdp", level=3))
    assert Decoder().feed(data) == [Connect("MQIsdp", 3, "client", True, 60, password=b"pw")]


def test_3_1_ignores_the_reserved_flag_and_will_flags_without_a_will() -> None:
    data = frame(0x10, connect_body(0x2B, name="MQIsdp", level=3))
    assert Decoder().feed(data) == [Connect("MQIsdp", 3, "client", True, 60)]


def test_3_1_treats_a_flagged_but_missing_user_name_and_password_as_absent() -> None:
    data = frame(0x10, connect_body(0xC2, name="MQIsdp", level=3))
    assert Decoder().feed(data) == [Connect("MQIsdp", 3, "client", True, 60)]


def test_3_1_password_is_binary() -> None:
    data = frame(0x10, connect_body(0xC2, s("u"), s(b"\xff\x00"), name="MQIsdp", level=3))
    assert Decoder().feed(data) == [
        Connect("MQIsdp", 3, "client", True, 60, username="u", password=b"\xff\x00")
    ]
