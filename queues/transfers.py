"""Moving and copying messages from one queue to another, as MQ Explorer and dmpmqmsg do.

A message keeps its whole descriptor (MsgId, CorrelId, context, priority, persistence and what
is left of its expiry); only BackoutCount starts again at 0, as every MQPUT sets it. Each call
is one unit of work: every message named goes (or is copied), or none does.

The put comes before the get. A target that refuses the messages (not defined, puts inhibited,
full, a message too long for it) refuses before anything is taken from the source, so a failed
move leaves each message where it was with its BackoutCount unchanged; a get that backs out
would have raised it, and could have sent the message on to the backout or dead-letter queue.
"""

from __future__ import annotations

from collections.abc import Sequence

from queues.errors import MQError
from queues.manager import QueueManager
from queues.message import Message, derive
from queues.reasons import Reason


def copy(qm: QueueManager, source: str, msg_ids: Sequence[bytes], target: str) -> None:
    """Put a copy of each message of ``source`` with these MsgIds on ``target``."""
    messages = _found(qm, source, msg_ids)
    with qm.unit_of_work() as uow:
        uow.put_many((target, message) for message in messages)


def move(qm: QueueManager, source: str, msg_ids: Sequence[bytes], target: str) -> None:
    """Take each message of ``source`` with these MsgIds and put it on ``target``."""
    messages = _found(qm, source, msg_ids)
    with qm.unit_of_work() as uow:
        uow.put_many((target, message) for message in messages)
        for msg_id in dict.fromkeys(msg_ids):
            uow.get(source, msg_id=msg_id)


def _found(qm: QueueManager, queue: str, msg_ids: Sequence[bytes]) -> list[Message]:
    """The first message of ``queue`` with each MsgId (each once), as a put will put it again;
    2033 naming the first MsgId that is not there."""
    found = []
    for msg_id in dict.fromkeys(msg_ids):
        browsed = qm.browse(queue, msg_id=msg_id)
        if not browsed:
            raise MQError(Reason.MQRC_NO_MSG_AVAILABLE, f"no message with MsgId {msg_id.hex()} on {queue}")
        found.append(derive(browsed[0].message, backout_count=0))
    return found
