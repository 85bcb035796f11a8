"""Fixtures that run real ``broker serve`` processes, each test on its own database.

``brokers`` starts processes on the test's database (``database_url``: SQLite and PostgreSQL) and
kills, by pid, every one still alive at teardown. ``private_postgres`` is a PostgreSQL cluster of
the test's own, for the test that restarts the server under a running broker: the shared server
on 5432 is never stopped or restarted.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.processes import Brokers, PrivateCluster


@pytest.fixture
def brokers(database_url: str, tmp_path: Path) -> Iterator[Brokers]:
    group = Brokers(database_url, tmp_path)
    try:
        yield group
    finally:
        group.close()


@pytest.fixture
def private_postgres() -> Iterator[PrivateCluster]:
    if os.geteuid() != 0:  # pragma: no cover - the test machines run as root
        pytest.fail("the private PostgreSQL cluster is started through runuser, which needs root")
    cluster = PrivateCluster()
    try:
        cluster.create()
        yield cluster
    finally:
        cluster.remove()
