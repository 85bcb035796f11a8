"""MQ object-name rules, checked before a name reaches SQL or a header.

Queue and queue-manager names are 1 to 48 characters of ``A-Z a-z 0-9 . / _ %``
(IBM's rules for MQ object names); anything else is MQRC_OBJECT_NAME_ERROR
(2152) for queues and MQRC_Q_MGR_NAME_ERROR (2058) for queue managers.
"""

from __future__ import annotations

import re

from queues.errors import MQError
from queues.reasons import Reason

MAX_NAME_LENGTH = 48
_NAME = re.compile(r"[A-Za-z0-9._/%]{1,48}")

DEAD_LETTER_QUEUE = "SYSTEM.DEAD.LETTER.QUEUE"


def is_valid_name(name: str) -> bool:
    """True when ``name`` obeys the MQ object-name rules."""
    return _NAME.fullmatch(name) is not None


def check_queue_name(name: str) -> str:
    """Return ``name`` unchanged, or raise 2152 explaining what is wrong with it."""
    if not is_valid_name(name):
        raise MQError(
            Reason.MQRC_OBJECT_NAME_ERROR,
            f"invalid queue name {name!r}: use 1-48 characters of A-Z a-z 0-9 . / _ %",
        )
    return name


def check_qmgr_name(name: str) -> str:
    """Return ``name`` unchanged, or raise 2058 explaining what is wrong with it."""
    if not is_valid_name(name):
        raise MQError(
            Reason.MQRC_Q_MGR_NAME_ERROR,
            f"invalid queue manager name {name!r}: use 1-48 characters of A-Z a-z 0-9 . / _ %",
        )
    return name
