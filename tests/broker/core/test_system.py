"""Tests for broker.core.system: what keeps the broker's own queues from working."""

from __future__ import annotations

from broker.core.system import (
    CONTROL_QUEUE,
    DEFAULT_STREAM,
    INTER_BROKER_QUEUE,
    QueueProblem,
    queue_problems,
)
from queues.definition import QueueDefinition
from queues.names import DEAD_LETTER_QUEUE
from queues.reasons import Reason

INPUTS = (CONTROL_QUEUE, INTER_BROKER_QUEUE, DEFAULT_STREAM)


def definitions(changes: dict[str, dict[str, bool] | None]) -> dict[str, QueueDefinition | None]:
    """Every broker queue defined and enabled, but for ``changes`` (None: not defined)."""
    found: dict[str, QueueDefinition | None] = {}
    for name in (*INPUTS, DEAD_LETTER_QUEUE):
        change = changes.get(name, {})
        found[name] = None if change is None else QueueDefinition(name, **change)
    return found


def test_queues_that_work_have_no_problem() -> None:
    assert queue_problems(definitions({}), INPUTS) == []


def test_missing_and_inhibited_inputs_and_dead_letter_queue() -> None:
    """Puts inhibited on an input are an administrator's quiesce: the broker still routes it."""
    problems = queue_problems(
        definitions(
            {
                CONTROL_QUEUE: {"get_enabled": False},
                DEFAULT_STREAM: None,
                INTER_BROKER_QUEUE: {"put_enabled": False},
                DEAD_LETTER_QUEUE: None,
            }
        ),
        INPUTS,
    )

    assert [(p.queue, p.reason) for p in problems] == [
        (CONTROL_QUEUE, Reason.MQRC_GET_INHIBITED),
        (DEFAULT_STREAM, Reason.MQRC_UNKNOWN_OBJECT_NAME),
        (DEAD_LETTER_QUEUE, Reason.MQRC_UNKNOWN_OBJECT_NAME),
    ]
    assert problems[0].describe() == (
        f"{CONTROL_QUEUE}: MQRC_GET_INHIBITED (2016): gets inhibited: not routed"
    )


def test_a_dead_letter_queue_that_takes_no_puts_is_a_problem_one_that_gives_none_is_not() -> None:
    assert queue_problems(definitions({DEAD_LETTER_QUEUE: {"get_enabled": False}}), INPUTS) == []
    assert queue_problems(definitions({DEAD_LETTER_QUEUE: {"put_enabled": False}}), INPUTS) == [
        QueueProblem(
            DEAD_LETTER_QUEUE,
            Reason.MQRC_PUT_INHIBITED,
            "takes no dead letters: messages that cannot be routed stay on their queues",
        )
    ]
