"""The MQTT 5.0 statements a single packet's bytes must keep, one test each, named after the
statement's id ([MQTT-x.y.z-n]) or, for a rule the specification states without one, its
section: raw bytes in, MqttProtocolError out with the reason code the receiver answers with
(0x81 Malformed Packet, 0x82 Protocol Error, or the code the specification names)."""

from __future__ import annotations

import pytest

from broker.protocol.mqtt import (
    MQTT_5,
    Connect,
    Decoder,
    MqttProtocolError,
    Packet,
    Properties,
    Publish,
    ReasonCode,
    UnacceptableProtocol,
)
from broker.protocol.mqtt.wire import varint

MALFORMED = ReasonCode.MALFORMED_PACKET
PROTOCOL = ReasonCode.PROTOCOL_ERROR


def s(text: str | bytes) -> bytes:
    """A length-prefixed string or binary field."""
    raw = text.encode() if isinstance(text, str) else text
    return len(raw).to_bytes(2, "big") + raw


def frame(first: int, body: bytes) -> bytes:
    return bytes((first,)) + varint(len(body)) + body


def p(identifier: int, value: bytes) -> bytes:
    """One property."""
    return bytes((identifier,)) + value


def block(*properties: bytes) -> bytes:
    body = b"".join(properties)
    return varint(len(body)) + body


def connect(flags: int = 0x02, properties: bytes = b"\x00", *payload: bytes, level: int = 5) -> bytes:
    return frame(
        0x10, s("MQTT") + bytes((level, flags)) + b"\x00\x3c" + properties + s("client") + b"".join(payload)
    )


def publish(
    topic: bytes = s("t"), properties: bytes = b"\x00", first: int = 0x30, payload: bytes = b""
) -> bytes:
    packet_id = b"\x00\x01" if first & 0b0110 else b""
    return frame(first, topic + packet_id + properties + payload)


def subscribe(*pairs: tuple[str | bytes, int], properties: bytes = b"\x00") -> bytes:
    return frame(
        0x82, b"\x00\x01" + properties + b"".join(s(text) + bytes((options,)) for text, options in pairs)
    )


def refused(data: bytes, code: int, match: str = "") -> MqttProtocolError:
    with pytest.raises(MqttProtocolError, match=match) as caught:
        Decoder(protocol_level=MQTT_5).feed(data)
    assert caught.value.reason_code == code, caught.value.reason
    return caught.value


def accepted(data: bytes) -> Packet:
    (packet,) = Decoder(protocol_level=MQTT_5).feed(data)
    return packet


# --- 1.5 Data representation --------------------------------------------------------------------

BAD_UTF8 = b"\xed\xa0\x80"  # an encoded surrogate


@pytest.mark.parametrize(
    "data",
    [
        publish(topic=s(BAD_UTF8)),
        publish(properties=block(p(0x03, s(BAD_UTF8)))),  # Content Type
        frame(0x40, b"\x00\x01\x00" + block(p(0x1F, s(b"\xc0\xaf")))),  # Reason String, overlong "/"
        frame(0x10, s("MQTT") + b"\x05\x02\x00\x3c\x00" + s(b"\xff")),  # the client identifier
    ],
    ids=["topic name", "content type", "reason string", "client identifier"],
)
def test_mqtt_1_5_4_1_ill_formed_utf8_is_malformed(data: bytes) -> None:
    refused(data, MALFORMED, "not valid UTF-8")


@pytest.mark.parametrize(
    "data",
    [
        publish(topic=s("a\x00")),
        publish(properties=block(p(0x08, s("re\x00ply")))),  # Response Topic
        subscribe(("a/\x00", 0)),
    ],
    ids=["topic name", "response topic", "topic filter"],
)
def test_mqtt_1_5_4_2_u0000_is_malformed(data: bytes) -> None:
    refused(data, MALFORMED, "contains U\\+0000")


def test_mqtt_1_5_4_3_a_byte_order_mark_is_kept() -> None:
    packet = accepted(publish(topic=s("\ufefft")))
    assert isinstance(packet, Publish)
    assert packet.topic == "\ufefft"


@pytest.mark.parametrize(
    "pair", [s(BAD_UTF8) + s("v"), s("n") + s(b"\xff"), s("n") + s("v\x00")], ids=["name", "value", "u0000"]
)
def test_mqtt_1_5_7_1_both_strings_of_a_user_property_are_utf8(pair: bytes) -> None:
    refused(publish(properties=block(p(0x26, pair))), MALFORMED, "User Property")


def test_mqtt_1_5_5_a_variable_byte_integer_of_five_bytes_is_malformed() -> None:
    refused(publish(properties=b"\x80\x80\x80\x80\x01"), MALFORMED, "property length longer than four bytes")
    refused(publish(properties=block(p(0x0B, b"\x80\x80\x80\x80\x01"))), MALFORMED, "longer than four bytes")


# --- 2.1 Fixed header ---------------------------------------------------------------------------


@pytest.mark.parametrize("first", [0x11, 0x21, 0x41, 0x52, 0x74, 0x92, 0xB8, 0xC1, 0xD2])
def test_mqtt_2_1_3_1_reserved_flags_are_malformed(first: int) -> None:
    refused(bytes((first,)), MALFORMED, f"flags {first & 0xF:04b} on packet type {first >> 4}")


@pytest.mark.parametrize("first", [0x60, 0x63, 0x6A])
def test_mqtt_3_6_1_1_pubrel_flags_are_0010(first: int) -> None:
    refused(bytes((first,)), MALFORMED, "on packet type 6")


@pytest.mark.parametrize("first", [0x80, 0x8A])
def test_mqtt_3_8_1_1_subscribe_flags_are_0010(first: int) -> None:
    refused(bytes((first,)), MALFORMED, "on packet type 8")


@pytest.mark.parametrize("first", [0xA0, 0xAA])
def test_mqtt_3_10_1_1_unsubscribe_flags_are_0010(first: int) -> None:
    refused(bytes((first,)), MALFORMED, "on packet type 10")


def test_mqtt_3_14_1_1_disconnect_flags_are_zero() -> None:
    refused(b"\xe1\x00", MALFORMED, "on packet type 14")


def test_mqtt_3_15_1_1_auth_flags_are_zero() -> None:
    refused(b"\xf1\x00", MALFORMED, "on packet type 15")


def test_mqtt_2_1_2_packet_type_0_is_reserved() -> None:
    refused(b"\x00\x00", MALFORMED, "reserved packet type 0")


def test_mqtt_3_3_1_2_dup_on_qos_0_is_malformed() -> None:
    refused(b"\x38", MALFORMED, "DUP set on a QoS 0 PUBLISH")


def test_mqtt_3_3_1_4_qos_3_is_malformed() -> None:
    refused(b"\x36", MALFORMED, "QoS 3")


# --- 2.2 Packet identifier and properties -------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        frame(0x32, s("t") + b"\x00\x00\x00"),
        frame(0x40, b"\x00\x00"),
        frame(0x50, b"\x00\x00\x10\x00"),
        frame(0x82, b"\x00\x00\x00" + s("a") + b"\x00"),
        frame(0xA2, b"\x00\x00\x00" + s("a")),
        frame(0x90, b"\x00\x00\x00\x00"),
    ],
    ids=["PUBLISH", "PUBACK", "PUBREC", "SUBSCRIBE", "UNSUBSCRIBE", "SUBACK"],
)
def test_mqtt_2_2_1_3_packet_identifier_zero_is_a_protocol_error(data: bytes) -> None:
    refused(data, PROTOCOL, "packet identifier 0")


def test_mqtt_2_2_2_1_the_property_length_is_never_left_out() -> None:
    """[MQTT-2.2.2-1] No property is a Property Length of 0; a CONNACK has no shorter form."""
    refused(frame(0x20, b"\x00\x00"), MALFORMED, "ends before its property length")


@pytest.mark.parametrize(
    "data",
    [
        publish(properties=block(p(0x23, b"\x00\x01"), p(0x23, b"\x00\x02"))),
        publish(properties=block(p(0x02, b"\x00\x00\x00\x01"), p(0x02, b"\x00\x00\x00\x01"))),
        connect(0x02, block(p(0x11, b"\x00\x00\x00\x01"), p(0x11, b"\x00\x00\x00\x02"))),
        connect(0x06, b"\x00", block(p(0x18, bytes(4)), p(0x18, bytes(4))), s("w"), s("m")),
        frame(0x40, b"\x00\x01\x00" + block(p(0x1F, s("a")), p(0x1F, s("b")))),
        subscribe(("a", 0), properties=block(p(0x0B, b"\x01"), p(0x0B, b"\x02"))),
        frame(0xF0, b"\x18" + block(p(0x15, s("m")), p(0x15, s("m")))),
    ],
    ids=[
        "topic alias",
        "message expiry",
        "session expiry",
        "will delay",
        "reason string",
        "subscription id",
        "method",
    ],
)
def test_mqtt_2_2_2_2_property_given_twice_is_a_protocol_error(data: bytes) -> None:
    refused(data, PROTOCOL, "more than once")


def test_mqtt_2_2_2_2_user_property_and_a_publish_s_subscription_identifier_may_repeat() -> None:
    pairs = p(0x26, s("k") + s("1")) + p(0x26, s("k") + s("2"))
    packet = accepted(publish(properties=block(pairs, p(0x0B, b"\x01"), p(0x0B, b"\x07"))))
    assert isinstance(packet, Publish)
    assert packet.properties == Properties(
        user_properties=(("k", "1"), ("k", "2")), subscription_identifiers=(1, 7)
    )


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (
            publish(properties=block(p(0x11, bytes(4)))),
            "Session Expiry Interval is not a property of PUBLISH",
        ),
        (publish(properties=block(p(0x1F, s("r")))), "Reason String is not a property of PUBLISH"),
        (connect(0x02, block(p(0x23, b"\x00\x01"))), "Topic Alias is not a property of CONNECT"),
        (connect(0x02, block(p(0x18, bytes(4)))), "Will Delay Interval is not a property of CONNECT"),
        (
            connect(0x06, b"\x00", block(p(0x11, bytes(4))), s("w"), s("m")),
            "Session Expiry Interval is not a property of a will",
        ),
        (
            frame(0x20, b"\x00\x00" + block(p(0x17, b"\x01"))),
            "Request Problem Information is not a property of CONNACK",
        ),
        (
            frame(0xA2, b"\x00\x01" + block(p(0x0B, b"\x01")) + s("a")),
            "Subscription Identifier is not a property of UNSUBSCRIBE",
        ),
        (frame(0xE0, b"\x00" + block(p(0x23, b"\x00\x01"))), "Topic Alias is not a property of DISCONNECT"),
        (
            frame(0xF0, b"\x18" + block(p(0x15, s("m")), p(0x1C, s("s")))),
            "Server Reference is not a property of AUTH",
        ),
    ],
)
def test_mqtt_2_2_2_2_a_property_the_packet_cannot_carry_is_malformed(data: bytes, match: str) -> None:
    refused(data, MALFORMED, match)


@pytest.mark.parametrize("identifier", [0x00, 0x04, 0x2B, 0x7F, 0x80])
def test_mqtt_2_2_2_2_an_unknown_property_identifier_is_malformed(identifier: int) -> None:
    refused(publish(properties=block(bytes((identifier, 0, 0)))), MALFORMED, "unknown property identifier")


@pytest.mark.parametrize(
    ("properties", "match"),
    [
        (block(p(0x02, b"\x00\x00")), "ends inside its Message Expiry Interval"),
        (block(p(0x03, b"\x00\x05ab")), "ends inside its Content Type"),
        (block(p(0x26, s("name"))), "ends inside its User Property value length"),
        (block(b"\x01"), "ends before its Payload Format Indicator"),
        (b"\x09\x01\x00", "ends inside its properties"),
    ],
)
def test_mqtt_2_2_2_2_a_value_cut_short_is_malformed(properties: bytes, match: str) -> None:
    """A value must fit its property block, and the block its packet."""
    refused(frame(0x30, s("t") + properties), MALFORMED, match)


# --- 3.1 CONNECT --------------------------------------------------------------------------------


def test_mqtt_3_1_2_1_another_protocol_name_is_closed_without_answer() -> None:
    error = refused(
        frame(0x10, s("HTTP") + b"\x05\x02\x00\x3c\x00" + s("c")),
        MALFORMED,
        "protocol name 'HTTP' is not MQTT",
    )
    assert not isinstance(error, UnacceptableProtocol)


@pytest.mark.parametrize(("name", "level"), [("MQTT", 6), ("MQTT", 0), ("MQIsdp", 5)])
def test_mqtt_3_1_2_2_an_unsupported_protocol_version_is_answered_0x84(name: str, level: int) -> None:
    data = frame(0x10, s(name) + bytes((level, 0x02)) + b"\x00\x3c\x00" + s("c"))
    error = refused(data, ReasonCode.UNSUPPORTED_PROTOCOL_VERSION, "is not MQTT 3.1, 3.1.1 or 5.0")
    assert isinstance(error, UnacceptableProtocol)


def test_mqtt_3_1_2_3_the_reserved_connect_flag_is_malformed() -> None:
    refused(connect(0x03), MALFORMED, "reserved connect flag set")


def test_mqtt_3_1_2_9_a_will_flag_needs_will_properties_topic_and_payload() -> None:
    refused(connect(0x06, b"\x00", b"\x00"), MALFORMED, "will topic")


@pytest.mark.parametrize("flags", [0x0A, 0x12])
def test_mqtt_3_1_2_11_will_qos_without_a_will_is_malformed(flags: int) -> None:
    refused(connect(flags), MALFORMED, "without the will flag")


def test_mqtt_3_1_2_12_will_qos_3_is_malformed() -> None:
    refused(connect(0x1E, b"\x00", b"\x00", s("w"), s("m")), MALFORMED, "will QoS 3")


def test_mqtt_3_1_2_13_will_retain_without_a_will_is_malformed() -> None:
    refused(connect(0x22), MALFORMED, "without the will flag")


def test_mqtt_3_1_2_17_a_user_name_flag_needs_a_user_name() -> None:
    refused(connect(0x82), MALFORMED, "user name")


def test_mqtt_3_1_2_19_a_password_flag_needs_a_password() -> None:
    refused(connect(0xC2, b"\x00", s("u")), MALFORMED, "password")


def test_mqtt_3_1_2_9_a_password_without_a_user_name_is_allowed() -> None:
    """5.0 section 3.1.2.9 drops 3.1.1's [MQTT-3.1.2-22]."""
    assert accepted(connect(0x42, b"\x00", s("pw"))) == Connect(
        "MQTT", MQTT_5, "client", True, 60, password=b"pw"
    )


@pytest.mark.parametrize(
    ("prop", "match"),
    [
        (p(0x21, b"\x00\x00"), "Receive Maximum of 0"),  # 3.1.2.11.3
        (p(0x27, bytes(4)), "Maximum Packet Size of 0"),  # 3.1.2.11.4
        (p(0x19, b"\x02"), "Request Response Information of 2"),  # 3.1.2.11.6
        (p(0x17, b"\x02"), "Request Problem Information of 2"),  # 3.1.2.11.7
    ],
)
def test_mqtt_3_1_2_11_connect_property_values(prop: bytes, match: str) -> None:
    refused(connect(0x02, block(prop)), PROTOCOL, match)


def test_mqtt_3_1_2_11_10_authentication_data_without_a_method() -> None:
    refused(connect(0x02, block(p(0x16, s(b"\x01")))), PROTOCOL, "authentication data without a method")


def test_mqtt_3_1_3_4_the_client_identifier_is_utf8() -> None:
    refused(
        frame(0x10, s("MQTT") + b"\x05\x02\x00\x3c\x00" + s(b"\xc3\x28")),
        MALFORMED,
        "client identifier is not valid UTF-8",
    )


def test_mqtt_3_1_3_11_the_will_topic_is_utf8() -> None:
    refused(connect(0x06, b"\x00", b"\x00", s(BAD_UTF8), s("m")), MALFORMED, "will topic is not valid UTF-8")


def test_mqtt_3_1_3_12_the_user_name_is_utf8() -> None:
    refused(connect(0x82, b"\x00", s(b"\xfe")), MALFORMED, "user name is not valid UTF-8")


def test_mqtt_3_1_3_a_wildcard_in_the_will_topic_is_topic_name_invalid() -> None:
    refused(connect(0x06, b"\x00", b"\x00", s("w/#"), s("m")), ReasonCode.TOPIC_NAME_INVALID, "wildcard")


def test_mqtt_3_1_3_2_will_properties_keep_the_publish_rules() -> None:
    """Section 3.1.3.2.5: a will's Response Topic is a topic name [MQTT-3.3.2-14]."""
    refused(connect(0x06, b"\x00", block(p(0x08, s("r/+"))), s("w"), s("m")), PROTOCOL, "Response Topic")


def test_mqtt_3_1_4_1_bytes_after_the_connect_are_malformed() -> None:
    refused(connect(0x02, b"\x00", b"\x00"), MALFORMED, "1 bytes after the end of a CONNECT")


# --- 3.2 CONNACK --------------------------------------------------------------------------------


def test_mqtt_3_2_2_1_reserved_acknowledge_flags_are_malformed() -> None:
    refused(frame(0x20, b"\x02\x00\x00"), MALFORMED, "reserved CONNACK flags")


def test_mqtt_3_2_2_6_session_present_on_a_refusal_is_a_protocol_error() -> None:
    refused(frame(0x20, b"\x01\x87\x00"), PROTOCOL, "session present on a refused connection")


@pytest.mark.parametrize("code", [0x01, 0x04, 0x10, 0x8B, 0x8E, 0x92, 0xA2, 0xFF])
def test_mqtt_3_2_2_8_a_code_connack_does_not_carry_is_a_protocol_error(code: int) -> None:
    refused(frame(0x20, bytes((0, code, 0))), PROTOCOL, f"reason code {code:#04x} not allowed in CONNACK")


@pytest.mark.parametrize(
    ("prop", "match"),
    [
        (p(0x21, b"\x00\x00"), "Receive Maximum of 0"),  # 3.2.2.3.3
        (p(0x24, b"\x02"), "Maximum QoS of 2"),  # 3.2.2.3.4
        (p(0x25, b"\x02"), "Retain Available of 2"),  # 3.2.2.3.5
        (p(0x27, bytes(4)), "Maximum Packet Size of 0"),  # 3.2.2.3.6
        (p(0x28, b"\x03"), "Wildcard Subscription Available of 3"),  # 3.2.2.3.11
        (p(0x29, b"\x02"), "Subscription Identifier Available of 2"),  # 3.2.2.3.12
        (p(0x2A, b"\xff"), "Shared Subscription Available of 255"),  # 3.2.2.3.13
    ],
)
def test_mqtt_3_2_2_3_connack_property_values(prop: bytes, match: str) -> None:
    refused(frame(0x20, b"\x00\x00" + block(prop)), PROTOCOL, match)


def test_mqtt_3_2_2_15_a_packet_over_the_maximum_packet_size_is_packet_too_large() -> None:
    """[MQTT-3.2.2-15] The Client MUST NOT send packets over the server's Maximum Packet Size,
    the whole packet counted; one that comes is answered DISCONNECT 0x95."""
    with pytest.raises(MqttProtocolError) as caught:
        Decoder(20, protocol_level=MQTT_5).feed(publish(payload=bytes(15)))  # 2 + 4 + 15 bytes
    assert caught.value.reason_code == ReasonCode.PACKET_TOO_LARGE


# --- 3.3 PUBLISH --------------------------------------------------------------------------------


def test_mqtt_3_3_2_1_the_topic_name_is_utf8() -> None:
    refused(publish(topic=s(b"a\xff")), MALFORMED, "topic name is not valid UTF-8")


@pytest.mark.parametrize("topic", ["a/+", "#", "a/b#"])
def test_mqtt_3_3_2_2_a_wildcard_in_the_topic_name_is_topic_name_invalid(topic: str) -> None:
    refused(publish(topic=s(topic)), ReasonCode.TOPIC_NAME_INVALID, "wildcard in topic name")


def test_mqtt_3_3_2_1_an_empty_topic_name_without_a_topic_alias_is_a_protocol_error() -> None:
    refused(publish(topic=s("")), PROTOCOL, "empty topic name without a topic alias")


def test_mqtt_3_3_2_1_an_empty_topic_name_with_a_topic_alias_is_read() -> None:
    packet = accepted(publish(topic=s(""), properties=block(p(0x23, b"\x00\x05"))))
    assert packet == Publish("", b"", properties=Properties(topic_alias=5))


def test_mqtt_3_3_2_8_a_topic_alias_of_0_is_topic_alias_invalid() -> None:
    refused(
        publish(properties=block(p(0x23, b"\x00\x00"))), ReasonCode.TOPIC_ALIAS_INVALID, "Topic Alias of 0"
    )


@pytest.mark.parametrize("topic", ["r/+", "r/#", ""])
def test_mqtt_3_3_2_14_the_response_topic_is_a_topic_name(topic: str) -> None:
    refused(publish(properties=block(p(0x08, s(topic)))), PROTOCOL, "Response Topic")


def test_mqtt_3_3_2_3_2_a_payload_format_indicator_other_than_0_or_1() -> None:
    refused(publish(properties=block(p(0x01, b"\x02"))), PROTOCOL, "Payload Format Indicator of 2")


def test_mqtt_3_3_2_3_8_a_subscription_identifier_of_0() -> None:
    refused(publish(properties=block(p(0x0B, b"\x00"))), PROTOCOL, "Subscription Identifier of 0")


# --- 3.4 to 3.7 PUBACK, PUBREC, PUBREL, PUBCOMP -------------------------------------------------


@pytest.mark.parametrize(
    ("first", "code", "name"),
    [(0x40, 0x92, "PUBACK"), (0x50, 0x04, "PUBREC"), (0x62, 0x10, "PUBREL"), (0x70, 0x80, "PUBCOMP")],
    ids=["MQTT-3.4.2-1", "MQTT-3.5.2-1", "MQTT-3.6.2-1", "MQTT-3.7.2-1"],
)
def test_mqtt_3_4_2_1_to_3_7_2_1_each_acknowledgement_carries_its_own_codes(
    first: int, code: int, name: str
) -> None:
    refused(frame(first, bytes((0, 1, code))), PROTOCOL, f"reason code {code:#04x} not allowed in {name}")


def test_mqtt_3_4_2_1_bytes_after_an_acknowledgement_s_properties_are_malformed() -> None:
    refused(frame(0x40, b"\x00\x01\x00\x00\x00"), MALFORMED, "1 bytes after the end of a PUBACK")


# --- 3.8 SUBSCRIBE ------------------------------------------------------------------------------


def test_mqtt_3_8_3_1_the_topic_filter_is_utf8() -> None:
    refused(subscribe((BAD_UTF8, 0)), MALFORMED, "topic filter is not valid UTF-8")


def test_mqtt_3_8_3_2_a_subscribe_without_a_filter_is_a_protocol_error() -> None:
    refused(subscribe(), PROTOCOL, "SUBSCRIBE without a topic filter")


def test_mqtt_3_8_3_4_no_local_on_a_shared_subscription_is_a_protocol_error() -> None:
    refused(subscribe(("$share/g/a/#", 0b0100)), PROTOCOL, "No Local on shared subscription")


@pytest.mark.parametrize("options", [0x40, 0x80, 0xC1])
def test_mqtt_3_8_3_5_reserved_subscription_option_bits_are_malformed(options: int) -> None:
    refused(subscribe(("a", options)), MALFORMED, "reserved subscription options bits")


@pytest.mark.parametrize("options", [0x03, 0x30], ids=["QoS 3", "retain handling 3"])
def test_mqtt_3_8_3_1_a_qos_or_retain_handling_of_3_is_a_protocol_error(options: int) -> None:
    refused(subscribe(("a", options)), PROTOCOL, "QoS or Retain Handling 3")


def test_mqtt_3_8_3_1_the_options_byte_is_there() -> None:
    refused(frame(0x82, b"\x00\x01\x00" + s("a")), MALFORMED, "ends before its subscription options")


def test_mqtt_3_8_2_1_2_one_subscription_identifier_not_0() -> None:
    refused(subscribe(("a", 0), properties=block(p(0x0B, b"\x00"))), PROTOCOL, "Subscription Identifier of 0")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("a/#/b", "'#' not alone"),  # [MQTT-4.7.1-1]
        ("a+/b", "'\\+' not a whole level"),  # [MQTT-4.7.1-2]
        ("", "empty topic filter"),  # [MQTT-4.7.3-1]
        ("$share//a", "is not \\$share/\\{ShareName\\}/\\{filter\\}"),  # [MQTT-4.8.2-1]
        ("$share/g+/a", "'\\+' not a whole level"),  # [MQTT-4.8.2-2]
        ("$share/+/a", "is not \\$share"),  # [MQTT-4.8.2-2]
        ("$share/g", "is not \\$share"),  # [MQTT-4.8.2-2]
        ("$share/g/", "is not \\$share"),  # [MQTT-4.8.2-2]
    ],
    ids=[
        "MQTT-4.7.1-1",
        "MQTT-4.7.1-2",
        "MQTT-4.7.3-1",
        "MQTT-4.8.2-1",
        "MQTT-4.8.2-2 plus",
        "MQTT-4.8.2-2 wildcard",
        "MQTT-4.8.2-2 alone",
        "MQTT-4.8.2-2 empty",
    ],
)
def test_mqtt_4_7_and_4_8_2_an_invalid_filter_is_topic_filter_invalid(text: str, match: str) -> None:
    refused(subscribe((text, 0)), ReasonCode.TOPIC_FILTER_INVALID, match)
    refused(frame(0xA2, b"\x00\x01\x00" + s(text)), ReasonCode.TOPIC_FILTER_INVALID, match)


# --- 3.9 to 3.11 SUBACK, UNSUBSCRIBE, UNSUBACK --------------------------------------------------


@pytest.mark.parametrize("code", [0x03, 0x11, 0x92])
def test_mqtt_3_9_3_2_a_code_suback_does_not_carry_is_a_protocol_error(code: int) -> None:
    refused(frame(0x90, b"\x00\x01\x00\x01" + bytes((code,))), PROTOCOL, "not allowed in SUBACK")


def test_mqtt_3_9_3_2_a_suback_without_a_reason_code_is_malformed() -> None:
    refused(frame(0x90, b"\x00\x01\x00"), MALFORMED, "SUBACK without a reason code")


def test_mqtt_3_10_3_1_the_topic_filter_is_utf8() -> None:
    refused(frame(0xA2, b"\x00\x01\x00" + s(BAD_UTF8)), MALFORMED, "topic filter is not valid UTF-8")


def test_mqtt_3_10_3_2_an_unsubscribe_without_a_filter_is_a_protocol_error() -> None:
    refused(frame(0xA2, b"\x00\x01\x00"), PROTOCOL, "UNSUBSCRIBE without a topic filter")


def test_mqtt_3_11_3_2_a_code_unsuback_does_not_carry_is_a_protocol_error() -> None:
    refused(frame(0xB0, b"\x00\x01\x00\x92"), PROTOCOL, "not allowed in UNSUBACK")


def test_mqtt_3_11_3_1_an_unsuback_holds_a_reason_code_for_each_filter() -> None:
    """A 3.1.1-sized UNSUBACK (the identifier alone) is not one of 5.0."""
    refused(frame(0xB0, b"\x00\x01"), MALFORMED, "ends before its property length")
    refused(frame(0xB0, b"\x00\x01\x00"), MALFORMED, "UNSUBACK without a reason code")


# --- 3.14 DISCONNECT, 3.15 AUTH -----------------------------------------------------------------


@pytest.mark.parametrize("code", [0x01, 0x10, 0x84, 0x92])
def test_mqtt_3_14_2_1_a_code_disconnect_does_not_carry_is_a_protocol_error(code: int) -> None:
    refused(frame(0xE0, bytes((code,))), PROTOCOL, "not allowed in DISCONNECT")


@pytest.mark.parametrize("code", [0x01, 0x80, 0x87])
def test_mqtt_3_15_2_1_a_code_auth_does_not_carry_is_a_protocol_error(code: int) -> None:
    refused(frame(0xF0, bytes((code,)) + block(p(0x15, s("m")))), PROTOCOL, "not allowed in AUTH")


@pytest.mark.parametrize("body", [b"", b"\x18", b"\x18\x00"], ids=["empty", "code alone", "no properties"])
def test_mqtt_3_15_2_2_2_an_auth_names_its_authentication_method(body: bytes) -> None:
    refused(frame(0xF0, body), PROTOCOL, "AUTH without an authentication method")
