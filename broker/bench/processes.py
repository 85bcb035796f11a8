"""Stopping the server processes the benchmarks (and the tests' process harnesses) start."""

from __future__ import annotations

import signal
import subprocess

STOP_SECONDS = 30.0


def stop(process: subprocess.Popen[bytes] | None) -> None:
    """Stop ``process`` as an operator would (SIGTERM: it finishes its batch and leaves its
    sessions as they should be), killing it if it is not gone within ``STOP_SECONDS``."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(STOP_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(STOP_SECONDS)
