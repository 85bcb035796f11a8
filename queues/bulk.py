"""Statements over many rows at once, written once for both dialects.

A batch writes a row per session, subscription or change it touched. Run once per row,
psycopg spends 30 us of Python on each (a pipelined Bind/Execute and its result), more than
the routing that asked for it; a statement written here runs once for all of them. On
PostgreSQL the rows go as one binary array parameter per column, unnested side by side into
a subquery named like the columns (:func:`parameters`), 3 us a row at 150 rows; on SQLite,
where a statement is a function call, as an ``executemany`` of the compiled statement, which
skips SQLAlchemy's processing of every row's parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from functools import partial
from typing import Any, cast

from sqlalchemy import Connection, Table, bindparam, func, insert, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.dml import Insert
from sqlalchemy.sql.elements import ClauseElement, ColumnElement

from queues.arrays import array


def insert_rows(
    conn: Connection,
    table: Table,
    columns: tuple[str, ...],
    rows: Sequence[tuple[Any, ...]],
    *,
    unless: tuple[str, ...] = (),
) -> None:
    """Insert rows (each the values of ``columns``) in one statement, which reads nothing
    back (unlike a COPY it may go in a pipeline with the rest of a batch's writes). With
    ``unless`` (a unique key's columns), a row whose key exists already is left out."""
    build = partial(_insertion, table, columns, unless)
    execute_rows(conn, (table.name, columns, unless), build, columns, rows, keyed=False)


def insert_mappings(
    conn: Connection, table: Table, rows: Sequence[Mapping[str, Any]], *, unless: tuple[str, ...] = ()
) -> None:
    """:func:`insert_rows` of rows given as column -> value mappings, each with the columns of
    the first."""
    if rows:
        columns = tuple(rows[0])
        values = [tuple(row[name] for name in columns) for row in rows]
        insert_rows(conn, table, columns, values, unless=unless)


def _insertion(table: Table, columns: tuple[str, ...], unless: tuple[str, ...], dialect: str) -> Insert:
    named = parameters(dialect, {name: table.c[name] for name in columns})
    if dialect != "postgresql":
        plain = sqlite.insert(table).values(dict(named))
        return plain.on_conflict_do_nothing(index_elements=list(unless)) if unless else plain
    rows = select(*(named[name] for name in columns))
    if not unless:
        return insert(table).from_select(list(columns), rows)
    unnested = postgresql.insert(table).from_select(list(columns), rows)
    return unnested.on_conflict_do_nothing(index_elements=list(unless))


def execute_rows(
    conn: Connection,
    name: Hashable,
    build: Callable[[str], ClauseElement],
    columns: tuple[str, ...],
    rows: Sequence[tuple[Any, ...]],
    *,
    keyed: bool = True,
) -> None:
    """A statement (``build(dialect)``, its parameters named as ``columns`` through
    :func:`parameters`) for many rows, reading nothing back: on SQLite an ``executemany`` of
    one row each, the cheaper there (no statement to compile per size); on PostgreSQL one
    execution, the rows as one array per column, through the driver.

    One that finds its rows by key (``keyed``) is planned for its parameters each time, never
    prepared: a prepared statement soon runs on a generic plan, and one made while the table
    was small scans the whole table; the session tables grow by the dead rows of their churn
    until autovacuum comes, and every batch reads them all. Planned with the table's size of
    the moment, the lookup goes through the key's index once the table is more than a few
    pages (``docs/performance.md``)."""
    if not rows:
        return
    dialect = conn.dialect.name
    if dialect != "postgresql":
        execute_many(conn, name, partial(build, dialect), columns, rows)
        return
    statement = _ARRAY_STATEMENTS.get(name)
    if statement is None:
        # Binary parameters: psycopg sends a list given in text as an array literal, every
        # bytea in it escaped as hex (five times the time of the statement for a batch's runs).
        statement, _ = compiled(conn, name, partial(build, dialect))
        for column in columns:
            statement = statement.replace(f"%({column})s", f"%({column})b")
        _ARRAY_STATEMENTS[name] = statement
    driver = conn.connection.driver_connection
    assert driver is not None
    with driver.cursor() as cursor:
        params = dict(zip(columns, _as_arrays(rows), strict=True))
        cursor.execute(statement, params, prepare=False if keyed else None)


def _as_arrays(rows: Sequence[tuple[Any, ...]]) -> tuple[list[Any], ...]:
    """PostgreSQL: the rows as one array per column (see :func:`parameters`), each packed by
    ``queues.arrays``."""
    return tuple(array(column) for column in zip(*rows, strict=True))


def parameters(dialect: str, columns: Mapping[str, ColumnElement[Any]]) -> Mapping[str, ColumnElement[Any]]:
    """A statement's parameters for the values of ``columns``, named as its keys. On PostgreSQL
    the rows come as one array parameter per column (see :func:`_as_arrays`), unnested side by
    side into a subquery whose columns have the same names: one execution for every row.
    Elsewhere a plain parameter each, for an ``executemany`` of one row each."""
    if dialect != "postgresql":
        return {name: bindparam(name) for name in columns}
    named = select(
        *(
            func.unnest(bindparam(name, type_=postgresql.ARRAY(column.type))).label(name)
            for name, column in columns.items()
        )
    ).subquery("named")
    return {name: named.c[name] for name in columns}


def execute_many(
    conn: Connection,
    name: Hashable,
    build: Callable[[], ClauseElement],
    columns: tuple[str, ...],
    rows: Sequence[tuple[Any, ...]],
) -> None:
    """One statement for many rows (each the values of ``columns``, in that order), compiled
    once per dialect and handed to the driver as it is: SQLAlchemy's processing of every
    row's parameters cost more than the statement. Rows already in the order of a positional
    statement's parameters go through untouched."""
    statement, order = compiled(conn, name, build)
    if order is None:
        conn.exec_driver_sql(statement, [dict(zip(columns, row, strict=True)) for row in rows])
    elif order == columns:
        conn.exec_driver_sql(statement, list(rows))
    else:
        where = [columns.index(n) for n in order]
        conn.exec_driver_sql(statement, [tuple(row[i] for i in where) for row in rows])


def compiled(
    conn: Connection, name: Hashable, build: Callable[[], ClauseElement]
) -> tuple[str, tuple[str, ...] | None]:
    """``build()``'s SQL for the connection's dialect, compiled once, and the order of its
    parameters if they are positional (None: named)."""
    key = (conn.dialect.name, name)
    plan = _COMPILED.get(key)
    if plan is None:
        statement = cast(SQLCompiler, build().compile(dialect=conn.dialect))
        order = tuple(statement.positiontup or ()) if statement.positional else None
        plan = _COMPILED[key] = (statement.string, order)
    return plan


_COMPILED: dict[tuple[str, Hashable], tuple[str, tuple[str, ...] | None]] = {}
_ARRAY_STATEMENTS: dict[Hashable, str] = {}  # PostgreSQL's, by name
