"""SIGTERM and SIGINT turned into a call from an ordinary thread.

A Python signal handler runs in the main thread between two bytecodes of whatever it
interrupted. A handler that stops a service takes locks (setting a ``threading.Event``
takes the event's lock), and the code it interrupted may hold the same lock: a second
SIGTERM arriving while the first handler is inside ``Event.set``, or a handler landing
inside the loop's own ``Event.set``. The main thread then waits for itself, for good,
and a router whose parent died (which sends it SIGTERM) never ends.

So the handler here does nothing but write the signal's number to a pipe, without a
lock; a thread reads the pipe and calls the process's stop action. There is one action
per process: installing another replaces it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_action: Callable[[], None] = lambda: None  # noqa: E731
_pipe: tuple[int, int] | None = None
_installing = threading.Lock()


def on_stop_signals(action: Callable[[], None]) -> None:
    """Call ``action`` from the relay thread on every SIGTERM or SIGINT (from the main thread:
    Python installs signal handlers there only)."""
    global _action, _pipe
    with _installing:
        _action = action
        if _pipe is None:
            read, write = os.pipe()
            os.set_blocking(write, False)
            _pipe = read, write
            threading.Thread(target=_relay, args=(read,), name="stop-signals", daemon=True).start()
        write = _pipe[1]
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda signum, _frame: _note(write, signum))


def _note(write: int, signum: int) -> None:
    with contextlib.suppress(BlockingIOError):  # a full pipe already holds a stop to deliver
        os.write(write, bytes([signum]))


def _relay(read: int) -> None:
    while os.read(read, 64):
        _action()
