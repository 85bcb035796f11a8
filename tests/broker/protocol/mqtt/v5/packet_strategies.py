"""Hypothesis strategies for MQTT 5.0: any property block and any packet the codec must carry,
within what the specification allows (a Receive Maximum is never 0, a Response Topic never
holds a wildcard, No Local never on a shared subscription), built from the property table."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from broker.protocol.mqtt import (
    MQTT_5,
    PROTOCOL_NAMES,
    REASON_CODES,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PingReq,
    PingResp,
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
    Will,
)
from broker.protocol.mqtt.v5 import properties as table
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
)
from tests.broker.protocol.mqtt.test_properties import (
    PACKET_ID,
    PAYLOAD,
    QOS,
    TEXT,
    topic_filters,
    topic_names,
)

MAX_VARINT = 268_435_455
# Filters outside the shared subscriptions' namespace ("$share/x" alone is not a valid filter).
FILTERS = topic_filters().filter(lambda text: not text.startswith("$share/"))


def _integers(prop: table.Property, top: int) -> st.SearchStrategy[int]:
    low = 1 if prop.valid is not None and not prop.valid(0) else 0
    return st.integers(low, top)


def _value(prop: table.Property, text: st.SearchStrategy[str]) -> st.SearchStrategy[object]:
    """One value of ``prop`` the specification allows."""
    kind = prop.type
    if kind is table.BYTE:
        return st.sampled_from([0, 1])  # both Byte properties take 0 or 1
    if kind is table.BOOLEAN:
        return st.booleans()
    if kind is table.TWO_BYTE_INTEGER:
        return _integers(prop, 0xFFFF)
    if kind is table.FOUR_BYTE_INTEGER:
        return _integers(prop, 0xFFFF_FFFF)
    if kind is table.VARIABLE_BYTE_INTEGER:
        return _integers(prop, MAX_VARINT)
    if kind is table.BINARY_DATA:
        return st.binary(max_size=20)
    if kind is table.UTF8_STRING_PAIR:
        return st.tuples(text, text)
    if prop.valid is not None:  # a Response Topic: a topic name
        return text.filter(prop.valid)
    return text


@st.composite
def properties(draw: st.DrawFn, where: int, text: st.SearchStrategy[str] = TEXT) -> Properties:
    """Any properties a ``where`` (a packet type, or the will's) may carry, each present or not."""
    fields: dict[str, Any] = {}
    for prop in table.TABLE:
        if where not in prop.packets:
            continue
        value = _value(prop, text)
        if prop.repeats:
            most = 3 if where in prop.repeats_in else 1
            fields[prop.field] = tuple(draw(st.lists(value, max_size=most)))
        else:
            fields[prop.field] = draw(st.none() | value)
    # Authentication Data needs its method; an AUTH always names one.
    needs_method = where == AUTH or (where == CONNECT and fields["authentication_data"] is not None)
    if needs_method and fields["authentication_method"] is None:
        fields["authentication_method"] = draw(text)
    return Properties(**fields)


def _codes(packet: type) -> st.SearchStrategy[int]:
    return st.sampled_from(sorted(REASON_CODES[packet]))


@st.composite
def connects(draw: st.DrawFn) -> Connect:
    will = draw(
        st.none() | st.builds(Will, topic_names(), PAYLOAD, QOS, st.booleans(), properties(table.WILL))
    )
    return Connect(
        PROTOCOL_NAMES[MQTT_5],
        MQTT_5,
        draw(TEXT),
        draw(st.booleans()),
        draw(st.integers(0, 65535)),
        will,
        draw(st.none() | TEXT),
        draw(st.none() | st.binary(max_size=30)),  # a password without a user name is allowed
        draw(properties(CONNECT)),
    )


@st.composite
def connacks(draw: st.DrawFn) -> ConnAck:
    code = draw(_codes(ConnAck))
    return ConnAck(not code and draw(st.booleans()), code, draw(properties(CONNACK)))


@st.composite
def publishes(draw: st.DrawFn) -> Publish:
    qos = draw(QOS)
    props = draw(properties(PUBLISH))
    topic = draw(topic_names() | st.just("")) if props.topic_alias is not None else draw(topic_names())
    return Publish(
        topic,
        draw(PAYLOAD),
        qos,
        draw(st.booleans()),
        qos > 0 and draw(st.booleans()),
        draw(PACKET_ID) if qos else None,
        props,
    )


@st.composite
def subscriptions(draw: st.DrawFn) -> tuple[str, int]:
    text = draw(FILTERS | FILTERS.map(lambda f: f"$share/group/{f}"))
    options = SubscriptionOptions.of(
        draw(QOS),
        no_local=not text.startswith("$share/") and draw(st.booleans()),
        retain_as_published=draw(st.booleans()),
        retain_handling=draw(st.integers(0, 2)),
    )
    return text, options


def _ack(cls: type[PubAck | PubRec | PubRel | PubComp], kind: int) -> st.SearchStrategy[Packet]:
    return st.builds(cls, PACKET_ID, _codes(cls), properties(kind))


def _some(element: st.SearchStrategy[object]) -> st.SearchStrategy[tuple[object, ...]]:
    return st.lists(element, min_size=1, max_size=4).map(tuple)


PACKETS: dict[type, st.SearchStrategy[Packet]] = {
    Connect: connects(),
    ConnAck: connacks(),
    Publish: publishes(),
    PubAck: _ack(PubAck, PUBACK),
    PubRec: _ack(PubRec, PUBREC),
    PubRel: _ack(PubRel, PUBREL),
    PubComp: _ack(PubComp, PUBCOMP),
    Subscribe: st.builds(Subscribe, PACKET_ID, _some(subscriptions()), properties(SUBSCRIBE)),
    SubAck: st.builds(SubAck, PACKET_ID, _some(_codes(SubAck)), properties(SUBACK)),
    Unsubscribe: st.builds(Unsubscribe, PACKET_ID, _some(FILTERS), properties(UNSUBSCRIBE)),
    UnsubAck: st.builds(UnsubAck, PACKET_ID, _some(_codes(UnsubAck)), properties(UNSUBACK)),
    PingReq: st.builds(PingReq),
    PingResp: st.builds(PingResp),
    Disconnect: st.builds(Disconnect, _codes(Disconnect), properties(DISCONNECT)),
    Auth: st.builds(Auth, _codes(Auth), properties(AUTH)),
}
ANY_PACKET: st.SearchStrategy[Packet] = st.one_of(*PACKETS.values())
