"""Typed errors that carry an MQ reason code.

Every failure a caller can act on is an :class:`MQError`; the CLI turns it into
an exit code and the reason name, the admin API into problem+json, the broker
into a ``<pscr>`` error or a dead-letter header. Subclasses exist only where a
caller needs to catch one reason specifically.
"""

from __future__ import annotations

from queues.reasons import Reason, reason_name


class MQError(Exception):
    """An operation failed with an MQ reason code (``MQCC_FAILED``)."""

    def __init__(self, reason: int, message: str = "") -> None:
        self.reason = int(reason)
        self.reason_name = reason_name(self.reason)
        self.detail = message
        text = f"{self.reason_name} ({self.reason})"
        super().__init__(f"{text}: {message}" if message else text)


class NoMessageAvailable(MQError):
    """2033: the queue holds no message that satisfies the get (normal, not a fault)."""

    def __init__(self, queue: str) -> None:
        super().__init__(Reason.MQRC_NO_MSG_AVAILABLE, f"no message available on {queue}")
        self.queue = queue


class UnknownObject(MQError):
    """2085: a queue that is not defined on this queue manager."""

    def __init__(self, name: str) -> None:
        super().__init__(Reason.MQRC_UNKNOWN_OBJECT_NAME, f"queue {name!r} is not defined")
        self.name = name
