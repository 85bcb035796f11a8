"""The arrays packed for PostgreSQL (``queues.arrays``) read back as they were sent, through
the casts the statements put on them, and SQLAlchemy's array parameters are packed the same
way. Arrays are a PostgreSQL matter: on SQLite the same statements run an ``executemany``."""

from __future__ import annotations

import enum
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import Column, LargeBinary, MetaData, String, Table, event, insert, select

from queues import make_engine
from queues.arrays import BigintArray, BooleanArray, ByteaArray, DoubleArray, TextArray, array
from queues.database import conninfo
from queues.sql import among
from tests.conftest import PostgresDatabases


class Flag(enum.IntFlag):
    A = 1
    B = 4


@pytest.fixture
def pg_url(postgres: PostgresDatabases) -> Iterator[str]:
    url = postgres.create()
    yield url
    postgres.drop(url)


@pytest.fixture
def conn(pg_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(conninfo(pg_url)) as connection:
        yield connection


@pytest.mark.parametrize(
    ("values", "cast", "kind"),
    [
        (["a", "été", "", None], "text[]", TextArray),
        (["queue.one", None], "varchar(48)[]", TextArray),
        ([b"\x00\xff", b"", None, bytearray(b"x"), memoryview(b"yz")], "bytea[]", ByteaArray),
        ([0, -1, 2**62, None], "bigint[]", BigintArray),
        ([3, -7], "smallint[]", BigintArray),
        ([Flag.A, Flag.A | Flag.B], "integer[]", BigintArray),
        ([True, False, None], "boolean[]", BooleanArray),
        ([0.5, -2.25, None], "double precision[]", DoubleArray),
        ([None, None], "integer[]", TextArray),
        ([], "bytea[]", TextArray),
    ],
)
def test_an_array_reads_back_as_sent_through_its_cast(
    conn: psycopg.Connection[Any], values: list[Any], cast: str, kind: type
) -> None:
    packed = array(values)
    assert type(packed) is kind
    for placeholder in ("%s", "%b"):  # SQLAlchemy's automatic format and queues.bulk's binary one
        row = conn.execute(f"SELECT {placeholder}::{cast}", [packed]).fetchone()
        assert row is not None
        expected = [bytes(v) if isinstance(v, bytearray | memoryview) else v for v in values]
        assert row[0] == expected


def test_values_of_another_kind_stay_a_list_for_psycopg() -> None:
    when = [enum.Enum("E", "X").X]  # nothing queues.arrays packs
    assert type(array(when)) is list


def test_keys_pack_what_sqlalchemy_binds_and_among_finds_by_them(pg_url: str) -> None:
    engine = make_engine(pg_url)
    key, name = Column("key", LargeBinary, primary_key=True), Column("name", String(8))
    table = Table("keyed", MetaData(), key, name)
    try:
        table.create(engine)
        sent: list[type] = []

        def handed(*args: Any) -> None:
            sent.extend(type(value) for value in args[3].values())

        with engine.begin() as connection:
            connection.execute(insert(table), [{"key": bytes([n]), "name": f"n{n}"} for n in range(5)])
            event.listen(engine, "before_cursor_execute", handed)
            wanted = [b"\x01", b"\x03", b"x"]
            found = connection.execute(select(name).where(among(connection, key, wanted)))
            assert sorted(found.scalars()) == ["n1", "n3"]
            by_name = connection.execute(select(key).where(among(connection, name, ["n4", None])))
            assert list(by_name.scalars()) == [b"\x04"]
        assert sent == [ByteaArray, TextArray]  # what psycopg was handed for each lookup's keys
    finally:
        engine.dispose()
