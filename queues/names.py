"""MQ object-name rules, checked before a name reaches SQL or a header.

Queue and queue-manager names are 1 to 48 characters of ``A-Z a-z 0-9 . / _ %``
(IBM's rules for MQ object names), but not ``.`` or ``..`` (``docs/decisions.md``, Queues);
anything else is MQRC_OBJECT_NAME_ERROR (2152) for queues and MQRC_Q_MGR_NAME_ERROR (2058)
for queue managers.
"""

from __future__ import annotations

import re

from queues.errors import MQError
from queues.reasons import Reason

MAX_NAME_LENGTH = 48
# Three or more characters, or one or two that are not all dots. Without a look-ahead, so that
# the API's schemas (pydantic's regular expressions have none) can use it as it is.
NAME_PATTERN = r"^(?:[A-Za-z0-9._/%]{3,48}|[A-Za-z0-9_/%][A-Za-z0-9._/%]?|\.[A-Za-z0-9_/%])$"
_NAME = re.compile(NAME_PATTERN)
RULE = "1-48 characters of A-Z a-z 0-9 . / _ %, not . or .."

DEAD_LETTER_QUEUE = "SYSTEM.DEAD.LETTER.QUEUE"


def is_valid_name(name: str) -> bool:
    """True when ``name`` obeys the MQ object-name rules."""
    return _NAME.fullmatch(name) is not None


def check_queue_name(name: str) -> str:
    """Return ``name`` unchanged, or raise 2152 explaining what is wrong with it."""
    if not is_valid_name(name):
        raise MQError(
            Reason.MQRC_OBJECT_NAME_ERROR,
            f"invalid queue name {name!r}: use {RULE}",
        )
    return name


def check_qmgr_name(name: str) -> str:
    """Return ``name`` unchanged, or raise 2058 explaining what is wrong with it."""
    if not is_valid_name(name):
        raise MQError(
            Reason.MQRC_Q_MGR_NAME_ERROR,
            f"invalid queue manager name {name!r}: use {RULE}",
        )
    return name
