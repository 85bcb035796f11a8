"""The listener's admission (``broker.service.mqtt.admission``): a token bucket of a second's
worth of connections, and no more than ``max_half_open`` awaiting their CONNACK."""

from __future__ import annotations

import asyncio
import time

from broker.service.mqtt.admission import Admission


def test_a_seconds_worth_at_once_then_at_the_rate() -> None:
    admission = Admission(rate=10, max_half_open=1000)
    assert all(admission.try_enter() for _ in range(10))
    assert not admission.try_enter()

    async def next_one() -> float:
        started = time.monotonic()
        await admission.room()
        return time.monotonic() - started

    waited = asyncio.run(next_one())
    assert 0.05 <= waited < 0.5  # a tenth of a second for the next token


def test_none_while_the_half_open_are_at_their_bound_and_one_as_each_settles() -> None:
    admission = Admission(rate=1000, max_half_open=2)
    assert admission.try_enter() and admission.try_enter()
    assert not admission.try_enter()

    async def scenario() -> list[str]:
        seen: list[str] = []

        async def waiter() -> None:
            await admission.room()
            seen.append("admitted")

        task = asyncio.ensure_future(waiter())
        await asyncio.sleep(0.05)
        seen.append("still waiting" if not task.done() else "too soon")
        admission.settled()  # one CONNECT answered: its place goes to the waiter
        await asyncio.wait_for(task, 1)
        return seen

    assert asyncio.run(scenario()) == ["still waiting", "admitted"]
    assert admission.half_open == 2
