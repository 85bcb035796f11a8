"""Supervised threads and asyncio tasks: a failure is reported and the work runs again."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from broker.service.health import Health
from broker.service.supervision import Backoff, SupervisedThread, every, supervise
from queues.errors import MQError
from queues.reasons import Reason

GONE = MQError(Reason.MQRC_CONNECTION_BROKEN, "database unavailable: gone")


def test_backoff_doubles_to_its_limit_and_starts_again_after_a_success() -> None:
    backoff = Backoff(0.1, 1.0)
    assert [backoff.next() for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    backoff.reset()
    assert backoff.next() == 0.1


def test_a_thread_that_raises_is_reported_and_run_again() -> None:
    health = Health()
    runs: list[int] = []
    done = threading.Event()

    def target(stop: threading.Event) -> None:
        runs.append(1)
        if len(runs) < 3:
            raise GONE
        health.succeeded("watcher")
        done.set()
        stop.wait()

    thread = SupervisedThread("watcher", target, health)
    thread.start()
    assert done.wait(5)
    assert len(runs) == 3
    report = health.report()
    assert [(t.name, t.alive, t.state) for t in report.tasks] == [("watcher", True, "running")]
    assert report.outage is None
    thread.join(5)
    assert health.report().tasks == ()


def test_a_periodic_step_that_fails_is_retried_at_once_not_at_its_next_period() -> None:
    async def scenario() -> tuple[list[float], str]:
        health = Health()
        loop = asyncio.get_running_loop()
        calls: list[float] = []

        async def step() -> None:
            calls.append(loop.time())
            if len(calls) <= 2:
                raise GONE

        task = asyncio.create_task(every("chore", 30.0, step, health, at_once=True))
        while len(calls) < 3:
            await asyncio.sleep(0.01)
        state = health.report().tasks[0].state
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return calls, state

    calls, state = asyncio.run(scenario())
    assert calls[-1] - calls[0] < 1.0  # two back-offs of 0.1 and 0.2 s, not two periods of 30 s
    assert state == "running"


def test_a_supervised_task_that_raises_runs_again_until_it_returns() -> None:
    async def scenario() -> int:
        health = Health()
        runs = 0

        async def run() -> None:
            nonlocal runs
            runs += 1
            if runs < 3:
                raise RuntimeError("broken")

        await asyncio.wait_for(supervise("bridge", run, health), 5)
        return runs

    assert asyncio.run(scenario()) == 3


def test_a_thread_is_alive_to_readiness_from_the_moment_it_is_watched() -> None:
    """A readiness check between watching a thread and starting it must not find it dead."""
    seen: list[bool] = []

    class Looking(Health):
        def watch(self, name: str, alive: Callable[[], bool]) -> None:
            seen.append(alive())  # what a /ready request at this moment would see
            super().watch(name, alive)

    health = Looking()
    thread = SupervisedThread("channels", lambda stop: stop.wait(), health)
    thread.start()
    assert seen == [True]
    assert health.report().ready
    thread.join(5)


def test_joining_a_thread_that_never_started_is_nothing() -> None:
    """What was to run beside it failed first (the MQTT listener's gateway, say): that failure
    is the one its caller reports, not a RuntimeError from the clean-up."""
    thread = SupervisedThread("watcher", lambda stop: stop.wait(), Health())
    thread.join(5)
    assert thread.stop.is_set()
