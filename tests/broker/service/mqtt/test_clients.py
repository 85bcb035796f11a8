"""MQTT clients (paho-mqtt 3.1 and 3.1.1, mosquitto_pub/sub) against a real broker process."""

from __future__ import annotations

import paho.mqtt.client as paho
import pytest

from broker import store
from broker.core.authority import AclRule, Permission, PrincipalKind
from broker.protocol.mqtt import (
    CONNACK_BAD_CREDENTIALS,
    CONNACK_NOT_AUTHORIZED,
    SUBACK_FAILURE,
    ConnAck,
    Will,
)
from broker.store import mqtt
from tests.broker.service.mqtt.clients import MqttBroker, Paho, Raw, Received, mosquitto_pub, mosquitto_sub
from tests.e2e.processes import Brokers

VERSIONS = pytest.mark.parametrize("protocol", [paho.MQTTv31, paho.MQTTv311], ids=["3.1", "3.1.1"])


@VERSIONS
def test_every_qos_reaches_every_subscription_qos_at_the_lower_of_the_two(
    broker: MqttBroker, protocol: int
) -> None:
    subscribers = []
    for granted in (0, 1, 2):
        sub = Paho(broker.port, f"sub{granted}", protocol=protocol)
        assert sub.connect() == (0, False)
        assert sub.subscribe(("Sport/#", granted)) == [granted]
        subscribers.append(sub)
    pub = Paho(broker.port, "pub", protocol=protocol)
    pub.connect()
    for qos in (0, 1, 2):
        pub.publish(f"Sport/Soccer/q{qos}", f"q{qos}".encode(), qos)
    for granted, sub in enumerate(subscribers):
        got = sorted(sub.receive(3), key=lambda m: m.topic)
        assert got == [
            Received(f"Sport/Soccer/q{qos}", f"q{qos}".encode(), min(qos, granted), False)
            for qos in (0, 1, 2)
        ]
        assert sub.nothing_more()
        sub.close()
    pub.close()


def test_overlapping_subscriptions_deliver_one_copy_at_the_highest_qos(broker: MqttBroker) -> None:
    sub = Paho(broker.port, "overlap")
    sub.connect()
    assert sub.subscribe(("a/#", 0), ("a/+/c", 2), ("a/b/c", 1)) == [0, 2, 1]
    pub = Paho(broker.port, "pub")
    pub.connect()
    pub.publish("a/b/c", b"once", 2)
    assert sub.receive(1) == [Received("a/b/c", b"once", 2, False)]
    assert sub.nothing_more()
    pub.publish("a", b"parent", 1)  # a/# matches its parent a
    assert sub.receive(1) == [Received("a", b"parent", 0, False)]


@pytest.mark.parametrize("version", ["mqttv31", "mqttv311"])
def test_mosquitto_clients(broker: MqttBroker, version: str) -> None:
    mosquitto_pub(broker.port, version, "News/kept", "retained one", 1, "-r")
    sub = mosquitto_sub(broker.port, version, "News/#", 2, "-q", "2")
    assert sub.stdout is not None
    assert sub.stdout.readline().strip() == "1 News/kept retained one"  # subscribed by now
    mosquitto_pub(broker.port, version, "News/live", "live", 2)
    out, _ = sub.communicate(timeout=20)
    assert out.strip() == "0 News/live live"
    assert sub.returncode == 0


def test_retained_publications(broker: MqttBroker) -> None:
    pub = Paho(broker.port, "pub")
    pub.connect()
    pub.publish("r/one", b"first", 1, retain=True)
    pub.publish("r/one", b"second", 1, retain=True)  # replaces it
    pub.publish("r/two", b"two", 0, retain=True)
    sub = Paho(broker.port, "sub")
    sub.connect()
    sub.subscribe(("r/#", 1))
    got = sorted(sub.receive(2), key=lambda m: m.topic)
    assert got == [Received("r/one", b"second", 1, True), Received("r/two", b"two", 0, True)]
    pub.publish("r/one", b"live", 1, retain=True)
    assert sub.receive(1) == [Received("r/one", b"live", 1, False)]  # live deliveries carry RETAIN=0
    pub.publish("r/two", b"", 1, retain=True)  # deletes the retained publication
    sub.receive(1)
    late = Paho(broker.port, "late")
    late.connect()
    late.subscribe(("r/#", 1))
    assert late.receive(1) == [Received("r/one", b"live", 1, True)]
    assert late.nothing_more()
    # The same filter again replaces the subscription: its retained ones are sent again [MQTT-3.8.4-3].
    assert late.subscribe(("r/#", 0)) == [0]
    assert late.receive(1) == [Received("r/one", b"live", 0, True)]
    assert late.nothing_more()


def test_credentials(broker: MqttBroker) -> None:
    assert Raw(broker.port).connect("c1", password=b"wrong") == ConnAck(False, CONNACK_BAD_CREDENTIALS)
    assert Raw(broker.port).connect("c2", user="nobody") == ConnAck(False, CONNACK_BAD_CREDENTIALS)
    assert Raw(broker.port).connect("c3", user=None) == ConnAck(False, CONNACK_NOT_AUTHORIZED)
    assert Paho(broker.port, "c4", password="wrong").connect()[0] == 134  # paho's name for 4
    assert Paho(broker.port, "c5").connect() == (0, False)


def test_anonymous_clients_when_configured(brokers: Brokers) -> None:
    broker = MqttBroker(brokers, BROKER_MQTT_ANONYMOUS="guest")
    anonymous = Paho(broker.port, "anon", user=None)
    assert anonymous.connect() == (0, False)
    assert anonymous.subscribe(("x", 1)) == [1]


def test_refused_filters_and_publications(broker: MqttBroker) -> None:
    with broker.qm.unit_of_work() as uow:
        for permission in (Permission.SUBSCRIBE, Permission.PUBLISH):
            store.add_acl_rule(
                uow.connection, AclRule("bob", PrincipalKind.USER, "Secret", permission, False)
            )
    bob = Paho(broker.port, "bob", user="bob")
    bob.connect()
    assert bob.subscribe(("Secret/#", 1), ("Open/#", 1)) == [SUBACK_FAILURE, 1]
    alice = Paho(broker.port, "alice")
    alice.connect()
    alice.subscribe(("#", 1))
    bob.publish("Secret/x", b"refused", 1)  # acknowledged (wait_for_publish returns), not delivered
    bob.publish("Open/x", b"fine", 1)
    assert [m.payload for m in alice.receive(1)] == [b"fine"]
    assert bob.receive(1) == [Received("Open/x", b"fine", 1, False)]
    assert alice.nothing_more()
    assert len(broker.process.lines("mqtt publication refused: not authorised")) == 1
    with broker.qm.reading() as conn:  # counted per session, for the operator's listing
        assert {s.client_id: s.refused for s in mqtt.list_sessions(conn)} == {"alice": 0, "bob": 2}


def test_will_after_a_lost_connection_never_after_disconnect(broker: MqttBroker) -> None:
    watcher = Paho(broker.port, "watcher")
    watcher.connect()
    watcher.subscribe(("status/#", 2))
    polite = Paho(broker.port, "polite", will=("status/polite", b"gone", 1, False))
    polite.connect()
    polite.close()
    raw = Raw(broker.port)
    assert raw.connect("rude", will=Will("status/rude", b"lost", 2, True)).return_code == 0  # type: ignore[union-attr]
    raw.close()  # no DISCONNECT
    assert watcher.receive(1) == [Received("status/rude", b"lost", 2, False)]
    assert watcher.nothing_more()
    late = Paho(broker.port, "late")
    late.connect()
    late.subscribe(("status/#", 2))
    assert late.receive(1) == [Received("status/rude", b"lost", 2, True)]  # its retain flag held


def test_keepalive_expiry_closes_and_sends_the_will(broker: MqttBroker) -> None:
    watcher = Paho(broker.port, "watcher")
    watcher.connect()
    watcher.subscribe(("status/#", 1))
    raw = Raw(broker.port)
    raw.connect("sleepy", keepalive=1, will=Will("status/sleepy", b"expired", 1, False))
    assert raw.closed_by_broker(timeout=5)  # 1.5 s of silence
    assert watcher.receive(1) == [Received("status/sleepy", b"expired", 1, False)]


def test_a_second_connection_takes_the_session_over(broker: MqttBroker) -> None:
    watcher = Paho(broker.port, "watcher")
    watcher.connect()
    watcher.subscribe(("status/#", 1))
    first = Raw(broker.port)
    first.connect("same", clean=False, will=Will("status/same", b"taken over", 1, False))
    second = Paho(broker.port, "same", clean=False)
    assert second.connect() == (0, True)
    assert first.closed_by_broker()
    assert watcher.receive(1) == [Received("status/same", b"taken over", 1, False)]
    assert second.subscribe(("x", 1)) == [1]
