"""Recording the statements a test's code sends to the database."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from psycopg import pq
from sqlalchemy import Connection, Engine, event

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


@contextmanager
def exchanges(engine: Engine, *held: Connection) -> Iterator[list[list[str]]]:
    """On PostgreSQL, what the connections checked out of ``engine`` during the block (and the
    ``held`` ones, checked out before it) send the server, one list per exchange (what the
    client sends before it waits for the answer: up to a Sync, or a simple query alone), each
    statement named by its first word; an empty list is an exchange of a prepared statement
    alone. Read off libpq's protocol trace; on SQLite, which has no exchanges, always empty."""
    found: list[list[str]] = []
    if engine.dialect.name != "postgresql":
        yield found
        return
    traces: list[tuple[Any, Any]] = []

    def checkout(dbapi_connection: Any, *_args: object) -> None:
        trace = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed once read, after the block)
        pgconn = dbapi_connection.pgconn
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
        traces.append((pgconn, trace))

    for connection in held:
        checkout(connection.connection.dbapi_connection)
    event.listen(engine, "checkout", checkout)
    try:
        yield found
    finally:
        event.remove(engine, "checkout", checkout)
        for pgconn, trace in traces:
            pgconn.untrace()
            trace.seek(0)
            found += _exchanges(trace.read())
            trace.close()


def _exchanges(trace: str) -> list[list[str]]:
    """libpq trace lines: ``F<TAB>length<TAB>Parse<TAB> "name" "statement" ...`` and the like."""
    done: list[list[str]] = []
    current: list[str] = []
    for line in trace.splitlines():
        fields = line.split("\t")
        if len(fields) < 3 or fields[0] != "F":
            continue
        kind, rest = fields[2], fields[3] if len(fields) > 3 else ""
        if kind == "Query":
            done.append([_first_word(rest)])
        elif kind == "Parse":
            current.append(_first_word(rest.split('"', 3)[3]))
        elif kind == "Sync":
            done.append(current)
            current = []
    return done


def _first_word(text: str) -> str:
    return text.split()[0].strip('"').upper()
