"""Persistent sessions (CleanSession=0) across disconnections and broker restarts."""

from __future__ import annotations

import time

import pytest

from broker import store
from broker.protocol.mqtt import (
    ConnAck,
    Disconnect,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
)
from broker.store import mqtt as sessions
from queues import QueueManager
from tests.broker.service.mqtt.clients import MqttBroker, Paho, Raw, Received, eventually


@pytest.mark.parametrize("kill", [True, False], ids=["SIGKILL", "SIGTERM"])
def test_qos2_is_routed_exactly_once_across_a_restart(broker: MqttBroker, kill: bool) -> None:
    sub = Paho(broker.port, "sub", clean=False)
    sub.connect()
    sub.subscribe(("meter/#", 2))
    raw = Raw(broker.port)
    assert raw.connect("meter", clean=False) == ConnAck(False, 0)
    raw.send(Publish("meter/1", b"42 kWh", 2, packet_id=7))
    assert raw.next() == PubRec(7)
    assert sub.receive(1) == [Received("meter/1", b"42 kWh", 2, False)]
    sub.close()
    broker.restart(kill=kill)
    raw = Raw(broker.port)
    assert raw.connect("meter", clean=False) == ConnAck(True, 0)
    raw.send(Publish("meter/1", b"42 kWh", 2, dup=True, packet_id=7))  # the PUBREC was lost
    assert raw.next() == PubRec(7)
    raw.send(PubRel(7))
    assert raw.next() == PubComp(7)
    raw.send(Publish("meter/1", b"43 kWh", 2, packet_id=7))  # released: a new message
    assert raw.next() == PubRec(7)
    sub = Paho(broker.port, "sub", clean=False)
    assert sub.connect() == (0, True)
    assert sub.receive(1) == [Received("meter/1", b"43 kWh", 2, False)]  # 42 kWh never twice
    assert sub.nothing_more()


def test_a_persistent_session_keeps_subscriptions_and_messages_across_a_restart(broker: MqttBroker) -> None:
    raw = Raw(broker.port)
    raw.connect("phone", clean=False)
    raw.send(Subscribe(1, (("chat/#", 2), ("alerts", 1))))
    assert raw.next() == SubAck(1, (2, 1))
    pub = Paho(broker.port, "pub")
    pub.connect()
    pub.publish("chat/a", b"one", 1)
    first = raw.next()
    assert isinstance(first, Publish) and first.payload == b"one" and not first.dup
    pub.publish("chat/b", b"two", 2)
    second = raw.next()
    assert isinstance(second, Publish) and second.payload == b"two"
    raw.send(PubRec(second.packet_id))  # type: ignore[arg-type]
    assert raw.next() == PubRel(second.packet_id)  # type: ignore[arg-type]
    raw.close()  # neither acknowledged completely
    pub.publish("alerts", b"three", 2)  # queued meanwhile, delivered at QoS 1
    pub.publish("other", b"not subscribed", 1)
    pub.close()
    broker.restart(kill=True)
    assert sessions.queue_for("phone") in {q.name for q in broker.qm.list_queues("SYSTEM.MQTT.*")}
    raw = Raw(broker.port)
    assert raw.connect("phone", clean=False) == ConnAck(True, 0)
    assert raw.next() == Publish("chat/a", b"one", 1, dup=True, packet_id=first.packet_id)
    assert raw.next() == PubRel(second.packet_id)  # type: ignore[arg-type]
    third = raw.next()
    assert isinstance(third, Publish) and (third.payload, third.qos) == (b"three", 1)
    raw.send(PubAck(first.packet_id), PubComp(second.packet_id), PubAck(third.packet_id))  # type: ignore[arg-type]
    raw.close()
    raw = Raw(broker.port)
    assert raw.connect("phone", clean=False) == ConnAck(True, 0)
    assert not raw.closed_by_broker(timeout=1.0)  # nothing more to send


def test_a_clean_session_leaves_nothing_behind(broker: MqttBroker) -> None:
    sub = Paho(broker.port, "tidy")
    sub.connect()
    sub.subscribe(("x/#", 1))
    with broker.qm.reading() as conn:
        assert [s.client_id for s in sessions.list_sessions(conn)] == ["tidy"]
        (only,) = [sub for _, sub in store.list_subscriptions(conn, store.SubscriptionFilter(), limit=10)]
        assert (only.key.topic, only.identity.queue) == ("x/#", sessions.queue_for("tidy"))
    sub.close()
    again = Paho(broker.port, "tidy", clean=False)
    assert again.connect() == (0, False)  # session present tells the truth
    again.close()
    resumed = Paho(broker.port, "tidy", clean=False)
    assert resumed.connect() == (0, True)
    resumed.close()
    cleaned = Paho(broker.port, "tidy")
    assert cleaned.connect() == (0, False)
    cleaned.close()
    assert eventually(lambda: _leftovers(broker) == (0, [], []))


def _leftovers(broker: MqttBroker) -> tuple[int, list[str], list[str]]:
    with broker.qm.reading() as conn:
        subscriptions = store.count_subscriptions(conn)
        stored = [s.client_id for s in sessions.list_sessions(conn)]
    return subscriptions, stored, [q.name for q in broker.qm.list_queues("SYSTEM.MQTT.*")]


def test_a_clean_session_reconnecting_at_once_finds_the_previous_one_ended(broker: MqttBroker) -> None:
    for _ in range(5):
        raw = Raw(broker.port)
        assert raw.connect("quick") == ConnAck(False, 0)
        raw.send(Subscribe(1, (("fast/#", 1),)))
        assert raw.next() == SubAck(1, (1,))
        raw.send(Disconnect())
        raw.close()
    raw = Raw(broker.port)
    raw.connect("quick")
    raw.send(Subscribe(1, (("fast/#", 1),)))
    assert raw.next() == SubAck(1, (1,))
    pub = Paho(broker.port, "pub")
    pub.connect()
    pub.publish("fast/x", b"delivered", 1)
    received = raw.next()
    assert isinstance(received, Publish) and received.payload == b"delivered"


def test_a_message_put_on_a_session_queue_without_a_wake_up_still_reaches_its_client(
    broker: MqttBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that announces nothing (another program, a lost notification): the listener
    hears that something changed (SQLite's backstop reading of the database, PostgreSQL's
    LISTEN connection coming back) and the depth counters say which session queue to drain."""
    from broker.service.mqtt import translation
    from queues import sql

    raw = Raw(broker.port)
    assert raw.connect("device", clean=False) == ConnAck(False, 0)
    raw.send(Subscribe(1, (("cmd/#", 1),)))
    assert raw.next() == SubAck(1, (1,))
    qm = broker.qm
    postgresql = qm.engine.dialect.name == "postgresql"
    if postgresql:  # its first look, once listening, is over before the put below
        assert eventually(lambda: _listening(qm) >= 1)
        time.sleep(1)
    monkeypatch.setattr(qm.notifier, "committed", lambda queues: None)
    monkeypatch.setattr(sql, "notify_arrivals", lambda conn, queues: None)
    monkeypatch.setattr(sql, "_carries", lambda params, arrivals: False)
    qm.put(sessions.queue_for("device"), translation.publication(Publish("cmd/x", b"quiet", 1), "alice"))
    if postgresql:
        with pytest.raises(TimeoutError):
            raw.next(timeout=1.5)  # nothing announced it
        assert _listening(qm, end=True) >= 1  # the listener's LISTEN connection ends, and comes back
    delivered = raw.next()
    assert isinstance(delivered, Publish)
    assert (delivered.topic, delivered.payload, delivered.qos) == ("cmd/x", b"quiet", 1)
    raw.send(PubAck(delivered.packet_id or 0))
    raw.close()


def _listening(qm: QueueManager, *, end: bool = False) -> int:
    """How many sessions of the broker's database LISTEN for arrivals (ended, with ``end``)."""
    counted = "pg_terminate_backend(pid)" if end else "pid"
    with qm.reading() as conn:
        return int(
            conn.exec_driver_sql(
                f"SELECT count({counted}) FROM pg_stat_activity"
                " WHERE query LIKE 'LISTEN%%' AND datname = current_database()"
            ).scalar_one()
        )
