"""Every connection's deadline (keepalive, the wait for CONNECT) on one timer.

An asyncio timer per connection costs a ``TimerHandle`` and a heap entry each, and thousands of
idle clients would keep thousands of them. Here a connection sits in the bucket of its deadline,
rounded up to ``RESOLUTION`` seconds, and one timer fires for the earliest bucket. A packet that
moves a deadline later moves nothing: when the old bucket comes, the connection finds it has
not expired and is put in the bucket of its new deadline (so an active client is looked at once
per keepalive period, not once per packet). A deadline that comes nearer (a CONNECT with a
keepalive shorter than the wait for CONNECT) moves the connection to the earlier bucket.
"""

from __future__ import annotations

import asyncio
import heapq
import math
from typing import Protocol

RESOLUTION = 0.25  # seconds: a connection expires at most this late


class Expiring(Protocol):
    due: int | None  # the bucket it is in (the Deadlines' business)

    def expire(self) -> None:
        """The deadline has come: close if it has passed, else :meth:`Deadlines.add` again."""


class Deadlines:
    """Buckets of connections by deadline, on the running event loop's clock."""

    def __init__(self) -> None:
        self._buckets: dict[int, set[Expiring]] = {}
        self._keys: list[int] = []  # a heap of the buckets' keys
        self._timer: asyncio.TimerHandle | None = None

    def add(self, item: Expiring, when: float) -> None:
        """Expire ``item`` at ``when`` (loop time), unless it is due as early already."""
        key = math.ceil(when / RESOLUTION)
        if item.due is not None and item.due <= key:
            return
        self.discard(item)
        item.due = key
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = set()
            heapq.heappush(self._keys, key)
        bucket.add(item)
        if self._timer is None or key * RESOLUTION < self._timer.when():
            self._arm(key)

    def discard(self, item: Expiring) -> None:
        """Forget ``item`` (its connection has ended)."""
        if item.due is not None:
            bucket = self._buckets.get(item.due)
            if bucket is not None:
                bucket.discard(item)
            item.due = None

    def _arm(self, key: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_at(key * RESOLUTION, self._fire)

    def _fire(self) -> None:
        self._timer = None
        now = asyncio.get_running_loop().time()
        while self._keys and self._keys[0] * RESOLUTION <= now:
            for item in self._buckets.pop(heapq.heappop(self._keys)):
                item.due = None
                item.expire()
        if self._keys and self._timer is None:
            self._arm(self._keys[0])
