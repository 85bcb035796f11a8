"""Recording the statements a test's code sends to the database."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from sqlalchemy import Engine, event

from queues import sql


@contextmanager
def recorded(engine: Engine, containing: str = "") -> Iterator[list[str]]:
    """Every statement containing ``containing`` sent on ``engine``, whitespace folded: those
    SQLAlchemy executes, and the reads ``queues.sql`` runs on the driver's cursor (claims,
    definitions, ``fetch_cached``). Its bulk writes on the cursor (inserts, ``COPY``, the
    pipelined depth changes) are not seen."""
    seen: list[str] = []

    def record(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if containing in statement:
            seen.append(" ".join(statement.split()))

    fetch = sql._fetch

    def fetch_recorded(conn: Any, compiled: Any, params: Any) -> Any:
        if conn.engine is engine:
            record(conn, None, compiled.string)
        return fetch(conn, compiled, params)

    event.listen(engine, "before_cursor_execute", record)
    try:
        with mock.patch.object(sql, "_fetch", fetch_recorded):
            yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)
