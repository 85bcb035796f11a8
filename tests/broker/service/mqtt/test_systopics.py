"""The listener's status on $SYS topics: off by default, readable as the ACL permits, never
matched by ``#``."""

from __future__ import annotations

import socket
import time

from broker import store
from broker.core.authority import AclRule, Permission, PrincipalKind
from broker.protocol.mqtt import SUBACK_FAILURE, ConnAck, PubAck, Publish, Will
from tests.broker.service.mqtt.clients import MqttBroker, Paho, Raw, eventually
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
    values = (
        "version",
        "uptime",
        "clients/connected",
        "messages/received",
        "messages/sent",
        "bytes/received",
        "bytes/sent",
        "logins/failed",
        "logins/throttled",
        "throttled/users",
        "throttled/addresses",
    )
    node = f"{socket.gethostname()}:{broker.port}"  # the default node name
    # The cluster's totals (of one node here), how many nodes, and the node's own values.
    names = {f"$SYS/broker/{name}" for name in values} | {"$SYS/broker/nodes/count"}
    names |= {f"$SYS/broker/nodes/{node}/{name}" for name in values}
    seen: dict[str, bytes] = {}
    deadline = time.monotonic() + 10
    while (
        seen.get("$SYS/broker/bytes/received", b"0") == b"0"
        or seen.get("$SYS/broker/clients/connected") != b"2"
        or seen.get(f"$SYS/broker/nodes/{node}/clients/connected") != b"2"
        or not names <= set(seen)
    ):
        assert time.monotonic() < deadline, seen
        message = alice.receive(1)[0]  # the retained values of the first interval, then live ones
        seen[message.topic] = message.payload
    assert set(seen) == names
    assert seen["$SYS/broker/uptime"].endswith(b" seconds")
    assert seen["$SYS/broker/nodes/count"] == b"1"
    bob.publish("plain/topic", b"seen by bob's #", 0)
    assert [m.topic for m in bob.receive(1)] == ["plain/topic"]
    assert bob.nothing_more(wait=1.5)  # two intervals: no $SYS publication matched "#"


def test_no_status_unless_an_interval_is_set(broker: MqttBroker) -> None:
    alice = Paho(broker.port, "alice")
    alice.connect()
    assert alice.subscribe(("$SYS/#", 0)) == [0]
    assert alice.nothing_more(wait=1.5)


def test_no_client_publishes_on_a_dollar_topic_whatever_the_policy(broker: MqttBroker) -> None:
    """MQTT 3.1.1 4.7.2: topics starting with ``$`` are the server's. Under the default policy
    (allow), a client's PUBLISH there, retained or not, and its will are refused (acknowledged,
    since 3.1.1 has no negative PUBACK, and dropped), logged and counted as such; nothing is
    retained, and the status the broker publishes stays its own."""
    reader = Paho(broker.port, "reader")
    reader.connect()
    assert reader.subscribe(("$SYS/#", 1), ("ok/#", 1)) == [1, 1]
    forger = Raw(broker.port)
    assert forger.connect("forger", will=Will("$SYS/broker/clients/connected", b"0", 1, True)) == ConnAck(
        False, 0
    )
    forger.send(
        Publish("$SYS/broker/version", b"fake 9.9", 1, retain=True, packet_id=1),
        Publish("$anything/else", b"fake", 0),
        Publish("ok/after", b"fine", 1, packet_id=2),
    )
    assert {forger.next(), forger.next()} == {PubAck(1), PubAck(2)}
    forger.close()  # without DISCONNECT: its will would go now
    assert [(m.topic, m.payload) for m in reader.receive(1)] == [("ok/after", b"fine")]
    assert eventually(
        lambda: len(broker.process.lines("mqtt publication refused: $ topics are the broker's")) == 3
    )
    assert reader.nothing_more(wait=1.0)
    late = Paho(broker.port, "late")
    late.connect()
    assert late.subscribe(("$SYS/#", 0)) == [0]
    assert late.nothing_more(wait=1.0)  # nothing was retained
    reader.close()
    late.close()
