"""Group commit: single puts made at the same time by threads of one process share a commit.

A put outside a unit of work must be durable when it returns. Each commit costs a
write-lock hand-over and a log flush (an fsync on SQLite), so threads of one
application putting at once (request handlers, an MQTT listener's connections, the
benchmark's publishers) would otherwise queue behind each other one commit at a
time, while the broker's router waits for the same lock. IBM MQ's logger does the
same across all its applications.

The first caller to arrive leads: it takes every put queued by then and commits
them in one unit of work, each put checked on its own (a full or unknown queue
fails that put alone, as it would have alone). Whoever queued while it committed
is led next by the first of them. Nobody waits on a timer: a put with nobody
beside it commits at once, exactly as before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class _Ticket(Generic[Item, Result]):
    __slots__ = ("error", "item", "lead", "result", "woken")

    def __init__(self, item: Item) -> None:
        self.item = item
        self.woken = threading.Event()
        self.lead = False
        self.result: Result | None = None
        self.error: BaseException | None = None

    def settle(self, outcome: Result | BaseException) -> None:
        if isinstance(outcome, BaseException):
            self.error = outcome
        else:
            self.result = outcome
        self.woken.set()

    def outcome(self) -> Result:
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


class GroupCommit(Generic[Item, Result]):
    """Runs ``commit`` over the items submitted while the previous commit ran.

    ``commit`` returns one outcome per item, in order: its result, or the exception
    that item alone raises. An exception out of ``commit`` itself (the commit
    failed) is every item's outcome: none of them was written.
    """

    def __init__(self, commit: Callable[[list[Item]], list[Result | BaseException]]) -> None:
        self._commit = commit
        self._lock = threading.Lock()
        self._queued: list[_Ticket[Item, Result]] = []
        self._leading = False

    def submit(self, item: Item) -> Result:
        ticket: _Ticket[Item, Result] = _Ticket(item)
        with self._lock:
            self._queued.append(ticket)
            ticket.lead = not self._leading
            self._leading = True
        if not ticket.lead:
            try:
                ticket.woken.wait()
            except BaseException:  # KeyboardInterrupt in a waiting main thread
                self._abandon(ticket)
                raise
        if ticket.lead:  # first in, or handed the lead by the previous group's leader
            self._lead()
        return ticket.outcome()

    def _abandon(self, ticket: _Ticket[Item, Result]) -> None:
        """A caller gave up waiting: its put is not made if no group has taken it yet, and
        a lead handed to it goes on to the next caller, or nobody would ever lead again."""
        with self._lock:
            if ticket in self._queued:
                self._queued.remove(ticket)
            if ticket.lead:
                ticket.lead = False
                self._hand_over()

    def _lead(self) -> None:
        with self._lock:
            group, self._queued = self._queued, []
        try:
            outcomes: list[Result | BaseException]
            try:
                outcomes = self._commit([ticket.item for ticket in group])
                if len(outcomes) != len(group):
                    raise RuntimeError(f"{len(outcomes)} outcomes for a group of {len(group)}")
            except BaseException as exc:  # every caller of the group re-raises it
                outcomes = [exc] * len(group)
            for ticket, outcome in zip(group, outcomes, strict=True):
                ticket.lead = False
                ticket.settle(outcome)
        finally:
            with self._lock:
                self._hand_over()

    def _hand_over(self) -> None:
        """With the lock held: the first caller queued leads the next group, if any."""
        if self._queued:
            following = self._queued[0]
            following.lead = True
            following.woken.set()
        else:
            self._leading = False
