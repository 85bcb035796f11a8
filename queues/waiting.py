"""Waking getters when messages arrive, without busy polling.

Every commit that puts messages announces the queues it touched to this
process's waiters at once. Other processes are heard through the database:
PostgreSQL delivers ``pg_notify`` to a LISTEN connection. SQLite has no such
channel, so the processes of one database file make their own: each watching
process binds a Unix datagram socket in ``<database>-wake/``, and a commit that
put messages sends the queues' names to every socket there (:class:`WakeSockets`).
A watcher also reads ``PRAGMA data_version`` (it changes when any other connection
commits; reading it touches no table) every ``sqlite_backstop_seconds``, for
writers that send nothing (another program, the Spark merge) and datagrams lost
to a full buffer; where no socket can be bound it reads it every 2 ms, as it
always did. Waiters also wake at least every ``fallback_seconds`` and look for
themselves, so a lost notification or a broken LISTEN connection delays
delivery, never stops it.
"""

from __future__ import annotations

import logging
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from queues.companions import companion
from queues.database import conninfo
from queues.sql import NOTIFY_CHANNEL

log = logging.getLogger(__name__)

SQLITE_POLL_SECONDS = 0.002  # data_version, where no wake-up socket can be bound
SQLITE_BACKSTOP_SECONDS = 0.1  # data_version beside the sockets
# A datagram names the queues; past this many bytes it says "something" instead.
MAX_DATAGRAM = 8192
MAX_BACKOFF = 1.0  # between attempts to watch again: arrivals are seen within a second of the return
EVERYTHING = b"*"
MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes with its NUL; longer goes through /proc


class WakeSockets:
    """The wake-up sockets of the processes watching one SQLite database.

    Each watcher binds ``<database>-wake/<pid>-<n>.sock``; senders list the directory
    (again only when its modification time changed) and send to every socket but
    their own. A socket whose process died refuses the datagram and is removed. A
    socket's address may not pass 108 bytes, so a deep directory is reached through
    ``/proc/self/fd`` and a descriptor of it (Linux), as a database in a container's
    volume often is."""

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)
        self._listing: tuple[int, list[str]] = (-1, [])
        self._sender: socket.socket | None = None
        self._directory_fd: int | None = None
        self._lock = threading.Lock()

    def bind(self) -> tuple[socket.socket, str] | None:
        """A socket of this process in the directory and its name; None where none can
        be bound (no AF_UNIX, a read-only or unusable directory)."""
        if not hasattr(socket, "AF_UNIX"):
            return None
        name = f"{os.getpid()}-{id(self):x}.sock"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self.directory.mkdir(exist_ok=True)
            (self.directory / name).unlink(missing_ok=True)
            with self._lock:
                listener.bind(self._address(name))
        except OSError as exc:
            listener.close()
            log.info("no wake-up socket in %s (%s); polling instead", self.directory, exc)
            return None
        return listener, name

    def send(self, queues: Iterable[str], own: str | None) -> None:
        """Tell every other watcher which queues a commit put messages on."""
        payload = ",".join(sorted(set(queues))).encode()
        if len(payload) > MAX_DATAGRAM:
            payload = EVERYTHING
        with self._lock:
            for name in self._names():
                if name != own:
                    self._send(payload, name)

    def wake(self, name: str) -> None:
        """Unblock the watcher reading socket ``name`` (it is being closed)."""
        with self._lock:
            self._send(EVERYTHING, name)

    def remove(self, name: str) -> None:
        (self.directory / name).unlink(missing_ok=True)

    def _send(self, payload: bytes, name: str) -> None:
        if self._sender is None:
            self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sender.setblocking(False)
        try:
            self._sender.sendto(payload, self._address(name))
        except (ConnectionRefusedError, FileNotFoundError):
            self.remove(name)  # its process is gone
        except OSError:
            pass  # a full buffer: that watcher's backstop reading finds the commit

    def _address(self, name: str) -> str:
        path = str(self.directory / name)
        if len(path.encode()) < MAX_SOCKET_PATH:
            return path
        if self._directory_fd is None:
            self._directory_fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        return f"/proc/self/fd/{self._directory_fd}/{name}"

    def _names(self) -> list[str]:
        try:
            changed = self.directory.stat().st_mtime_ns
            if changed != self._listing[0]:
                self._listing = (changed, [n for n in os.listdir(self.directory) if n.endswith(".sock")])
        except OSError:  # no directory (nobody ever waited), or something else in its way
            return []
        return self._listing[1]

    def close(self) -> None:
        with self._lock:
            if self._sender is not None:
                self._sender.close()
                self._sender = None
            if self._directory_fd is not None:
                os.close(self._directory_fd)
                self._directory_fd = None


class Arrivals:
    """The queues announced since the last :meth:`take`, for one watcher of many queues (a
    listener with a session queue per client): a token over all of them would change with
    any of them, and finding which would look at every one on every announcement."""

    def __init__(self, notifier: ArrivalNotifier) -> None:
        self._notifier = notifier
        self._cond = threading.Condition()
        self._names: set[str] = set()
        self._everything = False

    def added(self, names: Iterable[str]) -> None:
        with self._cond:
            self._names.update(names)
            self._cond.notify()

    def anything(self) -> None:
        """Something changed, nobody knows where (the backstop reading, a lost connection)."""
        with self._cond:
            self._everything = True
            self._cond.notify()

    def take(self, timeout: float) -> tuple[set[str], bool]:
        """The queues announced since the last take, and whether anything else may have
        changed; waits up to ``timeout`` for either."""
        with self._cond:
            if not self._names and not self._everything:
                self._cond.wait(timeout)
            taken = self._names, self._everything
            self._names, self._everything = set(), False
        return taken

    def close(self) -> None:
        self._notifier.forget(self)


COUNTER_GROUPS = 4096


def _group(queue: str) -> int:
    return hash(queue) % COUNTER_GROUPS


class ArrivalNotifier:
    """Arrival counters that waiters can block on: one per group of queues (a queue's group is
    its name's hash modulo ``COUNTER_GROUPS``), so that a process that sees a million queue
    names come and go (MQTT clean sessions) keeps the same few kilobytes; two queues sharing a
    group only wake each other's waiters, who then look and find nothing."""

    def __init__(
        self,
        engine: Engine,
        *,
        sqlite_backstop_seconds: float = SQLITE_BACKSTOP_SECONDS,
        fallback_seconds: float = 1.0,
    ) -> None:
        self._engine = engine
        self._backstop = sqlite_backstop_seconds
        self.fallback_seconds = fallback_seconds
        directory = companion(engine.url.database, "-wake") if engine.dialect.name == "sqlite" else None
        self._sockets = WakeSockets(directory) if directory is not None else None
        self._own: str | None = None  # this notifier's socket, once its watcher bound one
        self._cond = threading.Condition()
        self._versions = [0] * COUNTER_GROUPS
        self._everything = 0  # bumped when we only know that *something* changed
        self._observers: set[Arrivals] = set()
        self._watcher: threading.Thread | None = None
        self._stop = threading.Event()

    def token(self, queues: Iterable[str]) -> int:
        """A value that changes whenever a message may have arrived on ``queues``."""
        with self._cond:
            return self._everything + sum(self._versions[_group(q)] for q in queues)

    def observe(self) -> Arrivals:
        """What is announced from now on, queue by queue (:class:`Arrivals`); ``close`` it."""
        self._ensure_watcher()
        arrivals = Arrivals(self)
        with self._cond:
            self._observers.add(arrivals)
        return arrivals

    def forget(self, arrivals: Arrivals) -> None:
        with self._cond:
            self._observers.discard(arrivals)

    def announce(self, queues: Iterable[str]) -> None:
        names = list(queues)
        with self._cond:
            for name in names:
                self._versions[_group(name)] += 1
            self._cond.notify_all()
            for observer in self._observers:
                observer.added(names)

    def committed(self, queues: Iterable[str]) -> None:
        """A commit put messages on ``queues``: wake this process's waiters, and on SQLite
        the other processes' too (PostgreSQL's commit has notified them already)."""
        names = list(queues)
        self.announce(names)
        if self._sockets is not None:
            self._sockets.send(names, self._own)

    def announce_everything(self) -> None:
        with self._cond:
            self._everything += 1
            self._cond.notify_all()
            for observer in self._observers:
                observer.anything()

    def wait(self, queues: Iterable[str], token: int, timeout: float) -> None:
        """Block until ``token`` is stale, or for at most ``timeout`` (and never longer
        than the fallback slice); the caller then looks at its queues again."""
        names = list(queues)
        self._ensure_watcher()
        deadline = time.monotonic() + max(0.0, min(timeout, self.fallback_seconds))
        with self._cond:
            while self._everything + sum(self._versions[_group(q)] for q in names) == token:
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
        if self._sockets is not None:
            if self._own is not None:
                self._sockets.wake(self._own)
            self._sockets.close()

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
        """Watch until closed; a failed watch (the file unreadable for a while) is logged once
        and started again after a back-off, announcing everything: waiters look again."""
        if self._sockets is None:
            return  # in-memory databases live in one process: local announcements suffice
        backoff, failed = 0.1, ""
        while not self._stop.is_set():
            try:
                self._watch_sqlite_once()
            except (sqlite3.Error, OSError) as exc:
                if str(exc) != failed:
                    log.warning("sqlite arrival watcher failed; retrying", extra={"error": str(exc)})
                failed = str(exc)
                self.announce_everything()
                self._stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)

    def _watch_sqlite_once(self) -> None:
        database = self._engine.url.database
        assert self._sockets is not None and database is not None  # a file: it has wake-up sockets
        bound = self._sockets.bind()
        listener, own = bound if bound is not None else (None, None)
        interval = SQLITE_POLL_SECONDS if listener is None else self._backstop
        try:
            connection = sqlite3.connect(database, check_same_thread=False, isolation_level=None)
            try:
                self._follow(connection, listener, own, interval)
            finally:
                connection.close()
        finally:
            self._own = None
            if listener is not None and own is not None:
                listener.close()
                self._sockets.remove(own)

    def _follow(
        self, connection: sqlite3.Connection, listener: socket.socket | None, own: str | None, interval: float
    ) -> None:
        """Announce the datagrams ``listener`` receives, and everything whenever the data
        version read every ``interval`` seconds has changed."""
        last = connection.execute("PRAGMA data_version").fetchone()[0]
        self._own = own
        # A commit between the waiter's look and this first reading would go unnoticed.
        self.announce_everything()
        reading_due = time.monotonic() + interval
        while not self._stop.is_set():
            wait = max(0.0, reading_due - time.monotonic())
            if listener is None:
                self._stop.wait(wait)
            else:
                self._receive(listener, wait)
            if time.monotonic() < reading_due:
                continue
            reading_due = time.monotonic() + interval
            version = connection.execute("PRAGMA data_version").fetchone()[0]
            if version != last:
                last = version
                self.announce_everything()

    def _receive(self, listener: socket.socket, timeout: float) -> None:
        """Announce what the next datagram names, if one comes within ``timeout``."""
        listener.settimeout(timeout)
        try:
            payload = listener.recv(MAX_DATAGRAM)
        except (TimeoutError, BlockingIOError):  # a timeout of 0 makes the socket non-blocking
            return
        if payload == EVERYTHING:
            self.announce_everything()
        else:
            self.announce(payload.decode().split(","))

    def _watch_pg(self) -> None:
        import psycopg

        settings = conninfo(self._engine.url)  # every host the URL names, and its password
        backoff, lost = 0.1, False
        while not self._stop.is_set():
            try:
                with psycopg.connect(settings, autocommit=True) as connection:
                    connection.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    backoff = 0.1
                    if lost:
                        log.info("arrival listener connected again")
                    lost = False
                    # Anything put while we were not listening must not be missed.
                    self.announce_everything()
                    self._listen(connection)
            except psycopg.Error as exc:
                if not lost:  # once per outage: the reconnections that fail meanwhile say nothing new
                    log.warning(
                        "arrival listener lost its connection; reconnecting", extra={"error": str(exc)}
                    )
                lost = True
                self.announce_everything()
                self._stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)

    def _listen(self, connection: Any) -> None:
        while not self._stop.is_set():
            # notifies() yields each notification as it arrives and ends after the timeout:
            # announce at once rather than after collecting the whole half second.
            for notification in connection.notifies(timeout=0.5):
                self.announce(notification.payload.split(","))
