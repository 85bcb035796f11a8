"""broker.service.turns: callers served in turns, each caller's jobs in order."""

from __future__ import annotations

import threading
from functools import partial

import pytest

from broker.service.turns import Turns


def test_a_newcomer_waits_for_the_jobs_running_not_for_those_queued() -> None:
    """Both threads busy with the flood's jobs, five more of them queued, then bob's and
    carol's: the first thread free takes bob's, then carol's, then the flood's."""
    turns = Turns(2, "test-turns")
    started = [threading.Event(), threading.Event()]
    gates = [threading.Event(), threading.Event()]
    done: list[str] = []
    for n in range(2):
        turns.submit("flood", partial(_block, started[n], gates[n]))
    assert all(event.wait(5) for event in started)
    futures = [turns.submit("flood", partial(done.append, f"flood{n}")) for n in range(5)]
    futures += [turns.submit(name, partial(done.append, name)) for name in ("bob", "carol")]
    gates[0].set()
    try:
        for future in futures:
            future.result(timeout=5)
    finally:
        gates[1].set()
        turns.close()
    assert done == ["bob", "carol", "flood0", "flood1", "flood2", "flood3", "flood4"]


def _block(started: threading.Event, gate: threading.Event) -> None:
    started.set()
    gate.wait(5)


def test_a_job_that_fails_fails_its_future_only() -> None:
    turns = Turns(2, "test-turns")

    def fail() -> None:
        raise ValueError("bad")

    failed = turns.submit("a", fail)
    try:
        with pytest.raises(ValueError, match="bad"):
            failed.result(timeout=5)
        assert turns.submit("a", lambda: 42).result(timeout=5) == 42
    finally:
        turns.close()


def test_closing_ends_the_threads_once_their_jobs_are_done() -> None:
    turns = Turns(2, "test-turns-closing")
    last = turns.submit("a", lambda: "done")
    turns.close()
    assert last.result(timeout=5) == "done"
    threads = [t for t in threading.enumerate() if t.name.startswith("test-turns-closing")]
    for thread in threads:
        thread.join(timeout=5)
    assert not any(thread.is_alive() for thread in threads)
