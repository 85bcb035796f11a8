"""The event loop the MQTT listener and the admin API run on (the ``event_loop`` setting):
uvloop, libuv's loop for asyncio, where it is installed, else asyncio's own. A listener's time
goes mostly to its sockets' reads and writes, which uvloop makes in C: about a quarter less CPU
per MQTT delivery at 1,000 QoS 1 publications/s (``docs/performance.md``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

log = logging.getLogger("broker.service")

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def loop_factory(name: str) -> LoopFactory:
    """The factory of the loop the setting ``name`` ("uvloop" or "asyncio") names: asyncio's
    own for "uvloop" where uvloop cannot be imported (and a warning in the log)."""
    if name == "uvloop":
        try:
            import uvloop
        except ImportError:
            log.warning("uvloop is not installed: asyncio's own event loop serves")
        else:
            return uvloop.new_event_loop
    return asyncio.new_event_loop


def uvicorn_loop(name: str) -> str:
    """uvicorn's ``loop`` option for the setting ``name``: the same loop as the listener's."""
    return "uvloop" if loop_factory(name) is not asyncio.new_event_loop else "asyncio"
