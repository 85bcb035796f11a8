"""MQTT 5.0 Subscription Identifiers in the session rules: offered in the CONNACK, and a
SUBSCRIBE carrying one registered as it came (the gateway stores it with each filter)."""

from __future__ import annotations

from broker.protocol.mqtt.packets import MQTT_5, ConnAck, Connect, Properties, Subscribe
from broker.protocol.mqtt.session import Open, Register, Send, Session


def opened_v5() -> tuple[Session, ConnAck]:
    session = Session(0.0, new_client_id=lambda: "x")
    [open_] = session.receive(Connect("MQTT", MQTT_5, "c5", True, 0), 0.0)
    assert isinstance(open_, Open)
    [sent] = session.opened(False, (), ())
    assert isinstance(sent, Send) and isinstance(sent.packet, ConnAck)
    return session, sent.packet


def test_the_connack_leaves_subscription_identifiers_available() -> None:
    _, connack = opened_v5()
    assert connack.properties.subscription_identifier_available is None  # absent: available


def test_a_subscribe_with_an_identifier_is_registered_with_it() -> None:
    session, _ = opened_v5()
    packet = Subscribe(4, (("a/#", 1), ("b", 0)), Properties(subscription_identifiers=(268_435_455,)))
    assert session.receive(packet, 1.0) == [Register(packet)]
    assert packet.subscription_identifier == 268_435_455
    assert Subscribe(5, (("a", 0),)).subscription_identifier == 0  # none
