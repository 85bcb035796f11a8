"""Throw-away databases for benchmarks: a temporary SQLite file, or a PostgreSQL
database created on a server and dropped afterwards, so a benchmark never
touches real data."""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from sqlalchemy.engine import make_url

from queues.database import conninfo

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
_SERIALS = itertools.count()


@contextmanager
def scratch_database(kind: str, pg_url: str = DEFAULT_PG_URL, label: str = "bench") -> Iterator[str]:
    """Yield the URL of an empty database of ``kind`` that is removed afterwards."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix=f"broker-{label}-") as directory:
            yield f"sqlite:///{Path(directory) / 'bench.db'}"
        return
    name = f"broker_{label}_{os.getpid()}_{next(_SERIALS)}"  # several may be in use at once
    admin = conninfo(pg_url)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(pg_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
