"""queues.xqh: the MQXQH a message wears on a transmission queue, byte for byte as IBM lays it out."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queues import xqh
from queues.errors import MQError
from queues.message import Message
from queues.reasons import Reason

INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
NAME = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._/%", max_size=48)
FREE_TEXT = st.text(alphabet="abcXYZ019 ._-éü€", max_size=28).map(str.rstrip)


def fits(length: int) -> st.SearchStrategy[str]:
    """Text whose UTF-8 form fits a blank-padded field of ``length`` bytes (trailing blanks
    are padding in MQ, so a value never ends with one)."""
    return FREE_TEXT.filter(lambda text: len(text.encode()) <= length)


MESSAGES = st.builds(
    Message,
    body=st.binary(max_size=300),
    msg_id=st.binary(min_size=24, max_size=24),
    correl_id=st.binary(min_size=24, max_size=24),
    format=st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ", min_size=8, max_size=8),
    encoding=INT32,
    ccsid=INT32,
    msg_type=INT32,
    report=INT32,
    reply_to_q=NAME,
    reply_to_qmgr=NAME,
    user_id=fits(12),
    persistence=st.sampled_from([0, 1, 2]),
    priority=st.integers(min_value=-1, max_value=9),
    expiry=INT32,
    put_appl_type=INT32,
    put_appl_name=fits(28),
    put_date=st.text(alphabet="0123456789", min_size=8, max_size=8),
    put_time=st.text(alphabet="0123456789", min_size=8, max_size=8),
    backout_count=INT32,
)

SAMPLE = Message(
    body=b"<payload>",
    msg_id=b"M" * 24,
    correl_id=b"C" * 24,
    format="MQHRF2  ",
    encoding=273,
    ccsid=1208,
    msg_type=8,
    report=2,
    reply_to_q="SYSTEM.BROKER.INTER.BROKER.COMMUNICATIONS",
    reply_to_qmgr="QMB",
    user_id="broker",
    persistence=1,
    priority=5,
    expiry=600,
    put_appl_type=26,
    put_appl_name="QMB",
    put_date="20250102",
    put_time="12345678",
    backout_count=3,
)

# (field, offset, length) of IBM's MQXQH and the MQMD version 1 inside it (cmqc.h), written out
# independently of the module under test.
MD = 104
IBM_LAYOUT = [
    ("StrucId", 0, 4),
    ("Version", 4, 4),
    ("RemoteQName", 8, 48),
    ("RemoteQMgrName", 56, 48),
    ("MD.StrucId", MD + 0, 4),
    ("MD.Version", MD + 4, 4),
    ("MD.Report", MD + 8, 4),
    ("MD.MsgType", MD + 12, 4),
    ("MD.Expiry", MD + 16, 4),
    ("MD.Feedback", MD + 20, 4),
    ("MD.Encoding", MD + 24, 4),
    ("MD.CodedCharSetId", MD + 28, 4),
    ("MD.Format", MD + 32, 8),
    ("MD.Priority", MD + 40, 4),
    ("MD.Persistence", MD + 44, 4),
    ("MD.MsgId", MD + 48, 24),
    ("MD.CorrelId", MD + 72, 24),
    ("MD.BackoutCount", MD + 96, 4),
    ("MD.ReplyToQ", MD + 100, 48),
    ("MD.ReplyToQMgr", MD + 148, 48),
    ("MD.UserIdentifier", MD + 196, 12),
    ("MD.AccountingToken", MD + 208, 32),
    ("MD.ApplIdentityData", MD + 240, 32),
    ("MD.PutApplType", MD + 272, 4),
    ("MD.PutApplName", MD + 276, 28),
    ("MD.PutDate", MD + 304, 8),
    ("MD.PutTime", MD + 312, 8),
    ("MD.ApplOriginData", MD + 320, 4),
]


def int32(value: int) -> bytes:
    return value.to_bytes(4, "big", signed=True)


@given(MESSAGES, NAME.filter(bool), NAME.filter(bool))
def test_every_descriptor_field_and_the_body_survive_the_round_trip(
    message: Message, queue: str, q_mgr: str
) -> None:
    assert xqh.decode(xqh.encode(queue, q_mgr, message)) == (queue, q_mgr, message)


def test_the_layout_is_ibms_contiguous_428_bytes() -> None:
    end = 0
    for name, offset, length in IBM_LAYOUT:
        assert offset == end, name
        end = offset + length
    assert end == xqh.LENGTH == 428
    assert xqh.MD_LENGTH == 324


def test_every_field_sits_at_ibms_offset() -> None:
    data = xqh.encode("APP.QUEUE", "QMC", SAMPLE)
    field = {name: data[offset : offset + length] for name, offset, length in IBM_LAYOUT}
    assert field == {
        "StrucId": b"XQH ",
        "Version": int32(1),
        "RemoteQName": b"APP.QUEUE".ljust(48),
        "RemoteQMgrName": b"QMC".ljust(48),
        "MD.StrucId": b"MD  ",
        "MD.Version": int32(1),
        "MD.Report": int32(2),
        "MD.MsgType": int32(8),
        "MD.Expiry": int32(600),
        "MD.Feedback": int32(0),
        "MD.Encoding": int32(273),
        "MD.CodedCharSetId": int32(1208),
        "MD.Format": b"MQHRF2  ",
        "MD.Priority": int32(5),
        "MD.Persistence": int32(1),
        "MD.MsgId": b"M" * 24,
        "MD.CorrelId": b"C" * 24,
        "MD.BackoutCount": int32(3),
        "MD.ReplyToQ": b"SYSTEM.BROKER.INTER.BROKER.COMMUNICATIONS".ljust(48),
        "MD.ReplyToQMgr": b"QMB".ljust(48),
        "MD.UserIdentifier": b"broker".ljust(12),
        "MD.AccountingToken": bytes(32),
        "MD.ApplIdentityData": b" " * 32,
        "MD.PutApplType": int32(26),
        "MD.PutApplName": b"QMB".ljust(28),
        "MD.PutDate": b"20250102",
        "MD.PutTime": b"12345678",
        "MD.ApplOriginData": b"    ",
    }
    assert data[428:] == b"<payload>"


def test_negative_integers_are_twos_complement() -> None:
    data = xqh.encode("Q", "QM", Message(expiry=-1, priority=-1))
    assert data[MD + 16 : MD + 20] == b"\xff\xff\xff\xff"
    assert data[MD + 40 : MD + 44] == b"\xff\xff\xff\xff"


def test_an_over_long_text_field_is_cut_to_its_width() -> None:
    message = Message(put_appl_name="A" * 40, user_id="averyverylonguser")
    _, _, decoded = xqh.decode(xqh.encode("Q", "QM", message))
    assert (decoded.put_appl_name, decoded.user_id) == ("A" * 28, "averyverylon")


VALID = xqh.encode("APP.QUEUE", "QMC", SAMPLE)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "empty"),
        (VALID[:427], "one byte short of a header"),
        (b"XQX " + VALID[4:], "wrong StrucId"),
        (VALID[:4] + int32(2) + VALID[8:], "version 2"),
        (VALID[:MD] + b"MDX " + VALID[MD + 4 :], "wrong MD StrucId"),
        (b"\xff" * 600, "noise"),
        (xqh.encode("Q", "QM", Message(priority=10)), "priority above 9"),
        (xqh.encode("Q", "QM", Message(priority=-2)), "priority below -1"),
        (xqh.encode("Q", "QM", Message(persistence=3)), "persistence 3"),
    ],
)
def test_anything_that_is_not_an_mqxqh_is_2026(data: bytes, why: str) -> None:
    with pytest.raises(MQError) as refused:
        xqh.decode(data)
    assert refused.value.reason == Reason.MQRC_MD_ERROR, why
