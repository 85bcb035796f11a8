"""The listener's one timer for every connection's deadline."""

from __future__ import annotations

import asyncio

from broker.service.mqtt.deadlines import RESOLUTION, Deadlines


class Item:
    """A connection's stand-in: expires when its deadline has passed, else asks again."""

    def __init__(self, name: str, deadlines: Deadlines, when: float, expired: list[str]) -> None:
        self.name = name
        self.due: int | None = None
        self.deadlines = deadlines
        self.when = when
        self.expired = expired

    def expire(self) -> None:
        if asyncio.get_running_loop().time() >= self.when:
            self.expired.append(self.name)
        else:
            self.deadlines.add(self, self.when)


def test_items_expire_in_deadline_order_within_the_resolution() -> None:
    async def scenario() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        deadlines, expired = Deadlines(), []
        start = loop.time()
        items = {
            name: Item(name, deadlines, start + delay, expired) for name, delay in [("b", 0.6), ("a", 0.3)]
        }
        for item in items.values():
            deadlines.add(item, item.when)
        seen: list[tuple[str, float]] = []
        while len(seen) < 2:
            await asyncio.sleep(0.01)
            seen += [(name, loop.time() - items[name].when) for name in expired[len(seen) :]]
        return seen

    seen = asyncio.run(scenario())
    assert [name for name, _ in seen] == ["a", "b"]
    assert all(0 <= late <= RESOLUTION + 0.05 for _, late in seen)


def test_a_deadline_moved_later_is_found_out_and_one_moved_nearer_is_moved() -> None:
    async def scenario() -> list[str]:
        loop = asyncio.get_running_loop()
        deadlines, expired = Deadlines(), []
        later = Item("later", deadlines, loop.time() + 0.2, expired)
        deadlines.add(later, later.when)
        later.when += 0.3  # a packet arrived: nothing moves until the first deadline comes
        nearer = Item("nearer", deadlines, loop.time() + 5.0, expired)
        deadlines.add(nearer, nearer.when)
        nearer.when = loop.time() + 0.1  # a CONNECT with a short keepalive
        deadlines.add(nearer, nearer.when)
        await asyncio.sleep(0.35)
        at_first = list(expired)
        await asyncio.sleep(0.5)
        gone = Item("gone", deadlines, loop.time() + 0.1, expired)
        deadlines.add(gone, gone.when)
        deadlines.discard(gone)  # its connection ended
        await asyncio.sleep(0.4)
        return [*at_first, "|", *expired]

    assert asyncio.run(scenario()) == ["nearer", "|", "nearer", "later"]
