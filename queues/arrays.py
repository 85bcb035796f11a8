"""One-dimensional arrays sent to PostgreSQL in its binary format, built here in one pass.

A batch sends its rows as one array a column (``queues.bulk``) and looks keys up as one array
(``queues.sql.among``): a wave of sessions opening sends a hundred arrays a second. psycopg's
own list dumpers are general (nested lists, NULLs anywhere, the smallest integer type that
fits), which costs a scan of the list to choose a dumper and a Python call an element; for a
list given in text format (SQLAlchemy's ``%s``) it also quotes every element, bytea as hex.
The lists built with :func:`array` carry their element type, so their dumper knows the
array's type at once and packs it in one pass. Statements cast their array parameters
(``::BYTEA[]``, ``::VARCHAR(48)[]``...), so the element types here are the widest of each
kind: text, bytea, bigint, boolean, double precision."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from typing import Any

import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format
from sqlalchemy import Dialect
from sqlalchemy.dialects import postgresql
from sqlalchemy.types import TypeDecorator

_DIMENSION = struct.Struct("!iiiii")  # dimensions, has NULLs, element type, length, lower bound
_EMPTY = struct.Struct("!iii")  # no dimension, no NULL, element type
_LENGTH = struct.Struct("!i")
_NULL = _LENGTH.pack(-1)
_BIGINT = struct.Struct("!iq")  # an element's length and value
_DOUBLE = struct.Struct("!id")
_TRUE, _FALSE = b"\x00\x00\x00\x01\x01", b"\x00\x00\x00\x01\x00"


def _text(item: str) -> bytes:
    data = item.encode()
    return _LENGTH.pack(len(data)) + data


def _bytea(item: bytes | bytearray | memoryview) -> bytes:
    return _LENGTH.pack(len(item)) + bytes(item)


def _bigint(item: int) -> bytes:
    return _BIGINT.pack(8, item)


def _double(item: float) -> bytes:
    return _DOUBLE.pack(8, item)


def _boolean(item: bool) -> bytes:
    return _TRUE if item else _FALSE


class _Array(list[Any]):
    """A list whose elements (or None) are all of one kind, sent as an array of ``element``."""

    __slots__ = ()
    element = 0  # the element type's oid
    array = 0  # the array type's oid
    encode: Callable[[Any], bytes]


def _kind(name: str, element: int, array_oid: int, encode: Callable[[Any], bytes]) -> type[_Array]:
    attributes = {"__slots__": (), "element": element, "array": array_oid, "encode": staticmethod(encode)}
    return type(name, (_Array,), attributes)


TextArray = _kind("TextArray", 25, 1009, _text)
ByteaArray = _kind("ByteaArray", 17, 1001, _bytea)
BigintArray = _kind("BigintArray", 20, 1016, _bigint)
DoubleArray = _kind("DoubleArray", 701, 1022, _double)
BooleanArray = _kind("BooleanArray", 16, 1000, _boolean)

# Checked in this order: a bool is an int, and an IntEnum or StrEnum member is its base type.
_KINDS: tuple[tuple[type | tuple[type, ...], type[_Array]], ...] = (
    (bool, BooleanArray),
    (int, BigintArray),
    (str, TextArray),
    ((bytes, bytearray, memoryview), ByteaArray),
    (float, DoubleArray),
)


def array(values: Iterable[Any]) -> list[Any]:
    """``values`` as a list that is sent as a PostgreSQL array of their kind (text if they
    are all None or none at all: the statement's cast makes it what the column is). Values of
    another kind stay a plain list, for psycopg's own dumpers."""
    items = list(values)
    first = next((item for item in items if item is not None), None)
    if first is None:
        return TextArray(items)
    for kind, wrapper in _KINDS:
        if isinstance(first, kind):
            return wrapper(items)
    return items


def encode(items: _Array) -> bytes:
    """The binary form of an array: its header, then each element's length and bytes."""
    if not items:
        return _EMPTY.pack(0, 0, items.element)
    encode_item = items.encode
    parts = [_NULL if item is None else encode_item(item) for item in items]
    has_null = 1 if None in items else 0
    return _DIMENSION.pack(1, has_null, items.element, len(items), 1) + b"".join(parts)


def _dumper(wrapper: type[_Array]) -> type[Dumper]:
    class ArrayDumper(Dumper):
        format = Format.BINARY
        oid = wrapper.array

        def dump(self, obj: Any) -> bytes:
            return encode(obj)

    ArrayDumper.__name__ = f"{wrapper.__name__}Dumper"
    return ArrayDumper


for _, _wrapper in _KINDS:
    psycopg.adapters.register_dumper(_wrapper, _dumper(_wrapper))


class Keys(TypeDecorator[Any]):
    """An array parameter bound through SQLAlchemy, packed by :func:`array` (SQLAlchemy's own
    ARRAY hands psycopg a plain list, which goes in text, every element quoted). A decorator,
    not a subclass: the dialect swaps an ARRAY subclass for its own array type, processor
    and all."""

    impl = postgresql.ARRAY
    cache_ok = True

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any]:
        return _bound


def _bound(value: Any) -> Any:
    return value if value is None else array(value)
