"""Waking getters when messages arrive, without busy polling.

Every commit that puts messages announces the queues it touched to this
process's waiters at once. Other processes are heard through the database:
PostgreSQL delivers ``pg_notify`` to a LISTEN connection; SQLite has no such
channel, so a watcher reads ``PRAGMA data_version`` (it changes when any other
connection commits; reading it touches no table) every few milliseconds. Waiters
also wake at least every ``fallback_seconds`` and look for themselves, so a lost
notification or a broken LISTEN connection delays delivery, never stops it.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Engine

from queues.sql import NOTIFY_CHANNEL

log = logging.getLogger(__name__)


class ArrivalNotifier:
    """Per-queue arrival counters that waiters can block on."""

    def __init__(
        self,
        engine: Engine,
        *,
        sqlite_poll_seconds: float = 0.002,
        fallback_seconds: float = 1.0,
    ) -> None:
        self._engine = engine
        self._sqlite_poll = sqlite_poll_seconds
        self.fallback_seconds = fallback_seconds
        self._cond = threading.Condition()
        self._versions: dict[str, int] = {}
        self._everything = 0  # bumped when we only know that *something* changed
        self._watcher: threading.Thread | None = None
        self._stop = threading.Event()

    def token(self, queues: Iterable[str]) -> int:
        """A value that changes whenever a message may have arrived on ``queues``."""
        with self._cond:
            return self._everything + sum(self._versions.get(q, 0) for q in queues)

    def announce(self, queues: Iterable[str]) -> None:
        with self._cond:
            for name in queues:
                self._versions[name] = self._versions.get(name, 0) + 1
            self._cond.notify_all()

    def announce_everything(self) -> None:
        with self._cond:
            self._everything += 1
            self._cond.notify_all()

    def wait(self, queues: Iterable[str], token: int, timeout: float) -> None:
        """Block until ``token`` is stale, or for at most ``timeout`` (and never longer
        than the fallback slice); the caller then looks at its queues again."""
        names = list(queues)
        self._ensure_watcher()
        deadline = time.monotonic() + max(0.0, min(timeout, self.fallback_seconds))
        with self._cond:
            while self._everything + sum(self._versions.get(q, 0) for q in names) == token:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._cond.wait(remaining)

    def close(self) -> None:
        """Stop watching. The watcher thread notices within its poll interval and ends on
        its own (it is a daemon): joining it would make every short-lived client, such as
        a CLI command, wait for a LISTEN timeout on its way out."""
        self._stop.set()
        self._watcher = None

    def _ensure_watcher(self) -> None:
        if self._watcher is not None and self._watcher.is_alive():
            return
        with self._cond:
            if self._watcher is not None and self._watcher.is_alive():
                return
            target = self._watch_sqlite if self._engine.dialect.name == "sqlite" else self._watch_pg
            self._stop.clear()
            self._watcher = threading.Thread(target=target, name="queue-arrivals", daemon=True)
            self._watcher.start()

    def _watch_sqlite(self) -> None:
        database = self._engine.url.database
        if not database or database == ":memory:":
            return  # in-memory databases live in one process: local announcements suffice
        connection = sqlite3.connect(database, check_same_thread=False, isolation_level=None)
        try:
            last = connection.execute("PRAGMA data_version").fetchone()[0]
            # A commit between the waiter's look and this first reading would go unnoticed.
            self.announce_everything()
            while not self._stop.wait(self._sqlite_poll):
                version = connection.execute("PRAGMA data_version").fetchone()[0]
                if version != last:
                    last = version
                    self.announce_everything()
        except sqlite3.Error:
            log.exception("sqlite arrival watcher stopped; waiters fall back to polling")
        finally:
            connection.close()

    def _watch_pg(self) -> None:
        import psycopg

        # str(url) masks the password as "***"; the URL object keeps it.
        url = self._engine.url.set(drivername="postgresql")
        conninfo = url.render_as_string(hide_password=False)
        backoff = 0.1
        while not self._stop.is_set():
            try:
                with psycopg.connect(conninfo, autocommit=True) as connection:
                    connection.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    backoff = 0.1
                    # Anything put while we were not listening must not be missed.
                    self.announce_everything()
                    self._listen(connection)
            except psycopg.Error as exc:
                log.warning("arrival listener lost its connection: %s", exc)
                self.announce_everything()
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    def _listen(self, connection: Any) -> None:
        while not self._stop.is_set():
            # notifies() yields each notification as it arrives and ends after the timeout:
            # announce at once rather than after collecting the whole half second.
            for notification in connection.notifies(timeout=0.5):
                self.announce(notification.payload.split(","))
