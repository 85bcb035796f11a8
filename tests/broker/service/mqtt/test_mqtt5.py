"""MQTT 5.0 clients on the listener: paho-mqtt's v5 client, ``mosquitto_pub``/``mosquitto_sub
-V mqttv5`` and a raw client speaking through the codec, beside 3.1.1 clients and MQRFH2
applications on one topic tree. Each test checks what the client hears: the CONNACK's
properties, the reason codes of refusals, the DISCONNECT a server sends with its reason, the
session's life by its Session Expiry Interval, and the limits each side tells the other."""

from __future__ import annotations

import time
from dataclasses import replace

import paho.mqtt.client as paho
import pytest

from broker.client import BrokerClient
from broker.protocol.mqtt import (
    MQTT_5,
    Auth,
    ConnAck,
    Disconnect,
    Properties,
    PubAck,
    Publish,
    ReasonCode,
    SubAck,
    Subscribe,
    SubscriptionOptions,
    UnsubAck,
    Unsubscribe,
    Will,
)
from broker.store import mqtt
from queues.message import MQPER_PERSISTENT
from tests.broker.service.mqtt.clients import (
    MqttBroker,
    Paho,
    Raw,
    Received,
    eventually,
    mosquitto_pub,
    mosquitto_sub,
    subscribed,
)


def raw5(broker: MqttBroker, client_id: str = "raw5", **properties: object) -> tuple[Raw, ConnAck]:
    raw = Raw(broker.port, level=MQTT_5)
    connack = raw.connect(client_id, properties=Properties(**properties))
    assert isinstance(connack, ConnAck) and connack.return_code == 0, connack
    return raw, connack


def test_v5_v311_and_mqrfh2_share_one_topic_tree(broker: MqttBroker) -> None:
    five = Paho(broker.port, "five", protocol=paho.MQTTv5)
    assert five.connect() == (0, False)
    assert five.subscribe(("Plant/#", 1)) == [1]
    old = Paho(broker.port, "old")
    old.connect()
    old.subscribe(("Plant/#", 2))
    old.publish("Plant/a", b"from 3.1.1", 1)
    five.publish("Plant/b", b"from 5.0", 2)
    broker.qm.define_queue("PLANT.SUB")
    with BrokerClient(broker.qm, user_id="carol") as app:
        assert app.subscribe("Plant/#", "PLANT.SUB").ok
        five.publish("Plant/c", b"to MQRFH2", 1)
        assert app.receive("PLANT.SUB", wait=10).body == b"to MQRFH2"
        assert app.publish("Plant/d", b"from MQRFH2", persistence=MQPER_PERSISTENT).ok
    assert sorted(five.receive(4), key=lambda m: m.topic) == [
        Received("Plant/a", b"from 3.1.1", 1, False),
        Received("Plant/b", b"from 5.0", 1, False),
        Received("Plant/c", b"to MQRFH2", 1, False),
        Received("Plant/d", b"from MQRFH2", 1, False),
    ]
    assert sorted(m.payload for m in old.receive(4)) == [
        b"from 3.1.1",
        b"from 5.0",
        b"from MQRFH2",
        b"to MQRFH2",
    ]


def test_mosquitto_clients_at_5(broker: MqttBroker) -> None:
    mosquitto_pub(broker.port, "mqttv5", "News/kept", "retained one", 1, "-r")
    sub = mosquitto_sub(broker.port, "mqttv5", "News/#", 2, "-q", "2")
    assert sub.stdout is not None
    assert sub.stdout.readline().strip() == "1 News/kept retained one"
    mosquitto_pub(broker.port, "mqttv5", "News/live", "live", 2)
    out, _ = sub.communicate(timeout=20)
    assert out.strip() == "0 News/live live"
    assert sub.returncode == 0


def test_connack_assigns_an_identifier_and_tells_the_limits(broker: MqttBroker) -> None:
    _, connack = raw5(broker, "")
    properties = connack.properties
    assert (properties.assigned_client_identifier or "").startswith("auto-")
    assert properties.topic_alias_maximum == 10
    assert properties.receive_maximum == 500
    assert properties.maximum_packet_size == 4 * 1024 * 1024
    assert properties.shared_subscription_available is None  # offered
    assert properties.subscription_identifier_available is None  # offered
    with broker.qm.reading() as conn:
        stored = mqtt.find_session(conn, properties.assigned_client_identifier or "")
    assert stored is not None and stored.protocol_level == MQTT_5 and stored.clean


def test_refusals_carry_their_reason_codes(broker: MqttBroker) -> None:
    bad = Raw(broker.port, level=MQTT_5)
    assert bad.connect("bad", password=b"wrong") == ConnAck(False, ReasonCode.BAD_USER_NAME_OR_PASSWORD)
    method = Raw(broker.port, level=MQTT_5)
    assert method.connect("m", properties=Properties(authentication_method="SCRAM-SHA-1")) == ConnAck(
        False, ReasonCode.BAD_AUTHENTICATION_METHOD
    )
    raw, _ = raw5(broker)
    raw.send(Publish("$SYS/mine", b"no", 1, packet_id=1))
    assert raw.next() == PubAck(1, ReasonCode.NOT_AUTHORIZED)
    raw.send(Subscribe(2, (("ok/#", 1), ("$share/g/t", 1))))
    assert raw.next() == SubAck(2, (1, 1))  # shared subscriptions are offered
    raw.send(Unsubscribe(3, ("ok/#", "never")))
    assert raw.next() == UnsubAck(3, (0, 0))


def test_a_refused_qos2_publication_ends_its_exchange_and_its_id_numbers_the_next(broker: MqttBroker) -> None:
    watcher = Paho(broker.port, "watcher")
    watcher.connect()
    watcher.subscribe(("#", 2))
    raw, _ = raw5(broker)
    raw.send(Publish("$SYS/x", b"refused", 2, packet_id=5))
    assert raw.next().reason_code == ReasonCode.NOT_AUTHORIZED
    raw.send(Publish("fine", b"routed", 2, packet_id=5))
    assert raw.next().reason_code == ReasonCode.SUCCESS
    assert watcher.receive(1) == [Received("fine", b"routed", 2, False)]


def test_the_server_says_why_it_ends_a_connection(broker: MqttBroker) -> None:
    sleepy, _ = raw5(broker, "sleepy", session_expiry_interval=0)
    sleepy.sock.settimeout(10)
    raw, _ = raw5(broker, "first")
    Raw(broker.port, level=MQTT_5).connect("first")
    assert raw.next() == Disconnect(ReasonCode.SESSION_TAKEN_OVER)
    auth, _ = raw5(broker, "auth")
    auth.send(Auth(ReasonCode.RE_AUTHENTICATE, Properties(authentication_method="x")))
    assert auth.next() == Disconnect(ReasonCode.PROTOCOL_ERROR)
    alias, _ = raw5(broker, "alias")
    alias.send(Publish("t", b"", properties=Properties(topic_alias=11)))
    assert alias.next() == Disconnect(ReasonCode.TOPIC_ALIAS_INVALID)


def test_keepalive_expiry_is_told_and_the_will_published(broker: MqttBroker) -> None:
    watcher = Paho(broker.port, "watcher")
    watcher.connect()
    watcher.subscribe(("status/#", 1))
    raw = Raw(broker.port, level=MQTT_5)
    raw.connect("sleepy", keepalive=1, will=Will("status/sleepy", b"expired", 1, False))
    assert raw.next(timeout=5) == Disconnect(ReasonCode.KEEP_ALIVE_TIMEOUT)
    assert watcher.receive(1) == [Received("status/sleepy", b"expired", 1, False)]


def test_disconnect_with_will_message_publishes_the_will(broker: MqttBroker) -> None:
    watcher = Paho(broker.port, "watcher")
    watcher.connect()
    watcher.subscribe(("status/#", 1))
    raw = Raw(broker.port, level=MQTT_5)
    raw.connect("leaving", will=Will("status/leaving", b"bye", 1, False))
    raw.send(Disconnect(ReasonCode.DISCONNECT_WITH_WILL_MESSAGE))
    assert watcher.receive(1) == [Received("status/leaving", b"bye", 1, False)]


@pytest.mark.parametrize("expiry", [0, 300])
def test_the_session_lasts_its_expiry_interval(broker: MqttBroker, expiry: int) -> None:
    five = Paho(broker.port, "lasting", protocol=paho.MQTTv5, clean=False, session_expiry=expiry)
    assert five.connect() == (0, False)
    five.subscribe(("queued/#", 1))
    five.close()

    def stored() -> bool:
        with broker.qm.reading() as conn:
            return mqtt.find_session(conn, "lasting") is not None

    assert eventually(lambda: stored() == bool(expiry))
    pub = Paho(broker.port, "pub")
    pub.connect()
    pub.publish("queued/x", b"while away", 1)
    back = Paho(broker.port, "lasting", protocol=paho.MQTTv5, clean=False, session_expiry=expiry)
    assert back.connect() == (0, bool(expiry))
    if expiry:
        assert back.receive(1) == [Received("queued/x", b"while away", 1, False)]
    else:
        assert back.nothing_more()


def test_clean_start_discards_a_lasting_session(broker: MqttBroker) -> None:
    five = Paho(broker.port, "fresh", protocol=paho.MQTTv5, clean=False, session_expiry=300)
    five.connect()
    five.subscribe(("x", 1))
    five.close()
    again = Paho(broker.port, "fresh", protocol=paho.MQTTv5, clean=True, session_expiry=300)
    assert again.connect() == (0, False)
    assert not subscribed(broker, "fresh", "x")


def test_topic_aliases_name_the_topic_of_later_publications(broker: MqttBroker) -> None:
    watcher = Paho(broker.port, "watcher")
    watcher.connect()
    watcher.subscribe(("sensors/#", 0))
    raw, _ = raw5(broker)
    raw.send(
        Publish("sensors/long/name/temperature", b"20", properties=Properties(topic_alias=1)),
        Publish("", b"21", properties=Properties(topic_alias=1)),
    )
    assert watcher.receive(2) == [
        Received("sensors/long/name/temperature", b"20", 0, False),
        Received("sensors/long/name/temperature", b"21", 0, False),
    ]


def test_the_clients_receive_maximum_bounds_what_it_is_sent_unacknowledged(broker: MqttBroker) -> None:
    raw, _ = raw5(broker, "slow", receive_maximum=1, topic_alias_maximum=5, session_expiry_interval=90)
    raw.send(Subscribe(1, (("work", SubscriptionOptions.of(1)),)))
    assert isinstance(raw.next(), SubAck)
    with broker.qm.reading() as conn:
        stored = mqtt.find_session(conn, "slow")
    assert stored is not None  # for the console and broker mqtt sessions
    assert (stored.receive_maximum, stored.topic_alias_maximum, stored.expiry) == (1, 5, 90)
    pub = Paho(broker.port, "pub")
    pub.connect()
    for n in range(3):
        pub.publish("work", f"job {n}".encode(), 1)
    first = raw.next()
    assert isinstance(first, Publish) and first.payload == b"job 0"
    with pytest.raises(TimeoutError):
        raw.next(timeout=0.7)  # the second waits for the first's PUBACK
    raw.send(PubAck(first.packet_id or 0))
    second = raw.next()
    assert isinstance(second, Publish) and second.payload == b"job 1"


def test_a_delivery_over_the_clients_maximum_packet_size_is_dropped(broker: MqttBroker) -> None:
    raw, _ = raw5(broker, "small", maximum_packet_size=64)
    raw.send(Subscribe(1, (("big/#", SubscriptionOptions.of(1)),)))
    assert isinstance(raw.next(), SubAck)
    pub = Paho(broker.port, "pub")
    pub.connect()
    pub.publish("big/one", b"x" * 100, 1)
    pub.publish("big/two", b"small", 1)
    got = raw.next()
    assert isinstance(got, Publish) and (got.topic, got.payload) == ("big/two", b"small")
    assert eventually(lambda: broker.qm.inquire_queue(mqtt.queue_for("small")).depth == 0)


PROPERTIES = Properties(
    payload_format_indicator=1,
    message_expiry_interval=600,
    content_type="application/json",
    response_topic="replies/device-7",
    correlation_data=b"\x00\x01request-42",
    user_properties=(("site", "Hursley"), ("site", "Winchester"), ("odd name!", "\u00e9t\u00e9")),
)


def _sent(publish: Publish) -> Properties:
    """The properties a subscriber is sent, the Message Expiry Interval left aside (counted down)."""
    properties = publish.properties
    assert properties.message_expiry_interval is not None and 595 <= properties.message_expiry_interval <= 600
    return replace(properties, message_expiry_interval=600)


@pytest.mark.parametrize("online", [True, False], ids=["live", "queued"])
def test_publication_properties_reach_a_v5_subscriber(broker: MqttBroker, online: bool) -> None:
    sub, _ = raw5(broker, "props-sub", session_expiry_interval=300)
    sub.send(Subscribe(1, (("app/#", SubscriptionOptions.of(1)),)))
    assert isinstance(sub.next(), SubAck)
    if not online:
        sub.send(Disconnect())
        sub.close()
    pub, _ = raw5(broker, "props-pub")
    pub.send(Publish("app/x", b'{"t": 1}', 1, packet_id=1, properties=PROPERTIES))
    assert pub.next() == PubAck(1)
    if not online:
        sub = Raw(broker.port, level=MQTT_5)
        sub.connect("props-sub", clean=False, properties=Properties(session_expiry_interval=300))
    got = sub.next()
    assert isinstance(got, Publish) and got.payload == b'{"t": 1}'
    assert _sent(got) == PROPERTIES


def test_a_v311_subscriber_gets_the_publication_without_properties(broker: MqttBroker) -> None:
    old = Paho(broker.port, "old")
    old.connect()
    old.subscribe(("app/#", 1))
    pub, _ = raw5(broker, "props-pub")
    pub.send(Publish("app/x", b"body", 1, packet_id=1, properties=PROPERTIES))
    assert old.receive(1) == [Received("app/x", b"body", 1, False)]


def test_user_properties_are_the_usr_folder_both_ways(broker: MqttBroker) -> None:
    broker.qm.define_queue("PROPS.SUB")
    sub, _ = raw5(broker, "props-sub")
    sub.send(Subscribe(1, (("app/#", SubscriptionOptions.of(1)),)))
    assert isinstance(sub.next(), SubAck)
    with BrokerClient(broker.qm, user_id="carol") as app:
        assert app.subscribe("app/#", "PROPS.SUB").ok
        pub, _ = raw5(broker, "props-pub")
        pub.send(Publish("app/x", b"text", 1, packet_id=1, properties=PROPERTIES))
        received = app.receive("PROPS.SUB", wait=10)
        assert received.message.expiry > 5900  # tenths of a second left of 600 s
        [usr] = [folder for folder in received.folders if folder.startswith("<usr>")]
        assert "<site>Hursley</site><site>Winchester</site>" in usr
        assert sub.next().properties.user_properties == PROPERTIES.user_properties
        assert app.publish(
            "app/y", b"from MQ", folders=("<usr><colour>blue</colour></usr>",), persistence=MQPER_PERSISTENT
        ).ok
    got = sub.next()
    assert isinstance(got, Publish) and got.topic == "app/y"
    assert got.properties.user_properties == (("colour", "blue"),)


def test_subscription_options_qos_and_retain_handling(broker: MqttBroker) -> None:
    mosquitto_pub(broker.port, "mqttv5", "kept/a", "retained", 1, "-r")
    raw, _ = raw5(broker, "handling")
    every = SubscriptionOptions.of(1, retain_as_published=True, retain_handling=0)
    raw.send(Subscribe(1, (("kept/#", every),)))
    assert raw.next() == SubAck(1, (1,))  # the QoS alone, whatever the other bits
    assert raw.next().payload == b"retained"
    raw.send(Subscribe(2, (("kept/#", SubscriptionOptions.of(1, retain_handling=1)),)))
    assert raw.next() == SubAck(2, (1,))  # the subscription existed: nothing sent
    raw.send(Subscribe(3, (("kept/+", SubscriptionOptions.of(2, retain_handling=1)),)))
    assert raw.next() == SubAck(3, (2,))
    assert raw.next().payload == b"retained"  # a new one: sent
    raw.send(Subscribe(4, (("kept/a", SubscriptionOptions.of(0, retain_handling=2)),)))
    assert raw.next() == SubAck(4, (0,))
    with pytest.raises(TimeoutError):
        raw.next(timeout=0.7)


def test_a_delivery_sent_again_after_a_reconnection_keeps_its_properties(broker: MqttBroker) -> None:
    lasting = Properties(session_expiry_interval=300)
    sub = Raw(broker.port, level=MQTT_5)
    sub.connect("resumed", properties=lasting)
    sub.send(Subscribe(1, (("app/#", SubscriptionOptions.of(1)),)))
    assert isinstance(sub.next(), SubAck)
    pub, _ = raw5(broker, "props-pub")
    pub.send(Publish("app/x", b"unacknowledged", 1, packet_id=1, properties=PROPERTIES))
    first = sub.next()
    assert isinstance(first, Publish) and not first.dup
    sub.close()  # no PUBACK
    again = Raw(broker.port, level=MQTT_5)
    connack = again.connect("resumed", clean=False, properties=lasting)
    assert isinstance(connack, ConnAck) and (connack.session_present, connack.return_code) == (True, 0)
    resent = again.next()
    assert isinstance(resent, Publish) and resent.dup and resent.packet_id == first.packet_id
    assert _sent(resent) == PROPERTIES


def test_an_expired_session_is_not_resumed(broker: MqttBroker) -> None:
    five = Paho(broker.port, "brief", protocol=paho.MQTTv5, clean=False, session_expiry=1)
    five.connect()
    five.subscribe(("x", 1))
    five.close()
    assert subscribed(broker, "brief", "x")  # kept for a second
    time.sleep(1.5)
    back = Paho(broker.port, "brief", protocol=paho.MQTTv5, clean=False, session_expiry=1)
    assert back.connect() == (0, False)  # more than a second later: gone, as if removed
    assert not subscribed(broker, "brief", "x")


def test_a_disconnect_changes_the_stored_expiry(broker: MqttBroker) -> None:
    raw, _ = raw5(broker, "changing", session_expiry_interval=60)
    raw.send(Disconnect(properties=Properties(session_expiry_interval=7)))

    def stored_expiry() -> int | None:
        with broker.qm.reading() as conn:
            found = mqtt.find_session(conn, "changing")
        return None if found is None or found.online else found.expiry

    assert eventually(lambda: stored_expiry() == 7)


def test_an_expired_publication_is_never_delivered(broker: MqttBroker) -> None:
    lasting = Properties(session_expiry_interval=300)
    sub = Raw(broker.port, level=MQTT_5)
    sub.connect("away", properties=lasting)
    sub.send(Subscribe(1, (("news/#", SubscriptionOptions.of(1)),)))
    assert isinstance(sub.next(), SubAck)
    sub.send(Disconnect())
    sub.close()
    pub, _ = raw5(broker, "pub")
    pub.send(
        Publish(
            "news/stale", b"soon stale", 1, packet_id=1, properties=Properties(message_expiry_interval=1)
        ),
        Publish("news/fresh", b"kept", 1, packet_id=2, properties=Properties(message_expiry_interval=60)),
    )
    assert [pub.next(), pub.next()] == [PubAck(1), PubAck(2)]
    time.sleep(1.5)
    back = Raw(broker.port, level=MQTT_5)
    back.connect("away", clean=False, properties=lasting)
    got = back.next()
    assert isinstance(got, Publish) and got.topic == "news/fresh"
    assert (
        got.properties.message_expiry_interval is not None
        and 57 <= got.properties.message_expiry_interval <= 59
    )
    with pytest.raises(TimeoutError):
        back.next(timeout=0.5)


def test_no_local_keeps_a_clients_own_publications_from_it(broker: MqttBroker) -> None:
    raw, _ = raw5(broker, "chatty")
    raw.send(
        Subscribe(
            1,
            (
                ("room/+", SubscriptionOptions.of(1, no_local=True)),
                ("room/b", SubscriptionOptions.of(0)),  # matches room/b without No Local
            ),
        )
    )
    assert raw.next() == SubAck(1, (1, 0))
    raw.send(Publish("room/a", b"mine", 1, packet_id=1), Publish("room/b", b"mine too", 1, packet_id=2))
    other = Paho(broker.port, "other")
    other.connect()
    other.publish("room/a", b"theirs", 1)
    got = [raw.next() for _ in range(4)]
    publications = [(p.topic, p.payload, p.qos) for p in got if isinstance(p, Publish)]
    assert publications == [("room/b", b"mine too", 0), ("room/a", b"theirs", 1)]  # not room/a's own
    assert [p for p in got if isinstance(p, PubAck)] == [PubAck(1), PubAck(2)]


@pytest.mark.parametrize("online", [True, False], ids=["live", "queued"])
def test_retain_as_published_keeps_the_publishers_retain_flag(broker: MqttBroker, online: bool) -> None:
    lasting = Properties(session_expiry_interval=300)
    sub = Raw(broker.port, level=MQTT_5)
    sub.connect("keeper", properties=lasting)
    both = (
        ("flag/kept", SubscriptionOptions.of(1, retain_as_published=True)),
        ("flag/plain", SubscriptionOptions.of(1)),
    )
    sub.send(Subscribe(1, both))
    assert raw_suback(sub) == (1, 1)
    if not online:
        sub.send(Disconnect())
        sub.close()
    pub = Paho(broker.port, "pub")
    pub.connect()
    pub.publish("flag/kept", b"k", 1, retain=True)
    pub.publish("flag/plain", b"p", 1, retain=True)
    if not online:
        sub = Raw(broker.port, level=MQTT_5)
        sub.connect("keeper", clean=False, properties=lasting)
    got = sorted((p.topic, p.retain) for p in (sub.next(), sub.next()) if isinstance(p, Publish))
    assert got == [("flag/kept", True), ("flag/plain", False)]


def raw_suback(raw: Raw) -> tuple[int, ...]:
    answer = raw.next()
    assert isinstance(answer, SubAck)
    return answer.return_codes
