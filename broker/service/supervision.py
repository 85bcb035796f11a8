"""Supervised background work: a thread or asyncio task that fails is retried, never lost.

A background task that dies quietly is worse than a crash: the process looks healthy while
what the task did (waking subscribers, carrying out operators' requests, bridging) has
stopped for good. So every one runs under a supervisor here. A failed attempt is reported to
the process's :class:`~broker.service.health.Health` (which logs it once per outage, or with
its traceback when it is not the database's doing) and tried again after a :class:`Backoff`;
a task that fails for the database resumes as soon as the database answers, within
:data:`MAX_BACKOFF` seconds.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable

from broker.service.health import Health

FIRST_BACKOFF = 0.1
MAX_BACKOFF = 1.0  # a failed attempt costs one refused connection: cheap enough every second


class Backoff:
    """Delays that double from ``first`` to ``limit`` while attempts keep failing."""

    def __init__(self, first: float = FIRST_BACKOFF, limit: float = MAX_BACKOFF) -> None:
        self.first = first
        self.limit = limit
        self._next = first

    def next(self) -> float:
        delay = self._next
        self._next = min(delay * 2, self.limit)
        return delay

    def reset(self) -> None:
        self._next = self.first


async def supervise(name: str, run: Callable[[], Awaitable[None]], health: Health) -> None:
    """Run ``run()`` until it returns or this task is cancelled; if it raises, report it and
    run it again after a back-off (a long-running ``run`` reports its own successes)."""
    task = asyncio.current_task()
    health.watch(name, lambda: task is not None and not task.done())
    backoff = Backoff()
    try:
        while True:
            try:
                await run()
                return
            except Exception as exc:
                health.failed(name, exc)
            await asyncio.sleep(backoff.next())
    finally:
        health.forget(name)


async def every(
    name: str, seconds: float, step: Callable[[], Awaitable[None]], health: Health, *, at_once: bool = False
) -> None:
    """Await ``step()`` every ``seconds`` (the first time at once with ``at_once``) until
    cancelled; a failed step is tried again after a back-off (at most ``seconds``) rather than
    at the next period."""
    task = asyncio.current_task()
    health.watch(name, lambda: task is not None and not task.done())
    backoff = Backoff(limit=min(MAX_BACKOFF, seconds))
    delay = 0.0 if at_once else seconds
    try:
        while True:
            await asyncio.sleep(delay)
            try:
                await step()
            except Exception as exc:
                health.failed(name, exc)
                delay = backoff.next()
            else:
                health.succeeded(name)
                backoff.reset()
                delay = seconds
    finally:
        health.forget(name)


class SupervisedThread:
    """A daemon thread running ``target(stop)`` until ``stop`` is set; if ``target`` raises, it
    is reported and called again after a back-off. ``target`` reports its own successes (and
    may handle its failures itself, reporting them, to keep what it was doing)."""

    def __init__(self, name: str, target: Callable[[threading.Event], None], health: Health) -> None:
        self.name = name
        self.stop = threading.Event()
        self._target = target
        self._health = health
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._health.watch(self.name, self._alive)
        self._thread.start()

    def _alive(self) -> bool:
        """Alive from when it is watched: a thread about to start has not died."""
        return self._thread.ident is None or self._thread.is_alive()

    def join(self, timeout: float) -> None:
        """Stop it and wait for it; nothing to wait for if it never started (what was to run
        beside it failed first, and that failure is the one to report)."""
        self.stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout)
        self._health.forget(self.name)

    def _run(self) -> None:
        backoff = Backoff()
        while not self.stop.is_set():
            try:
                self._target(self.stop)
                return
            except Exception as exc:
                self._health.failed(self.name, exc)
            self.stop.wait(backoff.next())
