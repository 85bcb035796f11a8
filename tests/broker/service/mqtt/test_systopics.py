"""The listener's status on $SYS topics: off by default, readable as the ACL permits, never
matched by ``#``."""

from __future__ import annotations

import time

from broker import store
from broker.core.authority import AclRule, Permission, PrincipalKind
from broker.protocol.mqtt import SUBACK_FAILURE
from tests.broker.service.mqtt.clients import MqttBroker, Paho
from tests.e2e.processes import Brokers


def test_status_is_published_to_those_allowed_to_subscribe_to_sys(brokers: Brokers) -> None:
    broker = MqttBroker(brokers, BROKER_MQTT_SYS_INTERVAL="1")
    with broker.qm.unit_of_work() as uow:
        store.add_acl_rule(
            uow.connection, AclRule("bob", PrincipalKind.USER, "$SYS/#", Permission.SUBSCRIBE, False)
        )
    bob = Paho(broker.port, "bob", user="bob")
    bob.connect()
    assert bob.subscribe(("$SYS/#", 0), ("#", 0)) == [SUBACK_FAILURE, 0]
    alice = Paho(broker.port, "alice")
    alice.connect()
    alice.subscribe(("$SYS/broker/#", 0))
    seen: dict[str, bytes] = {}
    deadline = time.monotonic() + 10
    while (
        seen.get("$SYS/broker/bytes/received", b"0") == b"0"
        or seen.get("$SYS/broker/clients/connected") != b"2"
    ):
        assert time.monotonic() < deadline, seen
        message = alice.receive(1)[0]  # the retained values of the first interval, then live ones
        seen[message.topic] = message.payload
    assert set(seen) == {
        f"$SYS/broker/{name}"
        for name in (
            "version",
            "uptime",
            "clients/connected",
            "messages/received",
            "messages/sent",
            "bytes/received",
            "bytes/sent",
        )
    }
    assert seen["$SYS/broker/uptime"].endswith(b" seconds")
    bob.publish("plain/topic", b"seen by bob's #", 0)
    assert [m.topic for m in bob.receive(1)] == ["plain/topic"]
    assert bob.nothing_more(wait=1.5)  # two intervals: no $SYS publication matched "#"


def test_no_status_unless_an_interval_is_set(broker: MqttBroker) -> None:
    alice = Paho(broker.port, "alice")
    alice.connect()
    assert alice.subscribe(("$SYS/#", 0)) == [0]
    assert alice.nothing_more(wait=1.5)
