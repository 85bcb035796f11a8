"""Back-pressure on what the listener reads: no client is read faster than the broker routes.

Every packet that asks for durable work (a PUBLISH to route, a SUBSCRIBE, a PUBREL to record)
is *unrouted* from the moment it is read until its answer comes back from the gateway. A
connection holding ``mqtt_max_unrouted`` such packets, or ``mqtt_max_unrouted_bytes`` of
their payloads, is not read until it holds fewer; and while all the connections together hold
``mqtt_max_unrouted_total`` (or ``..._total_bytes``), none that holds any is read. Its socket's
buffers then fill and TCP slows the sender, as Mosquitto's single loop does: one fast client
(or a fleet's bug) costs the broker a bounded amount of memory and the other clients at most
the wait for the work already read, never an unbounded queue ahead of their own packets.

A connection that holds nothing is always read, so a client connecting, subscribing or
publishing once during a flood waits only for the work ahead of it in the gateway, which the
bounds keep to about one batch. The limits are soft by one read: the packets of a read are
handled together (a read is at most ``transports.READ_SIZE``), and a packet larger than the
byte bound is taken whole. When the total falls under its bounds, the connections that waited
for it are read again in the order they stopped, as many as the room left would take at the
size of a recent read: resuming them all at once would read one buffer from each, and a
hundred clients would overshoot the bound a hundredfold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

RECENT = 16  # reads: the span of the typical read's size (an exponential moving average)


class Reader(Protocol):
    """A connection, as the intake pauses and resumes it."""

    def pause(self) -> None: ...

    def resume(self) -> None: ...


@dataclass(slots=True)
class Held:
    """What one connection holds unrouted, and whether it is paused."""

    count: int = 0
    size: int = 0
    paused: bool = False


@dataclass(slots=True)
class Intake:
    """The listener's account of unrouted packets, per connection (:class:`Held`) and in total."""

    max_count: int
    max_size: int
    max_total_count: int
    max_total_size: int
    count: int = 0
    size: int = 0
    waiting: dict[Reader, Held] = field(default_factory=dict)  # paused for the total alone, in order
    typical_count: float = 1.0  # of the work of a read, recently
    typical_size: float = 1.0

    def read(self, reader: Reader, held: Held, count: int, size: int) -> None:
        """``reader`` read ``count`` packets of ``size`` bytes that wait for durable work."""
        held.count += count
        held.size += size
        self.count += count
        self.size += size
        self.typical_count += (count - self.typical_count) / RECENT
        self.typical_size += (size - self.typical_size) / RECENT

    def check(self, reader: Reader, held: Held) -> None:
        """After a read: pause ``reader`` if it, or everybody, holds too much."""
        if held.paused or not held.count:
            return
        if self._own_limit(held) or self._total_limit():
            held.paused = True
            reader.pause()
            if not self._own_limit(held):
                self.waiting[reader] = held

    def answered(self, reader: Reader, held: Held, count: int, size: int) -> None:
        """Durable work of ``count`` packets of ``size`` bytes is done: resume ``reader`` if it
        may read again, and those that waited for the total if it is under its bounds."""
        held.count -= count
        held.size -= size
        self.count -= count
        self.size -= size
        if held.paused and not held.count:  # holding nothing, it is read whatever the total
            self._resume(reader, held)
        elif held.paused and not self._own_limit(held):
            self.waiting.setdefault(reader, held)
        if self.waiting and not self._total_limit():
            for waiting, its in list(self.waiting.items())[: self._room()]:
                self._resume(waiting, its)

    def _room(self) -> int:
        """How many connections may be read again: at least one, at most what the room left
        under the total bounds takes at the size of a recent read."""
        by_count = (self.max_total_count - self.count) / max(1.0, self.typical_count)
        by_size = (self.max_total_size - self.size) / max(1.0, self.typical_size)
        return max(1, int(min(by_count, by_size)))

    def forget(self, reader: Reader, held: Held) -> None:
        """``reader`` has ended: what it held is no longer waited for."""
        self.waiting.pop(reader, None)
        self.count -= held.count
        self.size -= held.size
        held.count = held.size = 0

    def _resume(self, reader: Reader, held: Held) -> None:
        self.waiting.pop(reader, None)
        held.paused = False
        reader.resume()

    def _own_limit(self, held: Held) -> bool:
        return held.count >= self.max_count or held.size >= self.max_size

    def _total_limit(self) -> bool:
        return self.count >= self.max_total_count or self.size >= self.max_total_size
