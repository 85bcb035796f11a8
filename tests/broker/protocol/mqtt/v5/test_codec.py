"""Tests for the MQTT 5.0 side of broker.protocol.mqtt.codec (bodies in
broker.protocol.mqtt.v5.codec): golden bytes for each packet's short and long forms, every
packet type round-tripping with arbitrary properties whatever the reads, how a server decoder
learns level 5, the Maximum Packet Size of the whole packet, and what encode refuses."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.protocol.mqtt import (
    MQTT_5,
    MQTT_311,
    NO_PROPERTIES,
    Auth,
    ConnAck,
    Connect,
    Decoder,
    Disconnect,
    MqttProtocolError,
    Packet,
    PingReq,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
    SubAck,
    Subscribe,
    SubscriptionOptions,
    UnacceptableProtocol,
    UnsubAck,
    Unsubscribe,
    Will,
    encode,
)
from tests.broker.protocol.mqtt.v5.packet_strategies import ANY_PACKET, PACKETS


def decode5(data: bytes) -> Packet:
    packets = Decoder(protocol_level=MQTT_5).feed(data)
    assert len(packets) == 1, packets
    return packets[0]


def both_ways(packet: Packet, wire: str) -> None:
    assert encode(packet, MQTT_5).hex() == wire
    assert decode5(bytes.fromhex(wire)) == packet


# --- golden bytes -------------------------------------------------------------------------------


def test_connect_variable_header_example_of_5_0() -> None:
    """5.0 section 3.1.2.12: "MQTT", version 5, flags 0xCE, keepalive 10, then properties of
    length 5: Session Expiry Interval (17) of 10."""
    packet = Connect(
        "MQTT",
        MQTT_5,
        "c",
        True,
        10,
        Will("w", b"m", 1, False),
        "u",
        b"p",
        Properties(session_expiry_interval=10),
    )
    wire = encode(packet)  # a CONNECT is written at the level it names
    assert wire[2:18].hex() == "00044d51545405ce000a05110000000a"
    assert Decoder(accept_mqtt5=True).feed(wire) == [packet]


def test_connect_with_will_properties_and_a_password_alone() -> None:
    will = Will("w", b"bye", 2, True, Properties(will_delay_interval=30, content_type="text/plain"))
    packet = Connect("MQTT", MQTT_5, "id", False, 60, will, None, b"secret")
    wire = encode(packet)
    assert wire[9] == 0x40 | 0x20 | 0x10 | 0x04  # password, will retain, will QoS 2, will; no user name
    assert decode5(wire) == packet


@pytest.mark.parametrize(
    ("packet", "wire"),
    [
        (ConnAck(False, ReasonCode.SUCCESS), "2003000000"),
        (ConnAck(True, ReasonCode.SUCCESS, Properties(maximum_qos=1)), "200501000224" + "01"),
        (ConnAck(False, ReasonCode.BAD_USER_NAME_OR_PASSWORD), "2003008600"),
        (PubAck(1), "40020001"),
        (PubAck(1, ReasonCode.NO_MATCHING_SUBSCRIBERS), "4003000110"),
        (PubAck(1, ReasonCode.SUCCESS, Properties(reason_string="x")), "4008000100041f000178"),
        (PubRec(2, ReasonCode.QUOTA_EXCEEDED), "5003000297"),
        (PubRel(3, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND), "6203000392"),
        (PubComp(4), "70020004"),
        (Publish("t", b"x"), "30050001740078"),
        (Publish("", b"", properties=Properties(topic_alias=1)), "3006000003230001"),
        (
            Publish("t", b"", qos=1, packet_id=5, properties=Properties(subscription_identifiers=(1, 300))),
            "320b000174000505" + "0b010bac02",
        ),
        (
            Subscribe(
                10,
                (
                    (
                        "a/b",
                        SubscriptionOptions.of(1, no_local=True, retain_as_published=True, retain_handling=2),
                    ),
                ),
            ),
            "8209000a000003612f622d",
        ),
        (SubAck(10, (ReasonCode.GRANTED_QOS_1, ReasonCode.NOT_AUTHORIZED)), "9005000a000187"),
        (Unsubscribe(10, ("a/b",)), "a208000a000003612f62"),
        (UnsubAck(10, (ReasonCode.NO_SUBSCRIPTION_EXISTED,)), "b004000a0011"),
        (Disconnect(), "e000"),
        (Disconnect(ReasonCode.SESSION_TAKEN_OVER), "e0018e"),
        (
            Disconnect(ReasonCode.SERVER_SHUTTING_DOWN, Properties(reason_string="bye")),
            "e0088b061f0003627965",
        ),
        (
            Auth(ReasonCode.CONTINUE_AUTHENTICATION, Properties(authentication_method="X")),
            "f0061804150001" + "58",
        ),
        (PingReq(), "c000"),
    ],
)
def test_golden_bytes(packet: Packet, wire: str) -> None:
    both_ways(packet, wire)


def test_a_disconnect_of_one_byte_has_no_properties() -> None:
    """Sections 3.14.2.1-2: a Remaining Length under 2 means a Property Length of 0."""
    assert decode5(bytes.fromhex("e00104")) == Disconnect(ReasonCode.DISCONNECT_WITH_WILL_MESSAGE)


def test_decoded_codes_and_options_are_typed() -> None:
    suback = decode5(bytes.fromhex("9005000a000187"))
    assert isinstance(suback, SubAck)
    assert suback.return_codes == (ReasonCode.GRANTED_QOS_1, ReasonCode.NOT_AUTHORIZED)
    assert all(isinstance(code, ReasonCode) for code in suback.return_codes)
    subscribe = decode5(bytes.fromhex("8209000a000003612f622d"))
    assert isinstance(subscribe, Subscribe)
    options = subscribe.topics[0][1]
    assert isinstance(options, SubscriptionOptions)
    assert (options.qos, options.no_local, options.retain_as_published, options.retain_handling) == (
        1,
        True,
        True,
        2,
    )


def test_a_packet_without_properties_shares_no_properties() -> None:
    publish = decode5(bytes.fromhex("30050001740078"))
    assert isinstance(publish, Publish)
    assert publish.properties is NO_PROPERTIES


# --- every packet, any properties, any reads ----------------------------------------------------


@pytest.mark.parametrize("kind", PACKETS, ids=lambda kind: kind.__name__)
@given(data=st.data())
def test_every_packet_type_round_trips(kind: type, data: st.DataObject) -> None:
    packet = data.draw(PACKETS[kind])
    assert decode5(encode(packet, MQTT_5)) == packet


@given(st.lists(ANY_PACKET, max_size=6), st.data())
def test_any_split_into_reads_gives_the_same_packets(packets: list[Packet], data: st.DataObject) -> None:
    wire = b"".join(encode(packet, MQTT_5) for packet in packets)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=10)))
    decoder = Decoder(protocol_level=MQTT_5)
    out: list[Packet] = []
    for start, end in zip([0, *cuts], [*cuts, len(wire)], strict=True):
        out += decoder.feed(wire[start:end])
    assert out == packets


# --- the level of a connection ------------------------------------------------------------------

CONNECT5 = Connect("MQTT", MQTT_5, "id", True, 30, properties=Properties(receive_maximum=10))
PUBLISH5 = Publish("a", b"p", qos=1, packet_id=1, properties=Properties(content_type="c"))


def test_a_server_decoder_learns_level_5_from_connect_in_the_same_read() -> None:
    decoder = Decoder(accept_mqtt5=True)
    wire = encode(CONNECT5) + encode(PUBLISH5, MQTT_5) + encode(PubAck(7, ReasonCode.QUOTA_EXCEEDED), MQTT_5)
    assert decoder.feed(wire) == [CONNECT5, PUBLISH5, PubAck(7, ReasonCode.QUOTA_EXCEEDED)]
    assert decoder.protocol_level == MQTT_5


def test_a_decoder_not_told_refuses_level_5_as_before() -> None:
    with pytest.raises(UnacceptableProtocol, match=re.escape("is not MQTT 3.1 or 3.1.1")) as caught:
        Decoder().feed(encode(CONNECT5))
    assert caught.value.return_code == 1
    assert caught.value.reason_code == ReasonCode.UNSUPPORTED_PROTOCOL_VERSION


def test_a_decoder_that_accepts_5_still_refuses_other_levels() -> None:
    wire = encode(Connect("MQTT", 6, "id", True, 30))
    with pytest.raises(UnacceptableProtocol, match=re.escape("level 6 is not MQTT 3.1, 3.1.1 or 5.0")):
        Decoder(accept_mqtt5=True).feed(wire)


def test_a_decoder_that_accepts_5_reads_3_1_1_as_before() -> None:
    decoder = Decoder(accept_mqtt5=True)
    assert decoder.feed(encode(Connect("MQTT", MQTT_311, "id", True, 30))) == [
        Connect("MQTT", MQTT_311, "id", True, 30)
    ]
    assert decoder.feed(bytes.fromhex("b002000a")) == [UnsubAck(10)]  # no reason codes before 5.0
    with pytest.raises(MqttProtocolError, match="reserved packet type 15"):
        decoder.feed(bytes.fromhex("f000"))


def test_an_unknown_level_cannot_be_set() -> None:
    with pytest.raises(ValueError, match="protocol level 6"):
        Decoder(protocol_level=6)


# --- Maximum Packet Size ------------------------------------------------------------------------


def test_maximum_packet_size_counts_the_whole_packet_in_5_0() -> None:
    """Sections 3.1.2.11.4 and 3.2.2.3.6: the size is every byte of the packet, fixed header too."""
    packet = Publish("t", bytes(95))  # 2 + 1 + 1 + 95 = 99 bytes of body, 2 of header
    assert len(encode(packet, MQTT_5)) == 101
    assert Decoder(101, protocol_level=MQTT_5).feed(encode(packet, MQTT_5)) == [packet]
    with pytest.raises(
        MqttProtocolError, match="packet of 101 bytes over the maximum packet size 100"
    ) as caught:
        Decoder(100, protocol_level=MQTT_5).feed(encode(packet, MQTT_5))
    assert caught.value.reason_code == ReasonCode.PACKET_TOO_LARGE


def test_maximum_packet_size_refuses_from_the_header_alone() -> None:
    decoder = Decoder(1000, protocol_level=MQTT_5)
    assert decoder.feed(b"\x30\xe6") == []
    with pytest.raises(MqttProtocolError, match="packet of 1,001 bytes") as caught:
        decoder.feed(b"\x07")  # a Remaining Length of 998, three bytes of header
    assert caught.value.reason_code == ReasonCode.PACKET_TOO_LARGE


# --- what encode refuses, and what 3.1.1 does not write -----------------------------------------


@pytest.mark.parametrize(
    ("packet", "match"),
    [
        (PubAck(1, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND), "reason code 0x92 not allowed in PUBACK"),
        (PubRel(1, ReasonCode.NO_MATCHING_SUBSCRIBERS), "reason code 0x10 not allowed in PUBREL"),
        (ConnAck(False, ReasonCode.SESSION_TAKEN_OVER), "reason code 0x8e not allowed in CONNACK"),
        (SubAck(1, (ReasonCode.NO_SUBSCRIPTION_EXISTED,)), "reason code 0x11 not allowed in SUBACK"),
        (UnsubAck(1, ()), "UNSUBACK needs at least one reason code"),
        (Disconnect(ReasonCode.BANNED), "reason code 0x8a not allowed in DISCONNECT"),
        (
            Auth(ReasonCode.NOT_AUTHORIZED, Properties(authentication_method="m")),
            "reason code 0x87 not allowed in AUTH",
        ),
        (
            Publish("t", b"", properties=Properties(session_expiry_interval=1)),
            "Session Expiry Interval is not a property of PUBLISH",
        ),
        (
            PubAck(1, properties=Properties(user_properties=(("a", "b"),), topic_alias=1)),
            "Topic Alias is not a property of PUBACK",
        ),
        (Publish("t", b"", properties=Properties(topic_alias=65536)), "Topic Alias 65536 out of 0..65535"),
        (
            Publish("t", b"", properties=Properties(subscription_identifiers=(2**28,))),
            "Subscription Identifier 268,435,456 over",
        ),
        (Subscribe(1, (("a", 3),)), "subscription options 3"),
        (Subscribe(1, (("a", 256),)), "subscription options 256"),
    ],
)
def test_encode_refuses_what_5_0_cannot_write(packet: Packet, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        encode(packet, MQTT_5)


def test_3_1_1_writes_none_of_what_5_0_adds() -> None:
    """A packet built for 5.0 goes to a 3.1.1 client without reason codes or properties."""
    properties = Properties(user_properties=(("a", "b"),), reason_string="r")
    assert encode(PubAck(1, ReasonCode.NO_MATCHING_SUBSCRIBERS, properties)).hex() == "40020001"
    assert encode(Publish("t", b"x", properties=Properties(content_type="c"))).hex() == "300400017478"
    assert encode(UnsubAck(10, (ReasonCode.SUCCESS,))).hex() == "b002000a"
    assert encode(Disconnect(ReasonCode.SERVER_SHUTTING_DOWN)).hex() == "e000"


def test_auth_cannot_be_written_before_5_0() -> None:
    with pytest.raises(ValueError, match=re.escape("no AUTH before MQTT 5.0")):
        encode(Auth(properties=Properties(authentication_method="m")), MQTT_311)
