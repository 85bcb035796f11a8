"""Files kept beside a SQLite database: the writer lock, the claimants' locks and the
wake-up sockets (``broker.db-writer``, ``broker.db-claims/``, ``broker.db-wake/``).

An in-memory database lives in one process, which needs none of them.
"""

from __future__ import annotations

import os


def companion(database: str | None, suffix: str) -> str | None:
    """The absolute path of ``database`` + ``suffix``; None for an in-memory database."""
    if not database or database == ":memory:" or database.startswith("file::memory:"):
        return None
    return os.path.abspath(database) + suffix
