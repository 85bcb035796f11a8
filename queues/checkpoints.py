"""WAL checkpoints for a SQLite queue manager, run beside the writers instead of inside them.

SQLite checkpoints automatically: the commit that takes the write-ahead log past
1,000 pages copies the log into the database file and syncs it before that
commit's caller gets control back. For the routing service that is one batch in
every few, which then takes several times as long, and every message waiting
behind it waits as long: that is the tail of the put-to-delivery latency. The
copying needs no lock that writers need (a PASSIVE checkpoint runs beside them),
so the service does it on a thread of its own, with its own connection, on the
machine's other core; its own connections then checkpoint only as a backstop,
when the log has grown far past what this thread keeps it to.

A PASSIVE checkpoint never waits and so can lag a steady stream of writers for
ever: the log is only reset when a checkpoint finds nothing left to copy. When
the log passes ``restart_frames`` the thread asks for a RESTART checkpoint,
which waits (briefly, through the busy timeout) for the writer in hand and
lets the next one start the log again from its beginning.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time

from sqlalchemy import Engine

log = logging.getLogger(__name__)

# What a connection of a process that runs a Checkpointer checkpoints by itself at
# (pages of the log): a backstop for when the thread cannot keep up.
BACKSTOP_PAGES = 16_384


class Checkpointer:
    """A daemon thread checkpointing one SQLite database file every ``interval`` seconds."""

    def __init__(
        self,
        engine: Engine,
        *,
        interval: float = 0.05,
        restart_frames: int = 8_192,
        busy_ms: int = 200,
    ) -> None:
        database = engine.url.database
        on_file = engine.dialect.name == "sqlite" and database not in (None, "", ":memory:")
        self.database = database if on_file else None
        self.interval = interval
        self.restart_frames = restart_frames
        self.busy_ms = busy_ms
        self.checkpoints = 0
        self.restarts = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def applies(self) -> bool:
        """Only a SQLite file has a write-ahead log to checkpoint."""
        return self.database is not None

    def __enter__(self) -> Checkpointer:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def start(self) -> None:
        if not self.applies or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="wal-checkpoints", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop and wait for the thread: a checkpoint in hand finishes first."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def _run(self) -> None:
        assert self.database is not None
        try:
            connection = sqlite3.connect(self.database, check_same_thread=False, isolation_level=None)
        except sqlite3.Error:
            log.exception("cannot open the database for checkpoints; the writers checkpoint themselves")
            return
        try:
            connection.execute(f"PRAGMA busy_timeout={self.busy_ms}")
            last = -1
            while not self._stop.wait(self.interval):
                version = connection.execute("PRAGMA data_version").fetchone()[0]
                if version != last:  # another connection committed since the last look
                    last = version
                    self.checkpoint(connection)
        except sqlite3.Error:
            log.exception("checkpoint thread stopped; the writers checkpoint themselves")
        finally:
            connection.close()

    def checkpoint(self, connection: sqlite3.Connection) -> None:
        """One PASSIVE checkpoint; a RESTART one if the log has grown past its bound."""
        started = time.perf_counter()
        busy, frames, copied = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        self.checkpoints += 1
        if frames >= self.restart_frames:
            busy, frames, copied = connection.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
            self.restarts += 1
            log.info(
                "write-ahead log restarted",
                extra={
                    "frames": frames,
                    "copied": copied,
                    "busy": busy,
                    "ms": round((time.perf_counter() - started) * 1000, 2),
                },
            )
