"""Where routing's message effects go: the one decision shared by every writer of effects
(the routing loop's and the MQTT gateway's units of work, the Spark job's staged rows), so
that a backlog routed by any of them leaves the same rows."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from broker.core.effects import (
    AddSubscription,
    DeadLetter,
    DeleteRetained,
    Put,
    RemoveSubscription,
    SetRetained,
)
from broker.core.neighbours import transmission
from queues.message import Message
from queues.reasons import Reason

# The effects that change the broker's state (the state store's), not a queue.
STATE_EFFECTS = (AddSubscription, RemoveSubscription, SetRetained, DeleteRetained)


@dataclass(frozen=True, slots=True)
class Write:
    """``message`` for ``queue``; with a ``reason``, a dead letter instead, its MQDLH naming
    ``queue`` and ``dest_qmgr`` (this queue manager if empty) as where it was going."""

    queue: str
    message: Message
    reason: int = 0
    dest_qmgr: str = ""


def write_of(effect: Put | DeadLetter, neighbours: Collection[str]) -> Write:
    """Where ``effect``'s message goes: a local put to its queue; a put for a neighbour to
    that neighbour's transmission queue, or the dead-letter queue if it is none of this
    broker's neighbours (MQRC_UNKNOWN_REMOTE_Q_MGR); a dead letter to the dead-letter queue."""
    if isinstance(effect, DeadLetter):
        return Write(effect.queue, effect.message, effect.reason)
    if not effect.q_mgr:
        return Write(effect.queue, effect.message)
    if effect.q_mgr in neighbours:
        queue, message = transmission(effect)
        return Write(queue, message)
    return Write(effect.queue, effect.message, Reason.MQRC_UNKNOWN_REMOTE_Q_MGR, effect.q_mgr)
