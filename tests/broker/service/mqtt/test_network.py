"""An MQTT subscriber on broker B receives what an MQTT client publishes on broker A: its
subscription is an ordinary one, which B registers with A as a proxy subscription."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.store import mqtt
from queues.ids import now_ms
from tests.broker.network.nodes import Node, free_port, wait_until
from tests.broker.service.mqtt.clients import PASSWORD, Paho, Received

TOKEN = "link-token-mqtt-0123456789abcdef"


@pytest.fixture
def nodes(database_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Node, Node]]:
    urls = [database_url]
    if database_url.startswith("sqlite"):
        urls.append(f"sqlite:///{tmp_path / 'b.db'}")
    else:
        urls.append(request.getfixturevalue("postgres").create())
    a = Node("QMA", urls[0], tmp_path, mqtt_port=free_port())
    b = Node("QMB", urls[1], tmp_path, mqtt_port=free_port())
    try:
        for node in (a, b):
            with node.qm.unit_of_work() as uow:
                mqtt.set_password(uow.connection, "alice", PASSWORD.encode(), now_ms())
            node.start()
        b.link(a, TOKEN)
        a.link(b, TOKEN)
        yield a, b
    finally:
        for node in (a, b):
            node.stop()


def test_an_mqtt_publication_on_a_reaches_an_mqtt_subscriber_on_b(nodes: tuple[Node, Node]) -> None:
    a, b = nodes
    assert a.mqtt_port is not None and b.mqtt_port is not None
    subscriber = Paho(b.mqtt_port, "on-b")
    subscriber.connect()
    assert subscriber.subscribe(("net/#", 1)) == [1]
    wait_until(lambda: ("net/#", "QMB") in a.proxies(), what="B's proxy subscription at A")
    publisher = Paho(a.mqtt_port, "on-a")
    publisher.connect()
    publisher.publish("net/news", b"across the network", 1)
    assert subscriber.receive(1, timeout=30) == [Received("net/news", b"across the network", 1, False)]
