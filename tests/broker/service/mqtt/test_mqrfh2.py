"""One broker, two protocols: MQTT clients and MQRFH2 applications share the topic tree and
the retained publications."""

from __future__ import annotations

import pytest

from broker.client import BrokerClient, PubOpt, RegOpt
from queues.message import MQPER_NOT_PERSISTENT, MQPER_PERSISTENT
from tests.broker.service.mqtt.clients import MqttBroker, Paho, Received


@pytest.mark.parametrize("qos", [0, 1, 2])
def test_an_mqtt_publication_reaches_an_mqrfh2_subscriber(broker: MqttBroker, qos: int) -> None:
    broker.qm.define_queue("SOCCER.SUB")
    with BrokerClient(broker.qm, user_id="carol") as app:
        assert app.subscribe("Sport/Soccer/#", "SOCCER.SUB").ok
        pub = Paho(broker.port, "device")
        pub.connect()
        pub.publish("Sport/Soccer/Event/MatchStarted", b"kick-off", qos)
        received = app.receive("SOCCER.SUB", wait=10)
    assert received.topics == ("Sport/Soccer/Event/MatchStarted",)
    assert received.body == b"kick-off"
    assert received.message.persistence == (MQPER_PERSISTENT if qos else MQPER_NOT_PERSISTENT)


@pytest.mark.parametrize("granted", [0, 1, 2])
def test_an_mqrfh2_publication_reaches_mqtt_subscribers(broker: MqttBroker, granted: int) -> None:
    sub = Paho(broker.port, "device")
    sub.connect()
    sub.subscribe(("Sport/#", granted))
    with BrokerClient(broker.qm, user_id="carol") as app:
        assert app.publish("Sport/Tennis/Score", b"15-0", persistence=MQPER_PERSISTENT).ok
        assert app.publish("Sport/Tennis/Fault", b"net", persistence=MQPER_NOT_PERSISTENT).ok
    got = sorted(sub.receive(2), key=lambda m: m.topic)
    assert got == [  # the payload only, no MQRFH2; persistent ones count as QoS 2
        Received("Sport/Tennis/Fault", b"net", 0, False),
        Received("Sport/Tennis/Score", b"15-0", granted, False),
    ]


def test_retained_publications_are_shared(broker: MqttBroker) -> None:
    broker.qm.define_queue("LATE.SUB")
    pub = Paho(broker.port, "device")
    pub.connect()
    pub.publish("Weather/Paris", b"sunny", 1, retain=True)
    with BrokerClient(broker.qm, user_id="carol") as app:
        assert app.publish("Weather/Rome", b"rain", options=PubOpt.RetainPub, persistence=MQPER_PERSISTENT).ok
        assert app.subscribe("Weather/#", "LATE.SUB", options=RegOpt.PubOnReqOnly).ok
        assert app.request_update("Weather/#", "LATE.SUB").ok  # ReqUpdate sees MQTT's
        updates = sorted((app.receive("LATE.SUB", wait=10) for _ in range(2)), key=lambda p: p.topic)
        assert [(u.topic, u.body) for u in updates] == [
            ("Weather/Paris", b"sunny"),
            ("Weather/Rome", b"rain"),
        ]
    sub = Paho(broker.port, "late")
    sub.connect()
    sub.subscribe(("Weather/#", 2))
    got = sorted(sub.receive(2), key=lambda m: m.topic)
    assert got == [Received("Weather/Paris", b"sunny", 1, True), Received("Weather/Rome", b"rain", 2, True)]
