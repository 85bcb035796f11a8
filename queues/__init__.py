"""A small queue manager in the spirit of WebSphere MQ, over SQLite or PostgreSQL.

It knows nothing of publish/subscribe: queues, messages (MQMD + body), units of
work, browse, expiry, backout and a dead-letter queue with MQDLH headers.
"""

from __future__ import annotations

from queues.claims import Claim, ClaimLost
from queues.database import make_engine
from queues.definition import QueueDefinition
from queues.errors import MQError, NoMessageAvailable, UnknownObject
from queues.manager import Browsed, PutResult, QueueManager, UnitOfWork
from queues.message import Message
from queues.names import DEAD_LETTER_QUEUE
from queues.reasons import Reason, reason_name

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
    "QueueManager",
    "Reason",
    "UnitOfWork",
    "UnknownObject",
    "make_engine",
    "reason_name",
]
