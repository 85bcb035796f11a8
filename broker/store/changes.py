"""The state's version and change log: how every process learns what others changed.

Each writing transaction takes the next number from ``psb_meta`` (a row lock on
PostgreSQL, the single writer on SQLite, so versions commit in order) and logs the
keys it changed under it; a reader compares one number per batch and re-reads only
those keys (``broker.store.state_store``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, delete, select, update

from broker.store.schema import changes, meta
from queues import sql
from queues.bulk import insert_rows
from queues.ids import now_ms

SUBSCRIPTION = "subscription"
RETAINED = "retained"
ACL = "acl"
NEIGHBOUR = "neighbour"
CHANGE_LOG_RETENTION_MS = 15 * 60 * 1000

# ACL rules and groups change as a whole: one key stands for all of them.
ACL_KEY = b"\x00" * 24


def current_version(conn: Connection) -> int:
    """Asked by every batch of every router: compiled once."""
    ((version,),) = sql.fetch_cached(conn, "state_version", _version_statement)
    return int(version)


def version_now(conn: Connection) -> int:
    """The version as committed now, read on an idle PostgreSQL connection outside any
    transaction, in one exchange (``queues.sql.fetch_outside_transaction``)."""
    ((version,),) = sql.fetch_outside_transaction(conn, "state_version", _version_statement)
    return int(version)


def _version_statement() -> Any:
    return select(meta.c.version).where(meta.c.id == 1)


CHANGE_COLUMNS = ("version", "entity", "entity_key", "changed_at")


def log_changes(conn: Connection, entries: Sequence[tuple[str, bytes]]) -> int:
    """Take the next state version (serialising writers until commit) and log ``entries``."""
    version = int(
        conn.execute(
            update(meta).where(meta.c.id == 1).values(version=meta.c.version + 1).returning(meta.c.version)
        ).scalar_one()
    )
    now = now_ms()
    rows = [(version, entity, key, now) for entity, key in dict.fromkeys(entries)]
    insert_rows(conn, changes, CHANGE_COLUMNS, rows)
    return version


def prune_changes(conn: Connection, now: int) -> int:
    """Forget change-log entries old enough that every live process has read them."""
    stmt = delete(changes).where(changes.c.changed_at < now - CHANGE_LOG_RETENTION_MS)
    return conn.execute(stmt).rowcount
