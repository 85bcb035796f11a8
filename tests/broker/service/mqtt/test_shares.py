"""Shared subscriptions, ``$share/{ShareName}/{filter}``, on the listener: MQTT 5.0 and 3.1.1
members (paho-mqtt, ``mosquitto_sub``, a raw client), and MQRFH2 applications joining the same
MQ shared subscription. Each test checks who receives what: every publication reaches one
member, in turn, the connected ones first; what a member leaves unacknowledged goes to another;
the last member's leaving ends the subscription."""

from __future__ import annotations

import time
from collections import Counter

import paho.mqtt.client as paho

from broker.client import BrokerClient
from broker.protocol.mqtt import (
    MQTT_5,
    MQTT_311,
    ConnAck,
    Properties,
    Publish,
    SubAck,
    Subscribe,
)
from broker.protocol.options import RegOpt
from broker.store import listings, mqtt
from queues.errors import MQError
from queues.message import MQPER_PERSISTENT
from tests.broker.service.mqtt.clients import MqttBroker, Paho, Raw, eventually, mosquitto_pub, mosquitto_sub

SHARE = "$share/workers/Jobs/#"
QUEUE = mqtt.share_queue_for("workers", "Jobs/#")


def member(broker: MqttBroker, client_id: str, *, v5: bool = True, **options: object) -> Paho:
    client = Paho(broker.port, client_id, protocol=paho.MQTTv5 if v5 else paho.MQTTv311, **options)  # type: ignore[arg-type]
    assert client.connect()[0] == 0
    assert client.subscribe((SHARE, 1)) == [1]
    return client


def raw_member(broker: MqttBroker, receive_maximum: int) -> Raw:
    """A member that never acknowledges, taking at most ``receive_maximum`` at once."""
    silent = Raw(broker.port, level=MQTT_5)
    connack = silent.connect("silent", properties=Properties(receive_maximum=receive_maximum))
    assert isinstance(connack, ConnAck) and connack.return_code == 0
    silent.send(Subscribe(1, ((SHARE, 1),)))
    assert silent.next() == SubAck(1, (1,))
    return silent


def payloads(client: Paho, count: int) -> list[bytes]:
    return [message.payload for message in client.receive(count)]


def test_each_publication_reaches_one_member_in_turn(broker: MqttBroker) -> None:
    five, old = member(broker, "w5"), member(broker, "w311", v5=False)
    publisher = Paho(broker.port, "boss")
    publisher.connect()
    for number in range(20):
        publisher.publish(f"Jobs/{number % 3}", b"%d" % number, 1)
    got = payloads(five, 10) + payloads(old, 10)
    assert sorted(got, key=int) == [b"%d" % n for n in range(20)]
    assert five.nothing_more() and old.nothing_more()


def test_mosquitto_sub_at_5_and_3_1_1_are_members_of_one_group(broker: MqttBroker) -> None:
    five = mosquitto_sub(broker.port, "mqttv5", SHARE, 3, "-q", "1")
    old = mosquitto_sub(broker.port, "mqttv311", SHARE, 3, "-q", "1")
    assert eventually(lambda: _members(broker) == 2)
    for number in range(6):
        mosquitto_pub(broker.port, "mqttv5", f"Jobs/{number}", str(number), 1)
    lines = [line for sub in (five, old) for line in sub.communicate(timeout=20)[0].split("\n") if line]
    assert sorted(lines) == [f"0 Jobs/{n} {n}" for n in range(6)]


def test_a_plain_subscription_beside_a_shared_one_gets_its_own_copy(broker: MqttBroker) -> None:
    shared = member(broker, "s1")
    assert shared.subscribe(("Jobs/#", 0)) == [0]
    publisher = Paho(broker.port, "boss")
    publisher.connect()
    publisher.publish("Jobs/a", b"both", 1)
    assert sorted((m.payload, m.qos) for m in shared.receive(2)) == [(b"both", 0), (b"both", 1)]


def test_no_retained_publication_is_sent_for_a_shared_subscription(broker: MqttBroker) -> None:
    publisher = Paho(broker.port, "boss")
    publisher.connect()
    publisher.publish("Jobs/kept", b"retained", 1, retain=True)
    shared = member(broker, "s1")
    assert shared.nothing_more()
    publisher.publish("Jobs/live", b"live", 1)
    assert payloads(shared, 1) == [b"live"]


def test_connected_members_are_preferred_and_an_absent_one_finds_nothing_held(broker: MqttBroker) -> None:
    away = member(broker, "away", clean=False, session_expiry=600)
    away.close()
    here = member(broker, "here")
    publisher = Paho(broker.port, "boss")
    publisher.connect()
    for number in range(6):
        publisher.publish("Jobs/x", b"%d" % number, 1)
    assert payloads(here, 6) == [b"%d" % n for n in range(6)]
    back = Paho(broker.port, "away", protocol=paho.MQTTv5, clean=False, session_expiry=600)
    assert back.connect() == (0, True)
    assert back.nothing_more()


def test_publications_wait_on_the_share_while_no_member_is_connected(broker: MqttBroker) -> None:
    away = member(broker, "away", clean=False, session_expiry=600)
    away.close()
    publisher = Paho(broker.port, "boss")
    publisher.connect()
    for number in range(5):
        publisher.publish("Jobs/x", b"%d" % number, 1)
    assert eventually(lambda: broker.qm.depth(QUEUE) == 5)
    back = Paho(broker.port, "away", protocol=paho.MQTTv5, clean=False, session_expiry=600)
    assert back.connect() == (0, True)
    assert payloads(back, 5) == [b"%d" % n for n in range(5)]


def test_what_a_member_leaves_unacknowledged_goes_to_another(broker: MqttBroker) -> None:
    silent = raw_member(broker, receive_maximum=2)
    other = member(broker, "other")
    publisher = Paho(broker.port, "boss")
    publisher.connect()
    for number in range(4):
        publisher.publish("Jobs/x", b"%d" % number, 1)
    taken = [silent.next(), silent.next()]  # never acknowledged
    assert all(isinstance(p, Publish) and p.qos == 1 for p in taken)
    first = payloads(other, 2)
    silent.close()
    rest = payloads(other, 2)
    assert sorted(first + rest, key=int) == [b"0", b"1", b"2", b"3"]
    assert other.nothing_more()


def test_a_member_whose_window_is_full_is_passed_over(broker: MqttBroker) -> None:
    silent = raw_member(broker, receive_maximum=1)
    other = member(broker, "other")
    publisher = Paho(broker.port, "boss")
    publisher.connect()
    for number in range(9):
        publisher.publish("Jobs/x", b"%d" % number, 1)
    held = silent.next()
    assert isinstance(held, Publish)
    assert sorted([*payloads(other, 8), held.payload], key=int) == [b"%d" % n for n in range(9)]


def test_the_last_member_leaving_ends_the_share_and_its_queue(broker: MqttBroker) -> None:
    first, second = member(broker, "m1"), member(broker, "m2")
    first.client.unsubscribe(SHARE)
    time.sleep(0.3)
    assert broker.qm.depth(QUEUE) == 0  # still there: m2 is a member
    second.close()  # a clean session ends: it leaves
    first.close()
    assert eventually(lambda: not _defined(broker, QUEUE))
    with broker.qm.reading() as conn:
        assert not [row for row in mqtt.list_sessions(conn) if row.client_id in {"m1", "m2"}]


def test_an_mqrfh2_application_shares_the_subscription(broker: MqttBroker) -> None:
    mqtt_member = member(broker, "device")
    with BrokerClient(broker.qm, user_id="carol") as app:
        joined = app.subscribe(
            "Jobs/#", QUEUE, options=RegOpt.JoinShared | RegOpt.VariableUserId, sub_identity="carol-app"
        )
        assert joined.ok, joined
        mqtt_member.close()  # the application is the only member connected: the queue is its
        assert app.publish("Jobs/from-app", b"one", persistence=MQPER_PERSISTENT).ok
        assert app.receive(QUEUE, wait=10).body == b"one"
        assert app.unsubscribe("Jobs/#", QUEUE, sub_identity="carol-app", options=RegOpt.VariableUserId).ok


def test_malformed_share_at_3_1_1_is_refused_and_at_5_is_a_protocol_error(broker: MqttBroker) -> None:
    old = Raw(broker.port, level=MQTT_311)
    assert old.connect("old") == ConnAck(False, 0)
    old.send(Subscribe(1, (("$share/nofilter", 1), ("ok/#", 1))))
    assert old.next() == SubAck(1, (0x80, 1))
    new = Raw(broker.port, level=MQTT_5)
    assert isinstance(connack := new.connect("new"), ConnAck) and connack.return_code == 0
    new.send(Subscribe(1, (("$share/+/x", 1),)))
    assert new.closed_by_broker()


def test_publications_routed_by_another_process_reach_a_member(broker: MqttBroker) -> None:
    """An MQRFH2 application's publications are routed by the routing loop, not the listener:
    they wait on the share's queue, and the member connected to the listener takes them (its
    watcher hears of their arrival)."""
    here = member(broker, "here")
    counts: Counter[bytes] = Counter()
    with BrokerClient(broker.qm, user_id="carol") as app:  # routed by the routing loop, not the gateway
        for number in range(5):
            assert app.publish("Jobs/app", b"%d" % number, persistence=MQPER_PERSISTENT).ok
    counts.update(payloads(here, 5))
    assert counts == Counter({b"%d" % n: 1 for n in range(5)})


def _members(broker: MqttBroker) -> int:
    """The members of the shared subscription's identity set, as the engine stored them."""
    with broker.qm.reading() as conn:
        found = listings.list_subscriptions(conn, listings.SubscriptionFilter(queue=QUEUE))
    return len(found[0][1].members) if found else 0


def _defined(broker: MqttBroker, queue: str) -> bool:
    try:
        broker.qm.depth(queue)
    except MQError:
        return False
    return True
