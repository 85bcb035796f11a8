from __future__ import annotations

from dataclasses import fields
from types import SimpleNamespace

import pytest

from queues.definition import SETTABLE, QueueDefinition, check_attributes
from queues.errors import MQError


def test_defaults_are_those_of_system_default_local_queue():
    q = QueueDefinition(name="Q1")
    assert (q.max_depth, q.max_msg_length) == (5000, 4 * 1024 * 1024)
    assert (q.backout_threshold, q.backout_requeue_q) == (0, "")
    assert (q.def_priority, q.def_persistence) == (0, 0)
    assert (q.put_enabled, q.get_enabled) == (True, True)
    assert (q.usage, q.definition_type, q.description, q.depth) == ("normal", "predefined", "", 0)


def test_from_row_reads_every_field_and_makes_flags_booleans():
    values = {f.name: getattr(QueueDefinition("X"), f.name) for f in fields(QueueDefinition)}
    values.update(name="APP.Q", depth=7, max_depth=10, put_enabled=0, get_enabled=1)
    values.update(created_at=5, altered_at=6)
    definition = QueueDefinition.from_row(SimpleNamespace(_mapping=values))
    assert definition == QueueDefinition(
        name="APP.Q", depth=7, max_depth=10, put_enabled=False, get_enabled=True, created_at=5, altered_at=6
    )
    assert definition.put_enabled is False
    assert definition.get_enabled is True


def test_valid_attributes_become_column_values():
    attrs = {
        "max_depth": 0,
        "max_msg_length": 100 * 1024 * 1024,
        "backout_threshold": 999_999_999,
        "backout_requeue_q": "APP.BACKOUT",
        "def_priority": 9,
        "def_persistence": 1,
        "description": "d" * 64,
        "put_enabled": False,
        "get_enabled": True,
        "usage": "xmitq",
        "definition_type": "permdyn",
        "index_type": "correlid",
    }
    assert check_attributes(attrs) == {**attrs, "put_enabled": 0, "get_enabled": 1}
    assert set(attrs) == set(SETTABLE)


def test_no_attributes_is_no_change():
    assert check_attributes({}) == {}


def test_empty_backout_queue_means_none():
    assert check_attributes({"backout_requeue_q": ""}) == {"backout_requeue_q": ""}


@pytest.mark.parametrize(
    ("key", "low", "high"),
    [
        ("max_depth", 0, 999_999_999),
        ("max_msg_length", 0, 100 * 1024 * 1024),
        ("backout_threshold", 0, 999_999_999),
        ("def_priority", 0, 9),
        ("def_persistence", 0, 1),
    ],
)
def test_integer_ranges_include_their_bounds(key, low, high):
    assert check_attributes({key: low}) == {key: low}
    assert check_attributes({key: high}) == {key: high}


BAD = [
    ("max_depth", -1),
    ("max_depth", 1_000_000_000),
    ("max_depth", "10"),
    ("max_depth", 10.0),
    ("max_depth", True),
    ("max_depth", None),
    ("max_msg_length", -1),
    ("max_msg_length", 100 * 1024 * 1024 + 1),
    ("backout_threshold", -1),
    ("backout_threshold", 1_000_000_000),
    ("def_priority", -1),
    ("def_priority", 10),
    ("def_persistence", 2),
    ("def_persistence", False),
    ("put_enabled", 1),
    ("put_enabled", "true"),
    ("get_enabled", 0),
    ("get_enabled", None),
    ("description", "d" * 65),
    ("description", 5),
    ("backout_requeue_q", "BAD NAME"),
    ("backout_requeue_q", "Q" * 49),
    ("backout_requeue_q", 5),
    ("backout_requeue_q", None),
    ("usage", "NORMAL"),
    ("usage", "transmit"),
    ("usage", ["normal"]),
    ("definition_type", "dynamic"),
    ("definition_type", ""),
]


@pytest.mark.parametrize(("key", "value"), BAD)
def test_every_bad_value_is_4005_naming_the_attribute(key, value):
    with pytest.raises(MQError) as caught:
        check_attributes({key: value})
    assert caught.value.reason == 4005
    assert caught.value.reason_name == "MQRCCF_ATTR_VALUE_ERROR"
    assert caught.value.detail.startswith(f"{key}={value!r} is not valid: use ")


@pytest.mark.parametrize("key", ["depth", "name", "created_at", "maxdepth", "MAX_DEPTH"])
def test_unknown_or_read_only_attributes_are_4005(key):
    with pytest.raises(MQError) as caught:
        check_attributes({key: 1})
    assert caught.value.reason == 4005
    assert caught.value.detail == f"unknown queue attribute {key!r}"


def test_one_bad_attribute_refuses_the_whole_change():
    with pytest.raises(MQError):
        check_attributes({"max_depth": 10, "def_priority": 10})
