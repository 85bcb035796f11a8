"""MQTT 5.0 Subscription Identifiers (sections 3.8.2.1.2 and 3.3.4) on a real listener, heard by
paho-mqtt's v5 client and a raw client: a SUBSCRIBE's identifier is kept with each of its filters
in the stored session, and every publication sent to the session carries the identifiers of all
its matching subscriptions that have one: live, queued while it was away, retained on a new
subscription, and sent again after a reconnection as it was first sent. 3.1.1 never sees them."""

from __future__ import annotations

import queue
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties

from broker.protocol.mqtt import (
    MQTT_5,
    MQTT_311,
    NO_PROPERTIES,
    Disconnect,
    Properties,
    Publish,
    ReasonCode,
    SubAck,
    Subscribe,
    SubscriptionOptions,
)
from broker.service.mqtt.gateway import Rules
from broker.store import mqtt
from tests.broker.service.mqtt.clients import TIMEOUT, MqttBroker, Paho, Raw, protocol_error

LASTING = 300  # a Session Expiry Interval that outlives the connection


class Identified(Paho):
    """A paho-mqtt v5 client that records each publication with its Subscription Identifiers."""

    def __init__(self, port: int, client_id: str, **kwargs: Any) -> None:
        super().__init__(port, client_id, protocol=paho.MQTTv5, **kwargs)
        self.heard: queue.Queue[tuple[str, bytes, bool, list[int]]] = queue.Queue()

    def _on_message(self, _c: Any, _u: Any, msg: Any) -> None:
        ids = list(getattr(msg.properties, "SubscriptionIdentifier", []))
        self.heard.put((msg.topic, msg.payload, bool(msg.retain), ids))

    def subscribe_with(self, identifier: int | None, *filters: tuple[str, int]) -> list[int]:
        """SUBSCRIBE ``filters`` with the Subscription Identifier ``identifier`` (None: none)."""
        properties = None
        if identifier is not None:
            properties = PahoProperties(PacketTypes.SUBSCRIBE)
            properties.SubscriptionIdentifier = identifier
        self.client.subscribe(list(filters), properties=properties)
        return self.subacks.get(timeout=TIMEOUT)

    def next(self) -> tuple[str, bytes, bool, list[int]]:
        return self.heard.get(timeout=TIMEOUT)

    def quiet(self, wait: float = 0.7) -> bool:
        try:
            self.heard.get(timeout=wait)
        except queue.Empty:
            return True
        return False


def publisher(broker: MqttBroker) -> Paho:
    pub = Paho(broker.port, "publisher")
    pub.connect()
    return pub


def raw5(broker: MqttBroker, client_id: str, *, clean: bool = True) -> Raw:
    raw = Raw(broker.port, level=MQTT_5)
    raw.connect(client_id, clean=clean, properties=Properties(session_expiry_interval=LASTING))
    return raw


def subscribe(packet_id: int, text: str, identifier: int | None = None) -> Subscribe:
    """A SUBSCRIBE of ``text`` at QoS 1, with the Subscription Identifier ``identifier``."""
    ids = () if identifier is None else (identifier,)
    return Subscribe(
        packet_id, ((text, SubscriptionOptions.of(1)),), Properties(subscription_identifiers=ids)
    )


def test_rules_carry_the_identifiers_of_every_matching_filter() -> None:
    shift = mqtt.ID_SHIFT
    granted = {"a/#": 1 | 2 << shift, "a/+": 0b0100 | 1 << shift, "a/b": 2, "z": 1 | 9 << shift}
    rules = Rules.of(granted, "a/b")
    assert (rules.qos, rules.ids, rules.own_ids) == (2, (1, 2), (2,))  # a/+ is No Local
    assert Rules.of(granted, "q").ids == ()


def test_a_delivery_carries_its_subscriptions_identifier(broker: MqttBroker) -> None:
    sub = Identified(broker.port, "sub")
    sub.connect()
    assert sub.subscribe_with(268_435_455, ("plant/+/temp", 1)) == [1]
    publisher(broker).publish("plant/7/temp", b"21.5", 1)
    assert sub.next() == ("plant/7/temp", b"21.5", False, [268_435_455])
    with broker.qm.reading() as conn:
        assert mqtt.granted(conn, "sub") == {"plant/+/temp": 1 | 268_435_455 << mqtt.ID_SHIFT}


@pytest.mark.parametrize("online", [True, False], ids=["live", "queued"])
def test_overlapping_subscriptions_give_one_copy_with_all_their_ids(broker: MqttBroker, online: bool) -> None:
    sub = Identified(broker.port, "overlap", clean=False, session_expiry=LASTING)
    sub.connect()
    assert sub.subscribe_with(1, ("room/#", 1)) == [1]
    assert sub.subscribe_with(2, ("room/+", 0), ("room/kitchen", 1)) == [0, 1]
    assert sub.subscribe_with(None, ("+/kitchen", 1)) == [1]  # matches too, without an identifier
    if not online:
        sub.close()
    publisher(broker).publish("room/kitchen", b"on", 1)
    if not online:
        sub = Identified(broker.port, "overlap", clean=False, session_expiry=LASTING)
        assert sub.connect() == (0, True)
    assert sub.next() == ("room/kitchen", b"on", False, [1, 2])
    assert sub.quiet()


def test_a_subscribe_without_an_identifier_removes_the_filters_one(broker: MqttBroker) -> None:
    sub = Identified(broker.port, "changing")
    sub.connect()
    assert sub.subscribe_with(5, ("news/#", 1)) == [1]
    pub = publisher(broker)
    pub.publish("news/a", b"first", 1)
    assert sub.next() == ("news/a", b"first", False, [5])
    assert sub.subscribe_with(6, ("news/#", 1)) == [1]  # replaced
    pub.publish("news/a", b"second", 1)
    assert sub.next() == ("news/a", b"second", False, [6])
    assert sub.subscribe_with(None, ("news/#", 1)) == [1]  # removed
    pub.publish("news/a", b"third", 1)
    assert sub.next() == ("news/a", b"third", False, [])
    with broker.qm.reading() as conn:
        assert mqtt.granted(conn, "changing") == {"news/#": 1}


def test_a_retained_publication_sent_for_a_subscription_carries_its_identifier(broker: MqttBroker) -> None:
    publisher(broker).publish("config/site", b"kept", 1, retain=True)
    sub = Identified(broker.port, "newcomer")
    sub.connect()
    assert sub.subscribe_with(42, ("config/#", 1)) == [1]
    assert sub.next() == ("config/site", b"kept", True, [42])


def test_a_delivery_sent_again_keeps_the_identifiers_it_was_sent_with(broker: MqttBroker) -> None:
    raw = raw5(broker, "resumed")
    raw.send(subscribe(1, "app/#", 11))
    assert raw.next() == SubAck(1, (1,))
    publisher(broker).publish("app/x", b"unacknowledged", 1)
    first = raw.next()
    assert isinstance(first, Publish) and first.properties.subscription_identifiers == (11,)
    raw.send(subscribe(2, "app/#"))  # its identifier removed
    assert raw.next() == SubAck(2, (1,))
    raw.close()  # no PUBACK
    again = raw5(broker, "resumed", clean=False)
    resent = again.next()
    assert isinstance(resent, Publish) and resent.dup and resent.packet_id == first.packet_id
    assert resent.properties.subscription_identifiers == (11,)


def test_a_subscription_identifier_of_0_is_a_protocol_error(broker: MqttBroker) -> None:
    raw = raw5(broker, "zero")
    raw.send(subscribe(1, "a", 0))
    assert raw.next() == Disconnect(ReasonCode.PROTOCOL_ERROR)
    assert protocol_error(raw)


def test_a_311_client_never_gets_them(broker: MqttBroker) -> None:
    five = raw5(broker, "switching")
    five.send(subscribe(1, "meter/#", 7))
    assert five.next() == SubAck(1, (1,))
    five.send(Disconnect())
    five.close()
    old = Paho(broker.port, "old")
    old.connect()
    old.subscribe(("meter/#", 1))
    pub = publisher(broker)
    pub.publish("meter/1", b"queued", 1)
    assert [m.payload for m in old.receive(1)] == [b"queued"]
    back = Raw(broker.port, level=MQTT_311)  # the same session, now at 3.1.1
    back.connect("switching", clean=False)
    queued = back.next()
    assert isinstance(queued, Publish) and queued.payload == b"queued"
    assert queued.properties is NO_PROPERTIES
    pub.publish("meter/2", b"live", 1)
    live = back.next()
    assert isinstance(live, Publish) and (live.payload, live.properties) == (b"live", NO_PROPERTIES)
