"""Stop signals reach the stop action from a thread, never inside the code they interrupt.

Each case runs in a process of its own: the signals are real, and a handler that deadlocked
would hang that process, not the test run."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import os, signal, threading
    from broker.service.signals import on_stop_signals

    lock = threading.Lock()
    calls = []
    done = threading.Event()

    def stop(name):
        def action():
            with lock:  # what a service's stop takes: the lock of the event it sets
                calls.append(f"{name}@{threading.current_thread().name}")
                done.set()
        return action

    on_stop_signals(stop("first"))
    on_stop_signals(stop("second"))  # one action per process: the last installed
    with lock:  # the main thread is inside the code the stop action needs
        for sig in SIGNALS:
            os.kill(os.getpid(), sig)
        sum(range(100_000))  # the handlers run between these bytecodes
    done.wait(5)
    print(",".join(calls))
    """
)


def run(signals: str) -> str:
    script = SCRIPT.replace("SIGNALS", signals)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=True
    )
    return done.stdout.strip()


def test_a_stop_signal_while_the_main_thread_holds_the_stop_actions_lock_stops_it() -> None:
    assert run("[signal.SIGTERM]") == "second@stop-signals"


def test_signals_one_after_the_other_each_call_the_action() -> None:
    """A second SIGTERM landing while the first one's stop runs: a handler that set an
    event itself would wait, inside the main thread, for the lock that thread holds."""
    calls = run("[signal.SIGTERM, signal.SIGTERM, signal.SIGINT]").split(",")
    assert set(calls) == {"second@stop-signals"}
