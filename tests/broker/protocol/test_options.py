from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.protocol.options import (
    DelOpt,
    OptionError,
    PubOpt,
    RegOpt,
    option_names,
    option_reason,
    parse_option,
)
from queues.errors import MQError

# IBM's MQREGO_*/MQPUBO_*/MQDELO_* values, written out independently of the module.
REG_VALUES = {
    "CorrelAsId": 0x1,
    "Local": 0x4,
    "NewPubsOnly": 0x10,
    "PubOnReqOnly": 0x20,
    "DeregAll": 0x40,
    "InformIfRet": 0x100,
    "DupsOK": 0x200,
    "NonPers": 0x400,
    "Pers": 0x800,
    "PersAsPub": 0x1000,
    "PersAsQueue": 0x2000,
    "AddName": 0x4000,
    "NoAlter": 0x8000,
    "FullResp": 0x10000,
    "JoinShared": 0x20000,
    "JoinExcl": 0x40000,
    "LeaveOnly": 0x80000,
    "VariableUserId": 0x100000,
    "Locked": 0x200000,
}
PUB_VALUES = {
    "CorrelAsId": 0x1,
    "RetainPub": 0x2,
    "OtherSubsOnly": 0x4,
    "IsRetainedPub": 0x10,
    "Local": 0x20000,
}
DEL_VALUES = {"Local": 0x4}
ALL = [
    (kind, name, value)
    for kind, table in ((RegOpt, REG_VALUES), (PubOpt, PUB_VALUES), (DelOpt, DEL_VALUES))
    for name, value in table.items()
]


def test_members_are_exactly_ibms_options() -> None:
    assert {m.name: m.value for m in RegOpt} == REG_VALUES
    assert {m.name: m.value for m in PubOpt} == PUB_VALUES
    assert {m.name: m.value for m in DelOpt} == DEL_VALUES


@pytest.mark.parametrize(("kind", "name", "value"), ALL)
def test_name_to_flag(kind: type, name: str, value: int) -> None:
    flag = parse_option(kind, name)
    assert type(flag) is kind
    assert flag == value


@pytest.mark.parametrize(("kind", "name", "value"), ALL)
def test_flag_to_name(kind: type, name: str, value: int) -> None:
    assert option_names(kind(value)) == [name]


@pytest.mark.parametrize(("kind", "name", "value"), ALL)
def test_decimal_form_of_each_option(kind: type, name: str, value: int) -> None:
    if kind is PubOpt and name == "Local":
        with pytest.raises(OptionError):
            parse_option(kind, str(value))
    else:
        assert parse_option(kind, str(value)) == kind[name]


@pytest.mark.parametrize("kind", [RegOpt, PubOpt, DelOpt])
def test_none_is_zero(kind: type) -> None:
    flag = parse_option(kind, "None")
    assert flag == 0
    assert type(flag) is kind
    assert parse_option(kind, "0") == 0
    assert option_names(kind(0)) == []


def test_decimal_or_of_options_as_ibm_jms_writes_it() -> None:
    assert parse_option(RegOpt, "257") == RegOpt.CorrelAsId | RegOpt.InformIfRet
    assert parse_option(RegOpt, "0033") == RegOpt.CorrelAsId | RegOpt.PubOnReqOnly
    assert parse_option(PubOpt, "3") == PubOpt.CorrelAsId | PubOpt.RetainPub
    assert parse_option(RegOpt, str(sum(REG_VALUES.values()))) == sum(REG_VALUES.values())


def test_names_in_bit_order() -> None:
    flags = RegOpt.FullResp | RegOpt.CorrelAsId | RegOpt.InformIfRet
    assert option_names(flags) == ["CorrelAsId", "InformIfRet", "FullResp"]
    assert option_names(PubOpt.Local | PubOpt.IsRetainedPub | PubOpt.RetainPub) == [
        "RetainPub",
        "IsRetainedPub",
        "Local",
    ]


def test_names_depend_on_the_kind_not_only_the_integer() -> None:
    assert option_names(RegOpt(4)) == ["Local"]
    assert option_names(PubOpt(4)) == ["OtherSubsOnly"]
    assert option_names(DelOpt(4)) == ["Local"]


def test_returned_names_are_the_callers_own() -> None:
    names = option_names(RegOpt.CorrelAsId)
    names.append("junk")
    assert option_names(RegOpt.CorrelAsId) == ["CorrelAsId"]


REG_BAD = [
    "Anon",  # RFH1 only
    "DirectReq",
    "InclStreamName",
    "NoReg",
    "InformIfRetained",  # common misnamings
    "LockedSub",
    "correlasid",  # names are case-sensitive
    "RetainPub",  # a PubOpt
    "",
    "none",
    "-1",
    "+1",
    "1.0",
    "0x1",
    "1 2",
    "2",  # MQREGO_ANONYMOUS
    "8",  # MQREGO_DIRECT_REQUESTS
    "128",  # MQREGO_INCLUDE_STREAM_NAME
    str(0x400000),
    "12345678901",
    "9" * 5000,  # beyond Python's int digit limit: must not be a ValueError
    "\u0661",  # ARABIC-INDIC DIGIT ONE: a Unicode digit is not a decimal option
]


@pytest.mark.parametrize("text", REG_BAD)
def test_invalid_registration_options(text: str) -> None:
    with pytest.raises(OptionError) as caught:
        parse_option(RegOpt, text)
    assert caught.value.reason == 3083
    assert caught.value.value == text
    assert isinstance(caught.value, MQError)


@pytest.mark.parametrize(
    "text", ["NoReg", "8", "Anon", "InformIfRet", str(0x20000), "131073", "32", "Retainpub"]
)
def test_invalid_publication_options(text: str) -> None:
    with pytest.raises(OptionError) as caught:
        parse_option(PubOpt, text)
    assert caught.value.reason == 3084


@pytest.mark.parametrize("text", ["RetainPub", "CorrelAsId", "1", "2", "5", "8", "local"])
def test_invalid_delete_options(text: str) -> None:
    with pytest.raises(OptionError) as caught:
        parse_option(DelOpt, text)
    assert caught.value.reason == 3087


def test_option_reason_per_kind() -> None:
    assert option_reason(RegOpt) == 3083
    assert option_reason(PubOpt) == 3084
    assert option_reason(DelOpt) == 3087


@given(st.integers(min_value=0, max_value=sum(REG_VALUES.values())))
def test_names_round_trip(bits: int) -> None:
    flags = RegOpt(bits & sum(REG_VALUES.values()))
    names = option_names(flags)
    rebuilt = RegOpt(0)
    for name in names:
        rebuilt |= parse_option(RegOpt, name)
    assert rebuilt == flags
    assert parse_option(RegOpt, str(int(flags))) == flags
