"""A PostgreSQL primary with a synchronous streaming standby, built with Debian's tools on this
machine, for the failover test: ``initdb`` for the primary, ``pg_basebackup -R`` for the
standby, ``pg_ctl promote`` to make the standby the primary.

Commits on the primary wait until the standby has the transaction on disk
(``synchronous_standby_names``), so whatever the broker acknowledged before the primary went
away is on the standby it is promoted from. The setting is given to the primary after the base
backup (``ALTER SYSTEM``), so the promoted standby does not wait for a standby of its own, as a
failover manager's synchronous mode leaves it alone.
"""

from __future__ import annotations

import shutil
import time

import psycopg

from tests.e2e.processes import PG_BIN, PrivateCluster

STREAMING_SECONDS = 30.0


class Primary(PrivateCluster):
    """The primary, which the test takes away at once."""

    def crash(self) -> None:
        """Stop at once (``-m immediate``): no shutdown checkpoint, every connection cut, as a
        lost machine; the standby keeps what was replicated before."""
        self._pg_ctl("-m", "immediate", "stop")


class Standby(PrivateCluster):
    """A hot standby streaming from ``primary``."""

    def __init__(self, primary: PrivateCluster) -> None:
        super().__init__()
        self.primary = primary

    def create(self) -> None:
        """Copy the primary (``-R``: standby.signal and the primary's address), then start."""
        shutil.chown(self.root, "postgres", "postgres")
        self._as_postgres(
            PG_BIN / "pg_basebackup",
            *("-D", self.data, "-h", "127.0.0.1", "-p", self.primary.port, "-U", "postgres"),
            *("-R", "-X", "stream", "--checkpoint=fast", "--no-sync"),
        )
        self.start()

    def promote(self) -> None:
        """``pg_ctl promote``, returning once the standby accepts writes."""
        self._pg_ctl("promote")


def replicate_synchronously(primary: PrivateCluster) -> None:
    """Make every commit on ``primary`` wait for its standby, once the standby streams."""
    with psycopg.connect(primary.url, autocommit=True) as conn:
        _wait_for(conn, "streaming")
        conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
        conn.execute("SELECT pg_reload_conf()")
        _wait_for(conn, "sync")


def _wait_for(conn: psycopg.Connection, state: str) -> None:
    """Wait until the standby's replication connection is ``streaming``, or ``sync``."""
    deadline = time.monotonic() + STREAMING_SECONDS
    while True:
        row = conn.execute("SELECT state, sync_state FROM pg_stat_replication").fetchone()
        if row is not None and state in row:
            return
        assert time.monotonic() < deadline, f"the standby is not {state} after {STREAMING_SECONDS} s: {row}"
        time.sleep(0.05)
