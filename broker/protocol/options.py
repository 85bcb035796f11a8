"""Option bit sets of the ``<psc>`` commands, with IBM's names and integer values.

Members are named exactly as IBM's option strings (``MQPSC_*`` in cmqpsc.h) and
valued as IBM's ``MQREGO_*``/``MQPUBO_*``/``MQDELO_*`` constants, so a value read
from ``<RegOpt>CorrelAsId</RegOpt>`` and one read from IBM JMS's decimal form
``<RegOpt>1</RegOpt>`` are the same flag, and ``option_names`` writes back the
strings IBM clients expect in FullResp answers and delivered ``<psc>`` folders.

Only the options that exist in the MQRFH2 ``<psc>`` interface are members: the
RFH1-only ``Anon``, ``DirectReq``, ``InclStreamName`` and ``NoReg`` have no
``MQPSC_*`` string, so neither their names nor their bits are accepted.

``PubOpt.Local`` has a string (``MQPSC_LOCAL``) but no ``MQPUBO_*`` integer. It
is given 0x20000, far above every MQPUBO bit (the highest is 0x10), so it can
never collide with a value IBM might assign; because the integer is ours alone,
it is accepted only in its string form, never inside a decimal value.

A value that is not an option of its kind raises :class:`OptionError` carrying
the reason IBM gives for that kind: 3083 for registration options, 3084 for
publication options, 3087 for delete options.
"""

from __future__ import annotations

import re
from enum import IntFlag
from functools import lru_cache
from typing import TypeVar, cast

from queues.errors import MQError
from queues.reasons import Reason


class RegOpt(IntFlag):
    """Registration options (``MQREGO_*``) of RegSub, DeregSub and ReqUpdate."""

    CorrelAsId = 0x1
    Local = 0x4
    NewPubsOnly = 0x10
    PubOnReqOnly = 0x20
    DeregAll = 0x40
    InformIfRet = 0x100
    DupsOK = 0x200
    NonPers = 0x400
    Pers = 0x800
    PersAsPub = 0x1000
    PersAsQueue = 0x2000
    AddName = 0x4000
    NoAlter = 0x8000
    FullResp = 0x10000
    JoinShared = 0x20000
    JoinExcl = 0x40000
    LeaveOnly = 0x80000
    VariableUserId = 0x100000
    Locked = 0x200000


class PubOpt(IntFlag):
    """Publication options (``MQPUBO_*``) of Publish; ``Local`` is string-only."""

    CorrelAsId = 0x1
    RetainPub = 0x2
    OtherSubsOnly = 0x4
    IsRetainedPub = 0x10
    Local = 0x20000


class DelOpt(IntFlag):
    """Delete options (``MQDELO_*``) of DeletePub."""

    Local = 0x4


Option = RegOpt | PubOpt | DelOpt
OptionT = TypeVar("OptionT", bound=IntFlag)

NONE = "None"
"""IBM's ``MQPSC_NONE``: all defaults; ignored when other options are given."""

_REASONS: dict[type[IntFlag], Reason] = {
    RegOpt: Reason.MQRCCF_REG_OPTIONS_ERROR,
    PubOpt: Reason.MQRCCF_PUB_OPTIONS_ERROR,
    DelOpt: Reason.MQRCCF_DEL_OPTIONS_ERROR,
}
_STRING_ONLY: dict[type[IntFlag], int] = {RegOpt: 0, PubOpt: PubOpt.Local, DelOpt: 0}
# Ten digits cover every MQLONG; the bound also keeps int() far from Python's
# digit limit, which would otherwise raise ValueError on a hostile value.
_DECIMAL = re.compile(r"[0-9]{1,10}")


def _names(kind: type[IntFlag]) -> dict[str, IntFlag]:
    table: dict[str, IntFlag] = {member.name: member for member in kind if member.name is not None}
    table[NONE] = kind(0)
    return table


_BY_NAME: dict[type[IntFlag], dict[str, IntFlag]] = {
    RegOpt: _names(RegOpt),
    PubOpt: _names(PubOpt),
    DelOpt: _names(DelOpt),
}
_DECIMAL_BITS: dict[type[IntFlag], int] = {
    kind: sum(kind) & ~_STRING_ONLY[kind] for kind in (RegOpt, PubOpt, DelOpt)
}


class OptionError(MQError):
    """A value that is not an option of its kind; ``.value`` is the offending text."""

    def __init__(self, kind: type[IntFlag], value: str) -> None:
        super().__init__(_REASONS[kind], f"{value!r} is not a {kind.__name__} value")
        self.value = value


def option_reason(kind: type[IntFlag]) -> Reason:
    """The reason IBM reports for an invalid option of ``kind`` (3083, 3084 or 3087)."""
    return _REASONS[kind]


def parse_option(kind: type[OptionT], text: str) -> OptionT:
    """One option value: an IBM name, ``None`` or IBM JMS's decimal OR of the bits.

    The text is taken as given; callers strip surrounding whitespace first.
    """
    named = _BY_NAME[kind].get(text)
    if named is not None:
        return cast("OptionT", named)
    if _DECIMAL.fullmatch(text) is None:
        raise OptionError(kind, text)
    value = int(text)
    if value & ~_DECIMAL_BITS[kind]:
        raise OptionError(kind, text)
    return kind(value)


def option_names(flags: Option) -> list[str]:
    """IBM's strings for the bits set in ``flags``, lowest bit first; ``[]`` for none."""
    return list(_names_of(type(flags), int(flags)))


# Keyed by kind as well as value: RegOpt.CorrelAsId == PubOpt.CorrelAsId as ints,
# and brokers write the same few combinations on every delivery.
@lru_cache(maxsize=4096)
def _names_of(kind: type[IntFlag], value: int) -> tuple[str, ...]:
    return tuple(member.name for member in kind if member.value & value and member.name)
