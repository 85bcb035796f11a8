"""MQTT's commands as MQRFH2 messages: a SUBSCRIBE's registration is handed to the engine typed,
and routes exactly as the message it stands for would when parsed."""

from __future__ import annotations

import pytest

from broker.core import engine
from broker.protocol import psc, rfh2
from broker.protocol.options import RegOpt
from broker.service.mqtt import translation
from tests.broker.core.builders import CONTROL, NOW, Broker

QUEUE = "SYSTEM.MQTT.SESSION.X"


@pytest.mark.parametrize("remove", [False, True])
def test_a_typed_registration_is_the_message_it_stands_for(remove: bool) -> None:
    options = RegOpt(0) if remove else translation.SUBSCRIPTION_OPTIONS
    typed = translation.typed_registration(("a/+/b", "c/#"), QUEUE, "alice", remove=remove, options=options)
    decoded = rfh2.decode(typed.message.body, typed.message.encoding, typed.message.format)
    assert decoded == typed.headers
    (folder,) = decoded.folders
    assert psc.parse(folder) == typed.command


@pytest.mark.parametrize(
    "topic",
    ["a/+/b", "x" * psc.MAX_TOPIC_LENGTH, "x" * (psc.MAX_TOPIC_LENGTH + 1), ""],
    ids=["wildcards", "longest", "too-long", "empty"],
)
def test_a_typed_registration_routes_as_the_parsed_one(topic: str) -> None:
    """The same effects and the same state, whether the engine parses the message or takes the
    command it was built from; the same refusal of a topic parsing refuses."""
    outcomes = []
    for typed_path in (False, True):
        broker = Broker(queues=(QUEUE,))
        typed = translation.typed_registration((topic,), QUEUE, "alice")
        source = engine.source_of(broker.state, CONTROL)
        given = {"headers": typed.headers, "command": typed.command} if typed_path else {}
        outcome = engine.route(typed.message, source, broker.state, NOW, **given)  # type: ignore[arg-type]
        broker.state.apply_all(outcome.effects)
        outcomes.append((outcome, sorted(repr(s) for s in broker.state.subscriptions())))
    assert outcomes[0] == outcomes[1]
    assert bool(outcomes[0][1]) == (len(topic) in (5, psc.MAX_TOPIC_LENGTH))  # registered, or refused
