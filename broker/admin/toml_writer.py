"""TOML text from plain values: what ``tomllib`` (read-only) reads back to the same values.

The configuration file (``broker.admin.config_file``) has a fixed shape, so this writes only
what it needs: tables, arrays of tables, strings, integers, booleans and arrays of those
scalars. Within a table its scalar keys come first, in the order given, then its tables, then
its arrays of tables, each entry under its own ``[[header]]`` after a blank line, so that a
diff of two files shows one changed line per changed value. Strings are basic strings on one
line: quotes, backslashes and control characters escaped, every other character as it is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

MIN_INTEGER, MAX_INTEGER = -(2**63), 2**63 - 1  # TOML integers are 64-bit
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
_ESCAPED = re.compile(r'["\\\x00-\x1f\x7f]')
_SURROGATE = re.compile("[\ud800-\udfff]")

Scalar = str | int | bool


def dumps(document: Mapping[str, Any], *, comments: Sequence[str] = ()) -> str:
    """``document`` as TOML text, after ``comments`` (one ``#`` line each)."""
    lines = [f"# {comment}".rstrip() for comment in comments]
    body = _table(document, ())
    if lines and body:
        lines.append("")
    return "\n".join([*lines, *body]) + "\n"


def _table(table: Mapping[str, Any], path: tuple[str, ...]) -> list[str]:
    scalars: list[str] = []
    tables: list[tuple[str, Mapping[str, Any]]] = []
    arrays: list[tuple[str, Sequence[Mapping[str, Any]]]] = []
    for key, value in table.items():
        if isinstance(value, Mapping):
            tables.append((key, value))
        elif _is_array_of_tables(value):
            arrays.append((key, value))
        else:
            scalars.append(f"{_key(key)} = {_value(value, (*path, key))}")
    lines = scalars
    for key, sub in tables:
        lines += _section(f"[{_header((*path, key))}]", _table(sub, (*path, key)), lines)
    for key, entries in arrays:
        for entry in entries:
            lines += _section(f"[[{_header((*path, key))}]]", _table(entry, (*path, key)), lines)
    return lines


def _section(header: str, body: list[str], before: list[str]) -> list[str]:
    return ["", header, *body] if before else [header, *body]


def _is_array_of_tables(value: Any) -> bool:
    return isinstance(value, list | tuple) and bool(value) and all(isinstance(v, Mapping) for v in value)


def _header(path: tuple[str, ...]) -> str:
    return ".".join(_key(part) for part in path)


def _key(key: str) -> str:
    if not isinstance(key, str):
        raise TypeError(f"a TOML key is a string, not {type(key).__name__}")
    return key if _BARE_KEY.fullmatch(key) else _string(key)


def _value(value: Any, where: tuple[str, ...]) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if not MIN_INTEGER <= value <= MAX_INTEGER:
            raise ValueError(f"{'.'.join(where)}: {value} does not fit a TOML integer (64 bits)")
        return str(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list | tuple):
        if any(isinstance(item, Mapping | list | tuple) for item in value):
            raise TypeError(f"{'.'.join(where)}: only arrays of scalars or of tables are written")
        return "[" + ", ".join(_value(item, where) for item in value) + "]"
    raise TypeError(f"{'.'.join(where)}: {type(value).__name__} has no TOML form here")


def _string(text: str) -> str:
    """A basic string. A lone surrogate is no Unicode scalar value: TOML cannot hold it."""
    if _SURROGATE.search(text):
        raise ValueError(f"{text!r} holds a lone surrogate, which TOML cannot represent")
    return '"' + _ESCAPED.sub(_escape, text) + '"'


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _SHORT_ESCAPES.get(char) or f"\\u{ord(char):04X}"
