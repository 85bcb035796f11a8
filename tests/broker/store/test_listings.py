"""broker.store.listings: subscriptions and retained publications as operators page through them."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from broker import store
from broker.core.effects import AddSubscription, SetRetained
from broker.core.subscription import Subscription
from broker.store import SubscriptionFilter, mqtt
from broker.store.listings import MQRFH2, MQTT
from tests.broker.store.records import (
    Process,
    published,
    sub,
)

# -- listings ----------------------------------------------------------------------------------


@pytest.fixture
def listed(a: Process) -> list[Subscription]:
    subs = [
        sub("Sport/Soccer", "Q1", user="alice", seq=1),
        sub("Sport/Tennis", "Q2", user="bob", seq=2),
        sub("News/Today", "Q1", user="bob", seq=3),
        sub("Sport/#", "Q3", user="alice", sub_point="Pounds", seq=4),
        sub("Sport_Extra/x", "Q2", user="carol", seq=5),
        sub("Weather/Soccer", "Q2", user="carol", seq=6),
        sub("Sport/Soccer", "Q4", user="dave", correl_id=b"\x07" * 24, seq=7),
    ]
    a.write(*(AddSubscription(s) for s in subs))
    return subs


def page(
    engine: Engine, where: SubscriptionFilter, after: int = 0, limit: int = 100
) -> list[tuple[int, str]]:
    with engine.connect() as conn:
        found = store.list_subscriptions(conn, where, after_id=after, limit=limit)
    return [(i, f"{s.key.topic}@{s.identity.queue}") for i, s in found]


def test_listing_by_protocol_tells_mqtt_sessions_by_their_queues(engine: Engine, a: Process) -> None:
    device = mqtt.queue_for("device")
    a.write(
        AddSubscription(sub("Sport/#", device, user="alice", seq=1)),
        AddSubscription(sub("Sport/#", "SYSTEM.MQTTISH", user="bob", seq=2)),  # not SYSTEM.MQTT.
        AddSubscription(sub("News/#", "APP.IN", user="bob", seq=3)),
    )
    names = lambda protocol: [t for _, t in page(engine, SubscriptionFilter(protocol=protocol))]  # noqa: E731
    assert names(MQTT) == [f"Sport/#@{device}"]
    assert names(MQRFH2) == ["Sport/#@SYSTEM.MQTTISH", "News/#@APP.IN"]
    assert [t for _, t in page(engine, SubscriptionFilter(protocol=MQTT, topic="News/#"))] == []


def test_listing_filters(engine: Engine, listed: list[Subscription]) -> None:
    everything = page(engine, SubscriptionFilter())
    assert [t for _, t in everything] == [f"{s.key.topic}@{s.identity.queue}" for s in listed]
    names = lambda where: [t for _, t in page(engine, where)]  # noqa: E731
    assert names(SubscriptionFilter(topic="Sport/#")) == [
        "Sport/Soccer@Q1",
        "Sport/Tennis@Q2",
        "Sport/#@Q3",
        "Sport/Soccer@Q4",
    ]
    assert names(SubscriptionFilter(topic="+/Soccer")) == [
        "Sport/Soccer@Q1",
        "Weather/Soccer@Q2",
        "Sport/Soccer@Q4",
    ]
    assert names(SubscriptionFilter(topic="Sport_Extra/#")) == ["Sport_Extra/x@Q2"]
    assert names(SubscriptionFilter(queue="Q2")) == [
        "Sport/Tennis@Q2",
        "Sport_Extra/x@Q2",
        "Weather/Soccer@Q2",
    ]
    assert names(SubscriptionFilter(user_id="bob")) == ["Sport/Tennis@Q2", "News/Today@Q1"]
    assert names(SubscriptionFilter(sub_point="Pounds")) == ["Sport/#@Q3"]
    assert names(SubscriptionFilter(topic="Sport/#", user_id="alice", sub_point="")) == ["Sport/Soccer@Q1"]
    assert names(SubscriptionFilter(q_mgr="QM2")) == []


def test_listing_tells_proxy_subscriptions_from_local_ones(engine: Engine, a: Process) -> None:
    a.write(
        AddSubscription(sub("Sport/Soccer", "Q1", seq=1)),
        AddSubscription(sub("Sport/Soccer", "QMB.PROXY", origin="QMB", seq=2)),
    )
    assert [t for _, t in page(engine, SubscriptionFilter(proxy=True))] == ["Sport/Soccer@QMB.PROXY"]
    assert [t for _, t in page(engine, SubscriptionFilter(proxy=False))] == ["Sport/Soccer@Q1"]
    assert len(page(engine, SubscriptionFilter())) == 2


def test_mqtt_clients_are_found_by_their_session_queues(engine: Engine) -> None:
    with engine.begin() as conn:
        for client_id in ("sensor/1", "sensor 2"):
            session = mqtt.StoredSession(client_id, mqtt.queue_for(client_id), "alice", False, 4, "a:1", 1, 1)
            mqtt.save_session(conn, session)
    queues = [mqtt.queue_for("sensor/1"), mqtt.queue_for("gone"), "APP.IN", mqtt.queue_for("sensor 2")]
    with engine.connect() as conn:
        assert store.mqtt_clients(conn, queues) == {queues[0]: "sensor/1", queues[3]: "sensor 2"}
        assert store.mqtt_clients(conn, ["APP.IN"]) == {}


def test_listing_pages_by_key(engine: Engine, listed: list[Subscription]) -> None:
    where = SubscriptionFilter(topic="+/Soccer")
    first = page(engine, where, limit=2)
    assert [t for _, t in first] == ["Sport/Soccer@Q1", "Weather/Soccer@Q2"]
    second = page(engine, where, after=first[-1][0], limit=2)
    assert [t for _, t in second] == ["Sport/Soccer@Q4"]
    assert page(engine, where, after=second[-1][0], limit=2) == []
    # Pages of one: the filter skips non-matching rows between the pages.
    ids = []
    cursor = 0
    while found := page(engine, SubscriptionFilter(topic="Weather/#"), after=cursor, limit=1):
        cursor = found[-1][0]
        ids.append(found[0][1])
    assert ids == ["Weather/Soccer@Q2"]


def test_count_and_get_subscription(engine: Engine, listed: list[Subscription]) -> None:
    with engine.connect() as conn:
        assert store.count_subscriptions(conn) == 7
        first_id = store.list_subscriptions(conn, SubscriptionFilter(queue="Q4"))[0][0]
        assert store.get_subscription(conn, first_id) == listed[6]
        assert store.get_subscription(conn, first_id + 1000) is None


def test_retained_listing_filters_and_pages(engine: Engine, a: Process) -> None:
    topics = ["Sport/Soccer/A", "Sport/Tennis/B", "News/C", "Sport/Soccer/D", "Sport_X/E"]
    a.write(
        *(SetRetained(published(t, t.encode())) for t in topics),
        SetRetained(published("Sport/Golf", sub_point="Pounds")),
    )
    with engine.connect() as conn:
        listed = lambda *args, **kw: [p.topic for _, p in store.list_retained(conn, *args, **kw)]  # noqa: E731
        assert listed("Sport/#") == ["Sport/Soccer/A", "Sport/Tennis/B", "Sport/Soccer/D", "Sport/Golf"]
        assert listed("Sport/#", "") == ["Sport/Soccer/A", "Sport/Tennis/B", "Sport/Soccer/D"]
        assert listed("Sport/#", "Pounds") == ["Sport/Golf"]
        assert listed("+/Soccer/+") == ["Sport/Soccer/A", "Sport/Soccer/D"]
        assert listed("Sport_X/#") == ["Sport_X/E"]
        first = store.list_retained(conn, "+/Soccer/+", limit=1)
        assert [p.topic for _, p in first] == ["Sport/Soccer/A"]
        assert listed("+/Soccer/+", after_id=first[0][0], limit=1) == ["Sport/Soccer/D"]
        ((_, pub),) = store.list_retained(conn, "News/C")
    assert pub.rfh2.payload == b"News/C"


# -- ACL rules and groups ----------------------------------------------------------------------
