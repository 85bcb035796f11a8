"""Messages a router leaves on their queue for a while, to route the ones behind them.

A message that cannot be routed goes to the dead-letter queue; one that the dead-letter queue
refuses too (it is within an MQDLH of MAXMSGL, the queue is full, deleted or put-inhibited) goes
to its queue's backout queue; one that has none, or that refuses it as well, has nowhere to go.
MQ's queued publish/subscribe interface would retry it and route nothing else meanwhile; this
router leaves it where it is, its backout count raised, and passes over it (its claims skip it
by id) so that the stream behind it keeps flowing.

It passes over it for :data:`HOLD_SECONDS`, or until the dead-letter queue or the message's
queue is altered, and then tries it again: an operator who makes room for it sees it go without
a restart. The list is this router's own, in memory: another router, or this one after a
restart, tries such a message once before it passes over it too.
"""

from __future__ import annotations

import time
from collections.abc import Callable

HOLD_SECONDS = 60.0


class HeldMessages:
    """The ids of the messages this router passes over, per queue, each until a moment."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._until: dict[str, dict[int, float]] = {}

    def hold(self, queue: str, message_id: int) -> None:
        self._until.setdefault(queue, {})[message_id] = self._clock() + HOLD_SECONDS

    def ids(self, queue: str) -> frozenset[int]:
        """The messages of ``queue`` still passed over (those whose time is up are forgotten)."""
        held = self._until.get(queue)
        if not held:
            return frozenset()
        now = self._clock()
        for message_id in [i for i, until in held.items() if until <= now]:
            del held[message_id]
        return frozenset(held)

    def release_all(self) -> int:
        """Try every held message again at the next claim; returns how many there were."""
        count = sum(len(held) for held in self._until.values())
        self._until.clear()
        return count
