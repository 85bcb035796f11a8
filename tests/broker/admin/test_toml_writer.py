"""broker.admin.toml_writer: whatever it writes, ``tomllib`` reads back as the same values (strings
with quotes, backslashes, newlines, control characters and any Unicode), in a diff-friendly shape."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.admin.toml_writer import MAX_INTEGER, MIN_INTEGER, dumps

scalars = st.one_of(
    st.text(),
    st.integers(min_value=MIN_INTEGER, max_value=MAX_INTEGER),
    st.booleans(),
)
keys = st.text(max_size=12)
tables: st.SearchStrategy[dict[str, Any]] = st.recursive(
    st.dictionaries(keys, st.one_of(scalars, st.lists(scalars, max_size=4)), max_size=5),
    lambda children: st.dictionaries(
        keys,
        st.one_of(
            scalars, st.lists(scalars, max_size=3), children, st.lists(children, min_size=1, max_size=3)
        ),
        max_size=5,
    ),
    max_leaves=25,
)


@given(tables)
def test_what_it_writes_reads_back_as_the_same_values(document: dict[str, Any]) -> None:
    assert tomllib.loads(dumps(document)) == document


@given(st.text())
def test_any_string_reads_back_as_itself(text: str) -> None:
    written = dumps({"value": text, text: 1})
    assert tomllib.loads(written) == {"value": text, text: 1}
    assert written.count("\n") == 2  # one line each, whatever the string holds


def test_control_characters_quotes_and_unicode_are_escaped_as_toml_says() -> None:
    text = dumps({"s": 'a"b\\c\nd\te\x00f\x7fg\x1bh é 中 🎉'})
    assert text == 's = "a\\"b\\\\c\\nd\\te\\u0000f\\u007Fg\\u001Bh é 中 🎉"\n'


def test_tables_and_arrays_of_tables_come_after_the_scalars_one_entry_each() -> None:
    document = {
        "queue": [{"name": "A", "max_depth": 5}, {"name": "B", "put_enabled": False}],
        "configuration": {"format": 1, "names": ["x", "y"]},
        "top": "first",
    }
    assert dumps(document, comments=["exported today", ""]) == (
        "# exported today\n"
        "#\n"
        "\n"
        'top = "first"\n'
        "\n"
        "[configuration]\n"
        "format = 1\n"
        'names = ["x", "y"]\n'
        "\n"
        "[[queue]]\n"
        'name = "A"\n'
        "max_depth = 5\n"
        "\n"
        "[[queue]]\n"
        'name = "B"\n'
        "put_enabled = false\n"
    )


def test_keys_that_are_not_bare_are_quoted() -> None:
    document = {"a b": {"x.y": 1, "": [{"é": True}]}}
    text = dumps(document)
    assert '[["a b".""]]' in text and '"x.y" = 1' in text
    assert tomllib.loads(text) == document


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (2**63, ValueError),
        (-(2**63) - 1, ValueError),
        ("lone \ud800 surrogate", ValueError),
        (None, TypeError),
        (1.5, TypeError),
        ([[1]], TypeError),
    ],
)
def test_what_toml_cannot_hold_is_refused(value: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        dumps({"value": value})
