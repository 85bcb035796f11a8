"""Watch the claim turn a unit of work waits for, and end its owner if it stalls mid-statement.

A turn owner whose process stops between statements is ended by the server
(``idle_in_transaction_session_timeout``, ``queues.sql``'s claim turns). One that stops
inside a statement is not: a COPY whose rows are half sent, or a message larger than the
socket buffer, leaves its server session *active*, waiting for the client with no limit, and
every turn behind it would wait as long. So the waiter watches, from a connection of its own,
the session that holds the turn before its own: a session waiting for its client in the middle
of a statement whose progress (the statement's start, the bytes of COPY received) has not
moved for the turn timeout is ended, its transaction rolled back and its locks released,
and the wait goes on to its end as usual. The watch costs nothing while turns pass quickly: it
first looks once the wait has lasted a sampling interval.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine

from queues import sql

log = logging.getLogger(__name__)

JOIN_SECONDS = 1.0  # how long the wait's end waits for its watch (never for a slow database)


@contextmanager
def watching(engine: Engine, turn: int, timeout: float) -> Iterator[None]:
    """Watch the owner of the turn before ``turn`` while the body waits for it."""
    done = threading.Event()
    watch = threading.Thread(
        target=_watch, args=(engine, turn, timeout, done), name="turn-watch", daemon=True
    )
    watch.start()
    try:
        yield
    finally:
        done.set()
        watch.join(JOIN_SECONDS)  # a look in progress may finish on its own: it ends nothing now


def _watch(engine: Engine, turn: int, timeout: float, done: threading.Event) -> None:
    interval = min(1.0, timeout / 4)
    if done.wait(interval):
        return
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            _sample_until_done(conn, turn, timeout, interval, done)
    except Exception as exc:  # the watch is a safety net: the wait itself goes on regardless
        log.warning("cannot watch the claim turn waited for", extra={"error": repr(exc)})


def _sample_until_done(conn: Any, turn: int, timeout: float, interval: float, done: threading.Event) -> None:
    seen: tuple[Any, ...] | None = None
    since = time.monotonic()
    while not done.is_set():
        holder = sql.turn_holder_reading(conn, turn)
        if holder != seen:
            seen, since = holder, time.monotonic()
        elif holder is not None and time.monotonic() - since >= timeout:
            _end(conn, holder, time.monotonic() - since)
            return
        done.wait(interval)


def _end(conn: Any, holder: tuple[Any, ...], idle: float) -> None:
    pid = holder[0]
    ended = sql.end_backend(conn, pid)
    log.warning(
        "claim turn taken over: its owner made no progress",
        extra={"backend": pid, "idle_seconds": round(idle, 1), "ended": ended},
    )
