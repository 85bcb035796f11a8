"""Message identifiers and MQ timestamps.

A generated MsgId looks like IBM's (``AMQ `` + the queue manager name padded to
12 + 8 bytes) so that administrators recognise where a message was born. The
last 8 bytes are a per-process random prefix and a counter: unique across
processes without coordination, cheap enough for 100,000s of puts a second,
and re-seeded after ``fork`` so children never repeat their parent's ids.
"""

from __future__ import annotations

import calendar
import functools
import hashlib
import itertools
import os
import time

from queues.message import ID_LENGTH


class _Sequence:
    __slots__ = ("counter", "prefix", "random")

    def __init__(self) -> None:
        self.reseed()

    def reseed(self) -> None:
        self.prefix = int.from_bytes(os.urandom(4), "big") << 32
        self.counter = itertools.count(int.from_bytes(os.urandom(2), "big"))
        self.random = os.urandom(16)


_SEQUENCE = _Sequence()
os.register_at_fork(after_in_child=_SEQUENCE.reseed)


def new_msg_id(qmgr: str) -> bytes:
    """A fresh, unique 24-byte MsgId stamped with the queue manager's name."""
    low = (_SEQUENCE.prefix | (next(_SEQUENCE.counter) & 0xFFFFFFFF)).to_bytes(8, "big")
    return _head(qmgr) + low


def unique_id() -> bytes:
    """A 24-byte id unique across processes and machines (16 random bytes drawn once per
    process, then a counter) that costs no system call: ``os.urandom`` on a hot path releases
    the interpreter lock, and on a busy process getting it back waits for another thread's
    whole time slice."""
    return _SEQUENCE.random + next(_SEQUENCE.counter).to_bytes(8, "big")


@functools.lru_cache(maxsize=16)
def _head(qmgr: str) -> bytes:
    return b"AMQ " + qmgr.encode("ascii", "replace")[:12].ljust(12)


def derived_id(*parts: bytes) -> bytes:
    """A deterministic 24-byte id from ``parts``.

    Replays (a retried Spark task, a resent channel batch) must produce the same
    ids, so ids of derived messages are hashes of what they derive from.
    """
    framed = b"".join(len(part).to_bytes(4, "big") + part for part in parts)
    return hashlib.blake2b(framed, digest_size=ID_LENGTH).digest()


def pad_id(value: bytes) -> bytes:
    """MsgId/CorrelId are fixed 24-byte fields: pad short values with NULs as MQ does."""
    return value.ljust(ID_LENGTH, b"\x00")


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch (the unit stored in every timestamp column)."""
    return time.time_ns() // 1_000_000


def mq_date_time(ms: int) -> tuple[str, str]:
    """MQMD PutDate ``YYYYMMDD`` and PutTime ``HHMMSSTH`` (GMT, hundredths) for ``ms``."""
    return _mq_date_time(ms // 10)


@functools.lru_cache(maxsize=4)
def _mq_date_time(hundredths: int) -> tuple[str, str]:
    """Remembered: every message put in the same hundredth of a second has the same stamp,
    and formatting it cost as much as building the rest of an MQTT publication's message."""
    seconds, hundredth = divmod(hundredths, 100)
    t = time.gmtime(seconds)
    return (
        f"{t.tm_year:04d}{t.tm_mon:02d}{t.tm_mday:02d}",
        f"{t.tm_hour:02d}{t.tm_min:02d}{t.tm_sec:02d}{hundredth:02d}",
    )


def mq_timestamp_ms(put_date: str, put_time: str) -> int | None:
    """Milliseconds since the epoch of an MQMD PutDate/PutTime (GMT, to the hundredth)."""
    day = _day_ms(put_date)
    if day is None or len(put_time) != 8 or not put_time.isdigit():
        return None
    hours, minutes, seconds, hundredths = (int(put_time[i : i + 2]) for i in range(0, 8, 2))
    return day + ((hours * 60 + minutes) * 60 + seconds) * 1000 + hundredths * 10


@functools.lru_cache(maxsize=64)
def _day_ms(put_date: str) -> int | None:
    try:
        return calendar.timegm(time.strptime(put_date, "%Y%m%d")) * 1000
    except ValueError:
        return None
