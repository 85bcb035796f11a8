"""A small queue manager in the spirit of WebSphere MQ, over SQLite or PostgreSQL.

It knows nothing of publish/subscribe: queues, messages (MQMD + body), units of
work, browse, expiry, backout and a dead-letter queue with MQDLH headers.

The names below are loaded on first use: the pure modules (``queues.message``,
``queues.errors``, ``queues.reasons``...) that the broker's protocol and core
read do not load SQLAlchemy with them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from queues.claims import Claim, ClaimLost
    from queues.database import make_engine
    from queues.definition import QueueDefinition
    from queues.errors import MQError, NoMessageAvailable, UnknownObject
    from queues.manager import Browsed, PutResult, QueueHead, QueueManager, UnitOfWork
    from queues.message import Message
    from queues.names import DEAD_LETTER_QUEUE
    from queues.reasons import Reason, reason_name

_EXPORTS = {
    "Claim": "queues.claims",
    "ClaimLost": "queues.claims",
    "make_engine": "queues.database",
    "QueueDefinition": "queues.definition",
    "MQError": "queues.errors",
    "NoMessageAvailable": "queues.errors",
    "UnknownObject": "queues.errors",
    "Browsed": "queues.manager",
    "PutResult": "queues.manager",
    "QueueHead": "queues.manager",
    "QueueManager": "queues.manager",
    "UnitOfWork": "queues.manager",
    "Message": "queues.message",
    "DEAD_LETTER_QUEUE": "queues.names",
    "Reason": "queues.reasons",
    "reason_name": "queues.reasons",
}
__all__ = [
    "DEAD_LETTER_QUEUE",
    "Browsed",
    "Claim",
    "ClaimLost",
    "MQError",
    "Message",
    "NoMessageAvailable",
    "PutResult",
    "QueueDefinition",
    "QueueHead",
    "QueueManager",
    "Reason",
    "UnitOfWork",
    "UnknownObject",
    "make_engine",
    "reason_name",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # the next access is a plain attribute
    return value
