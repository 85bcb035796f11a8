"""MQTT 5.0 wills on the listener: their properties reach a paho-mqtt v5 subscriber and an MQRFH2
application as a PUBLISH's do, and a will with a Will Delay Interval waits, kept with its session,
until its delay ends or its session does, unless its client is back first; on SQLite and
PostgreSQL, through a restart of the broker too."""

from __future__ import annotations

import queue
import time
from dataclasses import replace
from typing import Any

import paho.mqtt.client as paho
import pytest

from broker.client import BrokerClient
from broker.protocol.mqtt import MQTT_5, NO_PROPERTIES, ConnAck, Disconnect, Properties, ReasonCode, Will
from broker.store import mqtt
from queues.errors import MQError
from queues.message import MQFMT_STRING
from tests.broker.service.mqtt.clients import PASSWORD, MqttBroker, Paho, Raw, Received, eventually

PROPERTIES = Properties(
    payload_format_indicator=1,
    message_expiry_interval=600,
    content_type="text/plain",
    response_topic="replies/device-7",
    correlation_data=b"\x00\x01will",
    user_properties=(("site", "Hursley"), ("site", "Winchester")),
)
LASTING = 300  # seconds: a session that outlives its connection


def leaving(
    broker: MqttBroker,
    client_id: str,
    *,
    delay: int | None = None,
    expiry: int = LASTING,
    properties: Properties = NO_PROPERTIES,
) -> Raw:
    """A raw MQTT 5.0 client with a will on ``status/<client_id>`` (Will Delay Interval ``delay``)
    and a session of Session Expiry Interval ``expiry``."""
    raw = Raw(broker.port, level=MQTT_5)
    will = Will(f"status/{client_id}", b"gone", 1, False, replace(properties, will_delay_interval=delay))
    connack = raw.connect(client_id, will=will, properties=Properties(session_expiry_interval=expiry))
    assert isinstance(connack, ConnAck) and connack.return_code == 0, connack
    return raw


def watcher(broker: MqttBroker) -> Paho:
    found = Paho(broker.port, "watcher")
    found.connect()
    found.subscribe(("status/#", 1))
    return found


def stored_will_due(broker: MqttBroker, client_id: str) -> int | None:
    with broker.qm.reading() as conn:
        stored = mqtt.find_session(conn, client_id)
    return None if stored is None else stored.will_due


class V5Subscriber:
    """A paho-mqtt v5 client that keeps each message with its properties."""

    def __init__(self, port: int, topic: str) -> None:
        self.messages: queue.Queue[Any] = queue.Queue()
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="v5-sub", protocol=paho.MQTTv5)
        self.client.username_pw_set("alice", PASSWORD)
        subscribed: queue.Queue[object] = queue.Queue()
        self.client.on_message = lambda _c, _u, message: self.messages.put(message)
        self.client.on_subscribe = lambda *args: subscribed.put(args)
        self.client.on_connect = lambda *_: self.client.subscribe(topic, 1)
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        subscribed.get(timeout=10)

    def next(self) -> Any:
        return self.messages.get(timeout=10)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def test_will_properties_reach_a_v5_subscriber_and_an_mqrfh2_application(broker: MqttBroker) -> None:
    subscriber = V5Subscriber(broker.port, "status/#")
    broker.qm.define_queue("WILLS.SUB")
    with BrokerClient(broker.qm, user_id="carol") as app:
        assert app.subscribe("status/#", "WILLS.SUB").ok
        leaving(broker, "device-7", expiry=0, properties=PROPERTIES).close()  # lost: the will goes at once
        message = subscriber.next()
        assert (message.topic, message.payload, message.qos) == ("status/device-7", b"gone", 1)
        sent = message.properties
        assert sent.PayloadFormatIndicator == 1
        assert sent.ContentType == "text/plain"
        assert sent.ResponseTopic == "replies/device-7"
        assert sent.CorrelationData == b"\x00\x01will"
        assert sent.UserProperty == [("site", "Hursley"), ("site", "Winchester")]
        assert 595 <= sent.MessageExpiryInterval <= 600
        assert not hasattr(sent, "WillDelayInterval")
        received = app.receive("WILLS.SUB", wait=10)
        assert received.body == b"gone" and received.payload_format == MQFMT_STRING
        assert 5900 < received.message.expiry <= 6000  # tenths of a second left of 600 s
        [carried] = [folder for folder in received.folders if folder.startswith("<mqtt>")]
        for element in ("<ct>text/plain</ct>", "<rt>replies/device-7</rt>", "<cd>000177696c6c</cd>"):
            assert element in carried
        [usr] = [folder for folder in received.folders if folder.startswith("<usr>")]
        assert usr == "<usr><site>Hursley</site><site>Winchester</site></usr>"
    subscriber.close()


def test_a_delayed_will_is_published_once_its_delay_has_passed(broker: MqttBroker) -> None:
    status = watcher(broker)
    gone_at = time.monotonic()
    leaving(broker, "late", delay=2).close()
    assert eventually(lambda: stored_will_due(broker, "late") is not None)  # kept with the session
    assert status.nothing_more(1.0)
    assert status.receive(1, timeout=5) == [Received("status/late", b"gone", 1, False)]
    assert time.monotonic() - gone_at >= 2
    assert stored_will_due(broker, "late") is None  # published once, and forgotten
    assert status.nothing_more(1.5)


def test_a_delayed_will_is_not_published_if_its_client_comes_back_in_time(broker: MqttBroker) -> None:
    status = watcher(broker)
    leaving(broker, "back", delay=3).close()
    assert eventually(lambda: stored_will_due(broker, "back") is not None)
    again = Raw(broker.port, level=MQTT_5)
    connack = again.connect("back", clean=False, properties=Properties(session_expiry_interval=LASTING))
    assert isinstance(connack, ConnAck) and connack.session_present
    assert stored_will_due(broker, "back") is None
    assert status.nothing_more(4.5)


def test_a_delayed_will_is_published_when_clean_start_ends_its_session(broker: MqttBroker) -> None:
    status = watcher(broker)
    leaving(broker, "restarted", delay=60).close()
    assert eventually(lambda: stored_will_due(broker, "restarted") is not None)
    again = Raw(broker.port, level=MQTT_5)
    connack = again.connect("restarted", clean=True, properties=Properties(session_expiry_interval=LASTING))
    assert isinstance(connack, ConnAck) and not connack.session_present
    assert status.receive(1, timeout=5) == [Received("status/restarted", b"gone", 1, False)]


def test_a_delayed_will_goes_when_its_session_expires_first(broker: MqttBroker) -> None:
    status = watcher(broker)
    gone_at = time.monotonic()
    leaving(broker, "brief", delay=600, expiry=2).close()
    assert status.nothing_more(1.0)
    assert status.receive(1, timeout=5) == [Received("status/brief", b"gone", 1, False)]
    assert time.monotonic() - gone_at >= 2


def test_disconnect_with_will_message_respects_the_delay_and_a_normal_one_drops_the_will(
    broker: MqttBroker,
) -> None:
    status = watcher(broker)
    polite = leaving(broker, "polite", delay=30)
    polite.send(Disconnect())
    assert polite.closed_by_broker()
    with_will = leaving(broker, "with-will", delay=2)
    with_will.send(Disconnect(ReasonCode.DISCONNECT_WITH_WILL_MESSAGE))
    assert with_will.closed_by_broker()
    assert eventually(lambda: stored_will_due(broker, "with-will") is not None)
    assert stored_will_due(broker, "polite") is None
    assert status.nothing_more(1.0)
    assert status.receive(1, timeout=5) == [Received("status/with-will", b"gone", 1, False)]
    assert status.nothing_more(1.0)


@pytest.mark.parametrize("connected", [True, False], ids=["connected", "gone"])
def test_a_delayed_will_outlives_the_listener(broker: MqttBroker, connected: bool) -> None:
    """Its client connected when the broker dies (the next start releases the session, the will
    due from then) or gone already (the will stored, due): either way it is published after the
    restart, properties and all."""
    broker.qm.define_queue("WILLS.SUB")
    with BrokerClient(broker.qm, user_id="carol") as app:
        assert app.subscribe("status/#", "WILLS.SUB").ok
        raw = leaving(broker, "survivor", delay=2, properties=PROPERTIES)
        if not connected:
            raw.close()
            assert eventually(lambda: stored_will_due(broker, "survivor") is not None)
        broker.restart()
        received = app.receive("WILLS.SUB", wait=20)
        assert (received.topic, received.body) == ("status/survivor", b"gone")
        assert "<rt>replies/device-7</rt>" in next(f for f in received.folders if f.startswith("<mqtt>"))
        with pytest.raises(MQError):
            app.receive("WILLS.SUB", wait=1.5)  # once
