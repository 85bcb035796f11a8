"""The listener in process, its gateway thread within reach: which answers wait for the
gateway's durable work and which need none."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from broker.bench.processes import free_port
from broker.protocol.mqtt.packets import PubComp, Publish, PubRec, PubRel, SubAck, Subscribe
from broker.service.config import Settings
from broker.service.metrics import BrokerMetrics
from broker.service.mqtt.listener import MqttListener
from broker.service.mqtt.transports import Endpoint
from broker.service.provision import ensure_system_queues
from queues import QueueManager
from tests.broker.service.mqtt.clients import Raw

HELD_SECONDS = 10.0


@pytest.fixture
def listener(qm: QueueManager) -> Iterator[MqttListener]:
    """A listener on a free port of 127.0.0.1, admitting anonymous clients as ``alice``."""
    settings = Settings(mqtt_anonymous="alice")
    served = MqttListener(qm, settings, [Endpoint("mqtt", "127.0.0.1", free_port())], BrokerMetrics())
    ensure_system_queues(qm, served.gateway.writer.config.streams)
    thread = threading.Thread(target=served.run, name="listener")
    thread.start()
    assert served.ready.wait(30)
    try:
        yield served
    finally:
        served.stop()
        thread.join(30)


def hold_gateway(listener: MqttListener) -> threading.Event:
    """Keep the gateway's thread busy until the event returned is set: every job waits."""
    holding, release = threading.Event(), threading.Event()

    def hold(_: object) -> None:
        holding.set()
        release.wait(HELD_SECONDS)

    loop = listener._loop
    assert loop is not None
    loop.call_soon_threadsafe(listener.gateway.submit, hold)
    assert holding.wait(HELD_SECONDS)
    return release


def client(listener: MqttListener, client_id: str, *, clean: bool) -> Raw:
    raw = Raw(listener.endpoints[0].port)
    raw.connect(client_id, clean=clean, user=None)
    return raw


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "persistent"])
def test_a_qos2_exchange_waits_for_the_gateway_only_where_the_session_stores_it(
    listener: MqttListener, clean: bool
) -> None:
    """A session that ends with its connection records neither the QoS 2 ids its client
    publishes with nor the deliveries in flight to it: its PUBCOMP and PUBREL are answered
    at once, however busy the gateway is; a persistent session's wait for their record."""
    raw = client(listener, "q2", clean=clean)
    raw.send(Subscribe(1, (("q2/#", 2),)))
    assert isinstance(raw.next(), SubAck)
    raw.send(Publish("q2/a", b"one", qos=2, packet_id=7))
    answers = [raw.next(), raw.next()]  # the PUBREC and the delivery, in either order
    assert PubRec(7) in answers
    [delivery] = [p for p in answers if isinstance(p, Publish)]
    assert delivery.packet_id is not None
    release = hold_gateway(listener)
    try:
        raw.send(PubRel(7), PubRec(delivery.packet_id))
        if clean:
            assert [raw.next(), raw.next()] == [PubComp(7), PubRel(delivery.packet_id)]
        else:
            with pytest.raises(TimeoutError):
                raw.next(timeout=0.5)
    finally:
        release.set()
    if not clean:
        assert [raw.next(), raw.next()] == [PubComp(7), PubRel(delivery.packet_id)]
    raw.send(PubComp(delivery.packet_id))
    raw.close()
