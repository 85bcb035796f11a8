"""Queue attributes, with MQ's names, defaults and limits.

Defaults are those of IBM's ``SYSTEM.DEFAULT.LOCAL.QUEUE`` (MAXDEPTH 5000,
MAXMSGL 4 MiB, DEFPRTY 0, DEFPSIST NO, BOTHRESH 0) because that is what an MQ
administrator expects a new queue to have; system queues are defined deeper.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from queues.errors import MQError
from queues.names import RULE, is_valid_name
from queues.reasons import Reason

DEFAULT_MAX_DEPTH = 5000
DEFAULT_MAX_MSG_LENGTH = 4 * 1024 * 1024
MAX_MAX_DEPTH = 999_999_999
MAX_MAX_MSG_LENGTH = 100 * 1024 * 1024
USAGES = ("normal", "xmitq")
DEFINITION_TYPES = ("predefined", "tempdyn", "permdyn")
CORRELID = "correlid"
INDEX_TYPES = ("none", CORRELID)


@dataclass(frozen=True, slots=True)
class QueueDefinition:
    """A local queue's attributes and its current depth."""

    name: str
    description: str = ""
    max_depth: int = DEFAULT_MAX_DEPTH
    max_msg_length: int = DEFAULT_MAX_MSG_LENGTH
    backout_threshold: int = 0
    backout_requeue_q: str = ""
    def_priority: int = 0
    def_persistence: int = 0
    put_enabled: bool = True
    get_enabled: bool = True
    usage: str = "normal"
    definition_type: str = "predefined"
    index_type: str = "none"
    depth: int = 0
    put_count: int = 0  # messages put since the queue was defined (committed)
    get_count: int = 0  # messages gotten (destructively) since it was defined
    created_at: int = 0
    altered_at: int = 0

    @property
    def indexed_by_correl_id(self) -> bool:
        return self.index_type == CORRELID

    @classmethod
    def from_row(cls, row: Any) -> QueueDefinition:
        return cls.from_mapping(row._mapping)

    @classmethod
    def from_mapping(cls, values: Any) -> QueueDefinition:
        return cls(
            **{f.name: values[f.name] for f in fields(cls) if f.name not in ("put_enabled", "get_enabled")},
            put_enabled=bool(values["put_enabled"]),
            get_enabled=bool(values["get_enabled"]),
        )


# Attributes an administrator may set, with the check each value must pass.
_RANGES: dict[str, tuple[int, int]] = {
    "max_depth": (0, MAX_MAX_DEPTH),
    "max_msg_length": (0, MAX_MAX_MSG_LENGTH),
    "backout_threshold": (0, MAX_MAX_DEPTH),
    "def_priority": (0, 9),
    "def_persistence": (0, 1),
}
SETTABLE = (
    *_RANGES,
    "description",
    "backout_requeue_q",
    "put_enabled",
    "get_enabled",
    "usage",
    "definition_type",
    "index_type",
)


def check_attributes(attrs: dict[str, Any]) -> dict[str, Any]:
    """Validate attribute changes and return them as column values.

    Raises MQRCCF_ATTR_VALUE_ERROR (4005) naming the attribute and the allowed
    values, so that a typo in ``broker queue define`` says exactly what is wrong.
    """
    values: dict[str, Any] = {}
    for key, value in attrs.items():
        if key in _RANGES:
            low, high = _RANGES[key]
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise _bad(key, value, f"an integer from {low} to {high}")
        elif key in ("put_enabled", "get_enabled"):
            if not isinstance(value, bool):
                raise _bad(key, value, "true or false")
            value = int(value)
        elif key == "description":
            if not isinstance(value, str) or len(value) > 64:
                raise _bad(key, value, "text of at most 64 characters")
        elif key == "backout_requeue_q":
            if not isinstance(value, str) or (value and not is_valid_name(value)):
                raise _bad(key, value, f"a queue name ({RULE}) or ''")
        elif key == "usage":
            if value not in USAGES:
                raise _bad(key, value, " or ".join(USAGES))
        elif key == "definition_type":
            if value not in DEFINITION_TYPES:
                raise _bad(key, value, ", ".join(DEFINITION_TYPES))
        elif key == "index_type":
            if value not in INDEX_TYPES:
                raise _bad(key, value, " or ".join(INDEX_TYPES))
        else:
            raise MQError(Reason.MQRCCF_ATTR_VALUE_ERROR, f"unknown queue attribute {key!r}")
        values[key] = value
    return values


def _bad(key: str, value: Any, allowed: str) -> MQError:
    return MQError(Reason.MQRCCF_ATTR_VALUE_ERROR, f"{key}={value!r} is not valid: use {allowed}")
