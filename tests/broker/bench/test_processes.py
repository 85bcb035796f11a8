"""Stopping a server process (``broker.bench.processes``)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from broker.bench import processes

IGNORES_SIGTERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(60)"
)


def test_a_process_is_stopped_with_sigterm() -> None:
    process = subprocess.Popen(["sleep", "60"])
    processes.stop(process)
    assert process.returncode == -signal.SIGTERM


def test_a_process_that_ignores_sigterm_is_killed_after_the_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processes, "STOP_SECONDS", 0.5)
    process = subprocess.Popen([sys.executable, "-c", IGNORES_SIGTERM], stdout=subprocess.PIPE)
    assert process.stdout is not None and process.stdout.readline() == b"1\n"  # its handler is set
    processes.stop(process)
    assert process.returncode == -signal.SIGKILL


def test_no_process_or_one_already_gone_is_left_alone() -> None:
    processes.stop(None)
    done = subprocess.Popen(["true"])
    done.wait(10)
    processes.stop(done)
    assert done.returncode == 0
