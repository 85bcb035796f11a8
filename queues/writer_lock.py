"""Handing SQLite's one write lock from writer to writer without a gap.

SQLite lets one transaction write at a time; a writer that finds the database locked
can only sleep and try again (``queues.database._begin_immediate`` retries every
0.1-1 ms). Under a steady stream of short writers (publishers putting one message each,
the router writing a batch) the lock then sits free while every contender sleeps, and
the longest sleepers lose again and again: the measured result was a put-to-delivery
p99 of 50-60 ms at 1,000 publications/s (``docs/performance.md``).

So every writing transaction of this package first takes an exclusive ``flock`` on a
file beside the database (``<database>-writer``) and drops it right after its COMMIT
or ROLLBACK. The kernel wakes a waiter the moment the lock is dropped, and SQLite's
own lock is then free for it. Writers that do not use this package (the ``sqlite3``
shell, another program) still work: they meet SQLite's lock, and the retry loop
behind this one handles them as before.

A writer waits for the one before it however long that takes, as PostgreSQL's row
locks do; a process that dies drops its locks with it (the kernel's doing). A thread
that already holds the lock and opens a second writing transaction does not wait for
itself: that transaction meets SQLite's lock instead, which fails after the busy
timeout as it always did.
"""

from __future__ import annotations

import fcntl
import os
import threading
from typing import Any

from sqlalchemy import Engine, event

from queues.companions import companion


class WriterLock:
    """The writer lock of one SQLite database file, shared by every engine on it in this process.

    Each connection opens the lock file once and keeps it open while it lives (a ``flock``
    belongs to an open file, so every connection's is its own): a transaction costs a lock and
    an unlock, not an open and a close besides."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._files: dict[int, int] = {}  # id(DBAPI connection) -> its descriptor of the lock file
        self._held: dict[int, tuple[int, int]] = {}  # id(DBAPI connection) -> (fd, thread id)
        self._threads: dict[int, int] = {}  # thread id -> how many of its connections hold it
        self._mutex = threading.Lock()

    def acquire(self, dbapi_connection: Any) -> None:
        """Wait for the lock for ``dbapi_connection``'s transaction (unless it has it, or
        its thread holds it through another connection)."""
        key, me = id(dbapi_connection), threading.get_ident()
        with self._mutex:
            if key in self._held or self._threads.get(me):
                return
            fd = self._files.get(key)
        if fd is None:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            with self._mutex:
                self._files[key] = fd
        fcntl.flock(fd, fcntl.LOCK_EX)
        with self._mutex:
            self._held[key] = (fd, me)
            self._threads[me] = self._threads.get(me, 0) + 1

    def held_here(self) -> bool:
        """Whether the calling thread holds the lock (through any of its connections)."""
        with self._mutex:
            return bool(self._threads.get(threading.get_ident()))

    def release(self, dbapi_connection: Any) -> None:
        """Drop the lock if ``dbapi_connection`` holds it (after its COMMIT or ROLLBACK, or
        when it is closed)."""
        raw = getattr(dbapi_connection, "dbapi_connection", dbapi_connection)  # a pool proxy
        with self._mutex:
            held = self._held.pop(id(raw), None)
            if held is None:
                return
            fd, owner = held  # the thread that took it, whichever thread closes the connection
            if self._threads.get(owner, 0) > 1:
                self._threads[owner] -= 1
            else:
                self._threads.pop(owner, None)
        fcntl.flock(fd, fcntl.LOCK_UN)

    def forget(self, dbapi_connection: Any) -> None:
        """``dbapi_connection`` is closed: drop its lock if it holds it, and close its file."""
        self.release(dbapi_connection)
        raw = getattr(dbapi_connection, "dbapi_connection", dbapi_connection)
        with self._mutex:
            fd = self._files.pop(id(raw), None)
        if fd is not None:
            os.close(fd)

    def install(self, engine: Engine) -> None:
        """Drop the lock after every COMMIT and ROLLBACK of ``engine``'s connections, and
        whenever one is closed or invalidated. The dialect's own ``do_commit`` and
        ``do_rollback`` are wrapped: SQLAlchemy's transaction events fire before the
        database has committed, and the lock must outlast the COMMIT."""
        dialect = engine.dialect
        commit, rollback = dialect.do_commit, dialect.do_rollback

        def do_commit(dbapi_connection: Any) -> None:
            try:
                commit(dbapi_connection)
            finally:
                self.release(dbapi_connection)

        def do_rollback(dbapi_connection: Any) -> None:
            try:
                rollback(dbapi_connection)
            finally:
                self.release(dbapi_connection)

        # This engine's dialect only (each engine has its own): SQLAlchemy has no event after a
        # COMMIT or ROLLBACK, and the lock must be released after the one that ends the write.
        dialect.do_commit = do_commit  # type: ignore[method-assign]
        dialect.do_rollback = do_rollback  # type: ignore[method-assign]
        for name in ("close", "close_detached", "invalidate", "soft_invalidate"):
            event.listen(engine, name, self._on_close)

    def _on_close(self, dbapi_connection: Any, *_: Any) -> None:
        self.forget(dbapi_connection)


_LOCKS: dict[str, WriterLock] = {}
_LOCKS_MUTEX = threading.Lock()


def writer_lock(database: str | None) -> WriterLock | None:
    """The process's writer lock for the SQLite file ``database``; None for an in-memory one."""
    path = companion(database, "-writer")
    if path is None:
        return None
    with _LOCKS_MUTEX:
        lock = _LOCKS.get(path)
        if lock is None:
            lock = _LOCKS[path] = WriterLock(path)
        return lock
