"""The channel's wire format: one batch of transmission-queue messages per request.

JSON, so that an operator can read a captured batch: the sender's queue
manager, the link epoch (a random value fixed when the sender defined the
link; a new epoch means the sender started over, so the receiver restarts its
duplicate check), the batch number, and each message as the base64 of its
transmission body (MQXQH + original body) with the expiry it had left when it
left the transmission queue.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

from queues.errors import MQError
from queues.message import MQEI_UNLIMITED
from queues.names import MAX_NAME_LENGTH
from queues.reasons import Reason

MAX_BATCH_MESSAGES = 1000
MAX_BATCH_NUMBER = 2**63 - 1  # the receiver records it in a BIGINT
MAX_EPOCH_LENGTH = 32  # and the epoch in a column this wide
MAX_EXPIRY = 2**31 - 1  # MQMD Expiry is a 32-bit integer


@dataclass(frozen=True, slots=True)
class Frame:
    data: bytes  # MQXQH + body, as on the transmission queue
    expiry: int  # tenths of a second left, -1 unlimited


@dataclass(frozen=True, slots=True)
class Batch:
    sender: str
    epoch: str
    number: int
    frames: tuple[Frame, ...]


def encode(batch: Batch) -> bytes:
    return json.dumps(
        {
            "sender": batch.sender,
            "epoch": batch.epoch,
            "batch": batch.number,
            "messages": [
                {"data": base64.b64encode(f.data).decode("ascii"), "expiry": f.expiry} for f in batch.frames
            ],
        },
        separators=(",", ":"),
    ).encode("ascii")


def decode(payload: bytes) -> Batch:
    """A batch from a request body; anything malformed is 2337 (a 400 at the endpoint).

    Types and ranges are checked here, not left to the database: a value the receiver
    could not record (an epoch wider than its column, a number beyond BIGINT, an
    expiry MQ cannot carry) would otherwise fail the whole batch on every resend."""
    try:
        document = json.loads(payload)
        frames = tuple(
            Frame(base64.b64decode(_text(item["data"], 0, None), validate=True), _expiry(item["expiry"]))
            for item in document["messages"]
        )
        batch = Batch(
            _text(document["sender"], 1, MAX_NAME_LENGTH),
            _text(document["epoch"], 1, MAX_EPOCH_LENGTH),
            _integer(document["batch"], 1, MAX_BATCH_NUMBER),
            frames,
        )
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise MQError(Reason.MQRC_RFH_PARM_ERROR, f"malformed channel batch: {exc}") from None
    if len(frames) > MAX_BATCH_MESSAGES:
        raise MQError(Reason.MQRC_RFH_PARM_ERROR, f"{len(frames)} messages; at most {MAX_BATCH_MESSAGES}")
    return batch


def _text(value: object, shortest: int, longest: int | None) -> str:
    if not isinstance(value, str) or not shortest <= len(value) <= (longest or len(value)):
        raise ValueError(f"{value!r:.60} is not a string of {shortest} to {longest or 'any'} characters")
    return value


def _integer(value: object, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"{value!r:.60} is not an integer from {low} to {high}")
    return value


def _expiry(value: object) -> int:
    """Tenths of a second left, or MQEI_UNLIMITED; never 0 (MQ refuses it)."""
    if type(value) is int and value == MQEI_UNLIMITED:
        return value
    return _integer(value, 1, MAX_EXPIRY)
