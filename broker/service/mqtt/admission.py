"""How fast the listener takes new connections, and how many it holds before their CONNECT.

A flood of new connections (a fleet reconnecting after an outage, a fuzzer, an attack) must not
starve the established clients, nor a well-behaved newcomer. A listener accepts at most
``mqtt_max_connect_rate`` connections a second (a token bucket, so a burst of up to a second's
worth goes at once), and none while ``mqtt_max_half_open`` of the connections it accepted have
not yet had their CONNECT answered. The connections it does not accept meanwhile wait in the
kernel's listen backlog (``transports.BACKLOG``), where TCP holds them at no cost to the broker;
over WebSockets, whose connections the library accepts itself, the HTTP upgrade is answered
503 instead. A connection that sends no CONNECT within ``mqtt_connect_timeout`` seconds is
closed, so a half-open one holds its place for that long at most.
"""

from __future__ import annotations

import asyncio
import time


class Admission:
    """The token bucket and the count of half-open connections of one listener (its event
    loop's: nothing here is thread-safe, nor needs to be)."""

    def __init__(self, rate: float, max_half_open: int) -> None:
        self.rate = rate
        self.max_half_open = max_half_open
        self.half_open = 0
        self._tokens = rate  # a full bucket: a second's worth
        self._filled = time.monotonic()
        self._settled: asyncio.Event | None = None  # set when a half-open connection settles

    async def room(self) -> None:
        """Wait until a connection may be accepted, and count it as one: half-open until
        :meth:`settled`."""
        while not self.try_enter():
            if self.half_open >= self.max_half_open:
                if self._settled is None:
                    self._settled = asyncio.Event()
                self._settled.clear()
                await self._settled.wait()
            else:
                await asyncio.sleep((1 - self._tokens) / self.rate)

    def try_enter(self) -> bool:
        """Take a connection in now if there is room (counted as half-open), else False."""
        if self.half_open >= self.max_half_open or not self._take():
            return False
        self.half_open += 1
        return True

    def settled(self) -> None:
        """A connection this admitted has had its CONNECT answered, or has ended first."""
        self.half_open -= 1
        if self._settled is not None:
            self._settled.set()

    def _take(self) -> bool:
        now = time.monotonic()
        self._tokens = min(self.rate, self._tokens + (now - self._filled) * self.rate)
        self._filled = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True
