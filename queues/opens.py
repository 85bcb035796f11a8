"""Queues a process holds open for its whole life, and what that forbids: MQ's open handles.

IBM MQ refuses to delete a queue that an application has open (MQRC_OBJECT_IN_USE,
2042): DELETE QLOCAL fails while IPPROCS or OPPROCS is not zero. Here a process that
reads or writes a queue for as long as it runs (the broker's routers read their input
queues and write the dead-letter queue; its channels read the transmission queues)
records each queue in ``mq_opens`` with why, and renews the record while it runs. While
a record is live, deleting the queue is refused, and so is altering it into something
its holder cannot use: gets inhibited under a reader, puts inhibited under a writer,
MAXMSGL below what the holder needs. A record lapses at its ``until`` (a holder on
another machine cannot be asked), or at once when it names a process of this machine
that is gone (``queues.owners``), so a crashed broker never keeps its queues locked.

The rules are pure; :class:`~queues.manager.QueueManager` applies them in the same
transaction as the delete or alter they guard.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from queues.errors import MQError
from queues.owners import dead_here
from queues.reasons import Reason

LEASE_MS = 30_000  # a holder renews well within it (the broker: every housekeeping round, 5 s)
UNTIL_CLOSED = 2**62  # an open that only closing ends: held by a definition, not by a process


@dataclass(frozen=True, slots=True)
class QueueOpen:
    """One queue a process holds open, and what it needs of the queue."""

    queue: str
    purpose: str  # who holds it, for the operator who is refused: "broker QM1 routes from it"
    reads: bool = False
    writes: bool = False
    min_msg_length: int = 0

    def row(self, until: int) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "purpose": self.purpose[:128],
            "reads": int(self.reads),
            "writes": int(self.writes),
            "min_msg_length": self.min_msg_length,
            "until": until,
        }


@dataclass(frozen=True, slots=True)
class Holder:
    """A live open of a queue, as read back: who holds it, why, and what it needs."""

    owner: str
    purpose: str
    reads: bool
    writes: bool
    min_msg_length: int

    def describe(self) -> str:
        return f"{self.purpose} ({self.owner})"


def live(rows: Iterable[Any], now: int) -> list[Holder]:
    """The holders among ``rows`` of ``mq_opens`` whose record has not lapsed."""
    return [
        Holder(row.owner, row.purpose, bool(row.reads), bool(row.writes), row.min_msg_length)
        for row in rows
        if row.until > now and not dead_here(row.owner)
    ]


def check_delete(queue: str, holders: Iterable[Holder]) -> None:
    holder = next(iter(holders), None)
    if holder is not None:
        raise MQError(
            Reason.MQRC_OBJECT_IN_USE,
            f"queue {queue} is in use: {holder.describe()}; stop that first, or it would fail "
            "on every message",
        )


def check_alter(queue: str, values: Mapping[str, Any], holders: Iterable[Holder]) -> None:
    """Refuse attribute values a live holder cannot work with; other changes are free."""
    for holder in holders:
        why = _unusable(values, holder)
        if why is not None:
            raise MQError(Reason.MQRC_OBJECT_IN_USE, f"queue {queue} is in use: {holder.describe()}; {why}")


def _unusable(values: Mapping[str, Any], holder: Holder) -> str | None:
    if holder.reads and values.get("get_enabled", 1) == 0:
        return "gets must stay enabled while it reads the queue"
    if holder.writes and values.get("put_enabled", 1) == 0:
        return "puts must stay enabled while it writes to the queue"
    length = values.get("max_msg_length")
    if length is not None and length < holder.min_msg_length:
        return (
            f"max_msg_length {length} is below the {holder.min_msg_length} bytes it needs "
            "for the messages it handles"
        )
    return None
