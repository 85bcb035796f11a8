"""MQTT 5.0 on the listener, what the server tells and sends a client that asks: Response
Information in the CONNACK (a topic prefix of the client's own, usable as any topic), and topic
aliases on the publications sent to a client whose CONNECT takes them, seen on the wire by a raw
client (paho-mqtt 2.2 hands its application the empty topic, and libmosquitto 2.0 takes an
alias it is sent for a protocol error: neither resolves them); on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from broker.protocol.mqtt import (
    MQTT_5,
    ConnAck,
    Properties,
    PubAck,
    Publish,
    SubAck,
    Subscribe,
    SubscriptionOptions,
)
from tests.broker.service.mqtt.clients import MqttBroker, Paho, Raw
from tests.e2e.processes import Brokers


def connected(
    broker: MqttBroker, client_id: str, *, clean: bool = True, **properties: object
) -> tuple[Raw, ConnAck]:
    raw = Raw(broker.port, level=MQTT_5)
    connack = raw.connect(client_id, clean=clean, properties=Properties(**properties))  # type: ignore[arg-type]
    assert isinstance(connack, ConnAck) and connack.return_code == 0, connack
    return raw, connack


def subscribe(raw: Raw, text: str, qos: int = 1) -> None:
    raw.send(Subscribe(1, ((text, SubscriptionOptions.of(qos)),)))
    assert raw.next() == SubAck(1, (qos,))


def publisher(broker: MqttBroker) -> Paho:
    found = Paho(broker.port, "publisher")
    found.connect()
    return found


# -- Response Information ------------------------------------------------------------------


def test_response_information_is_a_topic_prefix_of_the_clients_own(broker: MqttBroker) -> None:
    asker, connack = connected(broker, "asker", request_response_information=True)
    information = connack.properties.response_information
    assert information == "response/asker/"
    subscribe(asker, f"{information}#")  # a topic like any other: a reply there reaches it
    publisher(broker).publish(f"{information}42", b"reply", 1)
    got = asker.next()
    assert isinstance(got, Publish) and (got.topic, got.payload) == ("response/asker/42", b"reply")
    _, plain = connected(broker, "not-asking")
    assert plain.properties.response_information is None
    _, refused = connected(broker, "declining", request_response_information=False)
    assert refused.properties.response_information is None


@pytest.mark.parametrize(("prefix", "told"), [("replies/", "replies/asker/"), ("", None)], ids=["set", "off"])
def test_the_response_information_prefix_is_a_setting(
    brokers: Brokers, prefix: str, told: str | None
) -> None:
    broker = MqttBroker(brokers, BROKER_MQTT_RESPONSE_INFORMATION=prefix)
    _, connack = connected(broker, "asker", request_response_information=True)
    assert connack.properties.response_information == told


# -- topic aliases towards the client ------------------------------------------------------


def test_a_later_publication_on_an_aliased_topic_goes_with_the_alias_alone(broker: MqttBroker) -> None:
    raw, _ = connected(broker, "aliased", topic_alias_maximum=1)
    subscribe(raw, "alias/#", 0)
    pub = publisher(broker)
    for topic, payload in (("alias/a", b"1"), ("alias/a", b"2"), ("alias/b", b"3"), ("alias/a", b"4")):
        pub.publish(topic, payload)
    got = [raw.next() for _ in range(4)]
    assert [(p.topic, p.properties.topic_alias, p.payload) for p in got if isinstance(p, Publish)] == [
        ("alias/a", 1, b"1"),
        ("", 1, b"2"),
        ("alias/b", None, b"3"),  # the client takes one alias
        ("", 1, b"4"),
    ]


def test_a_client_that_takes_no_aliases_is_sent_none(broker: MqttBroker) -> None:
    raw, _ = connected(broker, "plain")
    subscribe(raw, "alias/#", 0)
    pub = publisher(broker)
    pub.publish("alias/a", b"1")
    pub.publish("alias/a", b"2")
    got = [raw.next(), raw.next()]
    assert [(p.topic, p.properties.topic_alias) for p in got if isinstance(p, Publish)] == [
        ("alias/a", None),
        ("alias/a", None),
    ]


def test_a_message_sent_again_after_a_reconnection_has_its_full_topic(broker: MqttBroker) -> None:
    lasting = {"session_expiry_interval": 300, "topic_alias_maximum": 5}
    raw, _ = connected(broker, "resuming", **lasting)
    subscribe(raw, "alias/#")
    pub = publisher(broker)
    pub.publish("alias/a", b"acknowledged", 1)
    first = raw.next()
    assert isinstance(first, Publish) and (first.topic, first.properties.topic_alias) == ("alias/a", 1)
    raw.send(PubAck(first.packet_id or 0))
    pub.publish("alias/a", b"unacknowledged", 1)
    second = raw.next()
    assert isinstance(second, Publish) and (second.topic, second.properties.topic_alias) == ("", 1)
    raw.close()  # no PUBACK: it is sent again
    again, connack = connected(broker, "resuming", clean=False, **lasting)
    assert connack.session_present
    resent = again.next()
    assert isinstance(resent, Publish) and resent.dup and resent.packet_id == second.packet_id
    assert (resent.topic, resent.properties.topic_alias, resent.payload) == (
        "alias/a",
        None,
        b"unacknowledged",
    )
    again.send(PubAck(resent.packet_id or 0))
    pub.publish("alias/a", b"new", 1)
    fresh = again.next()  # this connection's aliases start afresh: the topic goes with it
    assert isinstance(fresh, Publish) and (fresh.topic, fresh.properties.topic_alias) == ("alias/a", 1)
