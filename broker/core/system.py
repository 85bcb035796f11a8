"""The broker's system queues, named as in WebSphere MQ, and what keeps them from working."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from broker.protocol.psc import MAX_FOLDER_BYTES
from queues import dlh
from queues.definition import QueueDefinition
from queues.names import DEAD_LETTER_QUEUE
from queues.reasons import Reason, reason_name

DEFAULT_STREAM = "SYSTEM.BROKER.DEFAULT.STREAM"
CONTROL_QUEUE = "SYSTEM.BROKER.CONTROL.QUEUE"
INTER_BROKER_QUEUE = "SYSTEM.BROKER.INTER.BROKER.COMMUNICATIONS"

SYSTEM_QUEUE_DESCRIPTIONS = {
    DEFAULT_STREAM: "Default publication stream",
    CONTROL_QUEUE: "Broker control commands",
    INTER_BROKER_QUEUE: "Publications and commands from neighbouring brokers",
    DEAD_LETTER_QUEUE: "Dead-letter queue",
}

# The longest command the broker accepts: the largest <psc> folder it parses, with room for the
# MQRFH2 header and the other folders a command carries. A queue the broker reads commands from
# (or dead-letters them to, MQDLH included) must take at least this much.
COMMAND_MSG_LENGTH = MAX_FOLDER_BYTES + 4096
DEAD_LETTER_MSG_LENGTH = COMMAND_MSG_LENGTH + dlh.LENGTH


def input_queues(streams: Iterable[str]) -> list[str]:
    """The queues a broker routes from, in the order each of its rounds serves them."""
    return [CONTROL_QUEUE, INTER_BROKER_QUEUE, *streams]


@dataclass(frozen=True, slots=True)
class QueueProblem:
    """One of the broker's own queues that cannot do its part: which, why (the reason an MQ
    call on it gets) and what the broker cannot do meanwhile."""

    queue: str
    reason: int
    effect: str

    def describe(self) -> str:
        return f"{self.queue}: {reason_name(self.reason)} ({self.reason}): {self.effect}"

    def fields(self) -> dict[str, str | int]:
        """As a log line's fields and the admin API's problem entry carry it."""
        return {
            "queue": self.queue,
            "reason": self.reason,
            "reason_name": reason_name(self.reason),
            "effect": self.effect,
        }


def queue_problems(
    definitions: Mapping[str, QueueDefinition | None], inputs: Sequence[str]
) -> list[QueueProblem]:
    """What keeps the broker's queues from working, read from their definitions: an input
    (the control queue, the inter-broker queue, a stream) that is missing or whose gets are
    inhibited, and a dead-letter queue that cannot take dead letters. Each is an operator's to
    put right; the broker serves the rest meanwhile and picks the queue up again once it is.
    Puts inhibited on an input are not among them: that is how an MQ administrator quiesces a
    queue, and the broker goes on routing what is on it."""
    problems = []
    for name in inputs:
        definition = definitions.get(name)
        if definition is None:
            problems.append(
                QueueProblem(name, Reason.MQRC_UNKNOWN_OBJECT_NAME, "not defined: nothing to route")
            )
            continue
        if not definition.get_enabled:
            problems.append(QueueProblem(name, Reason.MQRC_GET_INHIBITED, "gets inhibited: not routed"))
    dead_letters = definitions.get(DEAD_LETTER_QUEUE)
    if dead_letters is None or not dead_letters.put_enabled:
        reason = Reason.MQRC_UNKNOWN_OBJECT_NAME if dead_letters is None else Reason.MQRC_PUT_INHIBITED
        problems.append(
            QueueProblem(
                DEAD_LETTER_QUEUE,
                reason,
                "takes no dead letters: messages that cannot be routed stay on their queues",
            )
        )
    return problems
