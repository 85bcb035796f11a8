"""The receiving end of a channel: take a batch from a neighbour, exactly once.

In one unit of work: authenticate the sender by its link token, record the
batch number (a batch seen before is confirmed and put nowhere), strip each
message's MQXQH and put it, descriptor intact, on its destination queue. A
message that cannot be put (unknown queue, full) goes to the dead-letter queue
with the reason, as an MQ receiving channel does; a message for another queue
manager is dead-lettered with MQRC_UNKNOWN_REMOTE_Q_MGR: links carry only
traffic between neighbours.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.network import links, wire
from queues import Message, QueueManager, xqh
from queues.errors import MQError
from queues.message import derive
from queues.reasons import Reason


@dataclass(frozen=True, slots=True)
class Receipt:
    batch: int
    accepted: int
    dead_lettered: int
    duplicate: bool


def receive(qm: QueueManager, payload: bytes, token: str, sender: str) -> Receipt:
    """Take a batch that ``sender`` (the caller's claim, checked against its token) sent."""
    batch = wire.decode(payload)
    if batch.sender != sender:
        raise MQError(Reason.MQRCCF_UNKNOWN_BROKER, f"a batch from {batch.sender} sent as {sender}")
    with qm.unit_of_work() as uow:
        links.authenticate(uow.connection, batch.sender, token)
        if not links.accept_batch(uow.connection, batch.sender, batch.epoch, batch.number):
            return Receipt(batch.number, 0, 0, duplicate=True)
        items: list[tuple[str, Message]] = []
        dead = 0
        for frame in batch.frames:
            try:
                queue, q_mgr, message = xqh.decode(frame.data)
            except MQError as exc:
                uow.dead_letter("", Message(body=frame.data), exc.reason, batch.sender)
                dead += 1
                continue
            message = derive(message, expiry=frame.expiry)
            if q_mgr != qm.name:
                uow.dead_letter(queue, message, Reason.MQRC_UNKNOWN_REMOTE_Q_MGR, q_mgr)
                dead += 1
            else:
                items.append((queue, message))
        result = uow.put_many(items, dead_letter_failures=True)
    dead += len(result.dead_lettered)
    return Receipt(batch.number, len(batch.frames) - dead, dead, duplicate=False)
