"""Properties of broker.protocol.mqtt.codec over arbitrary valid packets: decoding gives back
what was encoded, whatever the reads the bytes arrive in (one byte at a time, several packets
at once, a packet cut anywhere)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker.protocol.mqtt import (
    MQTT_31,
    MQTT_311,
    PROTOCOL_NAMES,
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
    validate_filter,
    validate_topic_name,
)

# Any character UTF-8 can carry except U+0000; "/" and the wildcards are added where they may be.
PLAIN = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00/+#"), max_size=12)
TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=20)
QOS = st.integers(0, 2)
PACKET_ID = st.integers(1, 65535)
PAYLOAD = st.binary(max_size=600)


@st.composite
def topic_names(draw: st.DrawFn) -> str:
    levels = draw(st.lists(PLAIN, min_size=1, max_size=5))
    name = "/".join(levels)
    return name or "/"


@st.composite
def topic_filters(draw: st.DrawFn) -> str:
    levels = draw(st.lists(st.one_of(PLAIN, st.just("+")), min_size=1, max_size=5))
    if draw(st.booleans()):
        levels.append("#")
    text = "/".join(levels)
    return text or "#"


@st.composite
def publishes(draw: st.DrawFn) -> Publish:
    qos = draw(QOS)
    return Publish(
        draw(topic_names()),
        draw(PAYLOAD),
        qos,
        draw(st.booleans()),
        qos > 0 and draw(st.booleans()),
        draw(PACKET_ID) if qos else None,
    )


@st.composite
def connects(draw: st.DrawFn) -> Connect:
    level = draw(st.sampled_from([MQTT_31, MQTT_311]))
    will = draw(st.none() | st.builds(Will, topic_names(), PAYLOAD, QOS, st.booleans()))
    username = draw(st.none() | TEXT)
    # 3.1.1 forbids a password without a user name; 3.1 allows it.
    password = draw(st.none() | st.binary(max_size=30)) if username is not None or level == MQTT_31 else None
    return Connect(
        PROTOCOL_NAMES[level],
        level,
        draw(TEXT),
        draw(st.booleans()),
        draw(st.integers(0, 65535)),
        will,
        username,
        password,
    )


PACKETS: st.SearchStrategy[Packet] = st.one_of(
    publishes(),
    connects(),
    st.builds(ConnAck, st.booleans(), st.just(0)),
    st.builds(ConnAck, st.just(False), st.integers(0, 5)),
    st.builds(PubAck, PACKET_ID),
    st.builds(PubRec, PACKET_ID),
    st.builds(PubRel, PACKET_ID),
    st.builds(PubComp, PACKET_ID),
    st.builds(
        Subscribe, PACKET_ID, st.lists(st.tuples(topic_filters(), QOS), min_size=1, max_size=4).map(tuple)
    ),
    st.builds(
        SubAck,
        PACKET_ID,
        st.lists(st.sampled_from([0, 1, 2, SUBACK_FAILURE]), min_size=1, max_size=4).map(tuple),
    ),
    st.builds(Unsubscribe, PACKET_ID, st.lists(topic_filters(), min_size=1, max_size=4).map(tuple)),
    st.builds(UnsubAck, PACKET_ID),
    st.builds(PingReq),
    st.builds(PingResp),
    st.builds(Disconnect),
)


@given(PACKETS)
def test_decode_of_encode_is_the_packet(packet: Packet) -> None:
    assert Decoder().feed(encode(packet)) == [packet]


@given(st.lists(PACKETS, max_size=8), st.data())
def test_any_split_into_reads_gives_the_same_packets(packets: list[Packet], data: st.DataObject) -> None:
    wire = b"".join(map(encode, packets))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=12)))
    decoder = Decoder()
    out: list[Packet] = []
    for start, end in zip([0, *cuts], [*cuts, len(wire)], strict=True):
        out += decoder.feed(wire[start:end])
    assert out == packets


@given(st.lists(PACKETS, min_size=1, max_size=4))
def test_one_byte_reads_give_the_same_packets(packets: list[Packet]) -> None:
    wire = b"".join(map(encode, packets))
    decoder = Decoder()
    out: list[Packet] = []
    for index in range(len(wire)):
        out += decoder.feed(wire[index : index + 1])
    assert out == packets


@given(topic_names())
def test_generated_topic_names_are_valid(name: str) -> None:
    validate_topic_name(name)


@given(topic_filters())
def test_generated_filters_are_valid(text: str) -> None:
    validate_filter(text)
