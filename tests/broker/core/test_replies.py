"""broker.core.replies: when a command is answered (reference 3.2) and the reply's MQMD (3.3), alone and
through the engine for ok, warning and error outcomes."""

from __future__ import annotations

import pytest

from broker.core import replies
from broker.core.authority import AclRule, Authority, Permission, PrincipalKind
from broker.core.effects import REPLY
from broker.protocol import pscr, rfh2
from queues.message import (
    CCSID_UTF8,
    MQAT_BROKER,
    MQENC_NATIVE,
    MQENC_NORMAL,
    MQFMT_NONE,
    MQFMT_RF_HEADER_2,
    MQMT_DATAGRAM,
    MQMT_REPLY,
    MQMT_REPORT,
    MQMT_REQUEST,
    MQPER_NOT_PERSISTENT,
    MQRO_NAN,
    MQRO_PAN,
    MQRO_PASS_CORREL_ID,
    MQRO_PASS_MSG_ID,
    Message,
    derive,
)
from tests.broker.core.builders import (
    ANY_ID,
    NOW,
    QMGR,
    REPLY_Q,
    Broker,
    correl,
    message,
    mqmd,
    msg_id,
    psc_text,
    pscr_error,
    pscr_ok,
    pscr_warning,
    reply,
    reply_folders,
)

OK, WARNING, ERROR = pscr.OK, pscr.WARNING, pscr.ERROR
COMMAND = message(
    psc_text("RegSub", "Sport/#"),
    msg_id=msg_id(5),
    correl_id=correl("CLIENT-CORREL"),
    user_id="alice",
    priority=7,
    persistence=MQPER_NOT_PERSISTENT,
    expiry=3000,
    put_date="20251231",
    put_time="23595999",
)


def datagram(report: int) -> Message:
    return derive(COMMAND, msg_type=MQMT_DATAGRAM, report=report)


# --- wants_reply ------------------------------------------------------------------------------------


@pytest.mark.parametrize("completion", [OK, WARNING, ERROR])
@pytest.mark.parametrize("report", [0, MQRO_PAN, MQRO_NAN, MQRO_PAN | MQRO_NAN])
def test_a_request_is_always_answered(completion: str, report: int) -> None:
    assert replies.wants_reply(derive(COMMAND, msg_type=MQMT_REQUEST, report=report), completion)


@pytest.mark.parametrize(
    ("report", "answered"),
    [
        (0, set()),
        (MQRO_PAN, {OK, WARNING}),
        (MQRO_NAN, {ERROR, WARNING}),
        (MQRO_PAN | MQRO_NAN, {OK, WARNING, ERROR}),
        (MQRO_PASS_CORREL_ID, set()),
    ],
)
def test_a_datagram_is_answered_by_pan_and_nan(report: int, answered: set[str]) -> None:
    assert {c for c in (OK, WARNING, ERROR) if replies.wants_reply(datagram(report), c)} == answered


@pytest.mark.parametrize("msg_type", [MQMT_REPLY, MQMT_REPORT, 0])
def test_other_message_types_are_never_answered(msg_type: int) -> None:
    m = derive(COMMAND, msg_type=msg_type, report=MQRO_PAN | MQRO_NAN)
    assert not any(replies.wants_reply(m, c) for c in (OK, WARNING, ERROR))


# --- encoding_of ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("encoding", "expected"),
    [
        (MQENC_NORMAL, MQENC_NORMAL),
        (MQENC_NATIVE, MQENC_NATIVE),
        (1, 1),
        (2, 2),
        (0, MQENC_NATIVE),
        (0x113, MQENC_NATIVE),
    ],
)
def test_headers_are_written_in_the_messages_integer_encoding_when_it_has_one(
    encoding: int, expected: int
) -> None:
    assert replies.encoding_of(derive(COMMAND, encoding=encoding)) == expected


# --- the reply message ------------------------------------------------------------------------------


def test_the_reply_descriptor_is_ibms() -> None:
    put = replies.reply(COMMAND, pscr.ok(), QMGR, NOW)
    assert put is not None
    assert (put.queue, put.q_mgr, put.kind, put.topic) == (REPLY_Q, "", REPLY, "")
    assert mqmd(put.message) == {
        "msg_id": ANY_ID,
        "correl_id": msg_id(5),  # MQRO_COPY_MSG_ID_TO_CORREL_ID: the command's MsgId
        "format": MQFMT_RF_HEADER_2,
        "encoding": MQENC_NATIVE,
        "ccsid": CCSID_UTF8,
        "msg_type": MQMT_REPLY,
        "report": 0,
        "reply_to_q": "",
        "reply_to_qmgr": QMGR,
        "user_id": "alice",
        "persistence": MQPER_NOT_PERSISTENT,
        "priority": 7,
        "expiry": 3000,
        "put_appl_type": MQAT_BROKER,
        "put_appl_name": QMGR,
        "put_date": "20260101",
        "put_time": "00000000",
        "backout_count": 0,
    }
    body = rfh2.decode(put.message.body, MQENC_NATIVE, MQFMT_RF_HEADER_2)
    assert body == rfh2.RFH2Body(
        (rfh2.RFH2Header(encoding=MQENC_NATIVE, ccsid=CCSID_UTF8, format=MQFMT_NONE, folders=pscr_ok()),),
        b"",
    )


def test_the_reply_carries_the_echoed_psc_as_a_second_folder() -> None:
    folder = psc_text("RegSub", "Sport/#")
    put = replies.reply(COMMAND, pscr.error(pscr.ResponseItem(3076, None, "QName"), folder), QMGR, NOW)
    assert put is not None
    body = rfh2.decode(put.message.body, MQENC_NATIVE, MQFMT_RF_HEADER_2)
    assert body.folders == (
        "<pscr><Completion>error</Completion><Response><Reason>3076</Reason>"
        "<Parameter>QName</Parameter></Response></pscr>",
        folder,
    )
    assert body.payload == b""


def test_pass_correl_id_answers_with_the_commands_correl_id() -> None:
    put = replies.reply(derive(COMMAND, report=MQRO_PASS_CORREL_ID), pscr.ok(), QMGR, NOW)
    assert put is not None
    assert (put.message.correl_id, put.message.report) == (correl("CLIENT-CORREL"), 0)


def test_pass_msg_id_answers_with_the_commands_msg_id() -> None:
    put = replies.reply(derive(COMMAND, report=MQRO_PASS_MSG_ID), pscr.ok(), QMGR, NOW)
    assert put is not None
    assert (put.message.msg_id, put.message.correl_id) == (msg_id(5), msg_id(5))


def test_the_reply_msg_id_is_deterministic_and_differs_per_command() -> None:
    first = replies.reply(COMMAND, pscr.ok(), QMGR, NOW)
    again = replies.reply(COMMAND, pscr.ok(), QMGR, NOW + 5000)
    other = replies.reply(derive(COMMAND, msg_id=msg_id(6)), pscr.ok(), QMGR, NOW)
    assert first is not None and again is not None and other is not None
    assert first.message.msg_id == again.message.msg_id != other.message.msg_id


def test_a_big_endian_command_gets_a_big_endian_reply() -> None:
    command = message(psc_text("RegSub", "Sport/#"), encoding=MQENC_NORMAL)
    put = replies.reply(command, pscr.ok(), QMGR, NOW)
    assert put is not None
    assert put.message.encoding == MQENC_NORMAL
    assert put.message.body[4:8] == b"\x00\x00\x00\x02"
    assert rfh2.decode(put.message.body, MQENC_NORMAL, MQFMT_RF_HEADER_2).folders == pscr_ok()


@pytest.mark.parametrize(
    ("reply_to_qmgr", "q_mgr"), [("", ""), ("QM1", ""), ("QM1   ", ""), ("QM2", "QM2"), ("QM2  ", "QM2")]
)
def test_the_reply_goes_to_the_reply_to_queue_manager(reply_to_qmgr: str, q_mgr: str) -> None:
    put = replies.reply(
        derive(COMMAND, reply_to_qmgr=reply_to_qmgr, reply_to_q="APP.REPLY  "), pscr.ok(), QMGR, NOW
    )
    assert put is not None
    assert (put.queue, put.q_mgr) == ("APP.REPLY", q_mgr)


@pytest.mark.parametrize("reply_to_q", ["", "    "])
def test_no_reply_to_queue_means_no_reply(reply_to_q: str) -> None:
    assert replies.reply(derive(COMMAND, reply_to_q=reply_to_q), pscr.ok(), QMGR, NOW) is None


def test_a_datagram_without_pan_gets_no_reply_on_success() -> None:
    assert replies.reply(datagram(MQRO_NAN), pscr.ok(), QMGR, NOW) is None


# --- through the engine --------------------------------------------------------------------------------

DENY_TENNIS = Authority(
    [AclRule("alice", PrincipalKind.USER, "Sport/Tennis", Permission.PUBLISH, allow=False)]
)
OK_COMMAND = psc_text("Publish", "Sport/Soccer")
WARNING_COMMAND = psc_text("Publish", "Sport/Soccer", "Sport/Tennis")
ERROR_COMMAND = psc_text("Publish", "Sport/Tennis")
EXPECTED = {
    OK: pscr_ok(),
    WARNING: pscr_warning([(3081, "Sport/Tennis")], WARNING_COMMAND),
    ERROR: pscr_error(
        3081, ERROR_COMMAND, topic="Sport/Tennis", detail="'alice' may not publish on 'Sport/Tennis'"
    ),
}
COMMANDS = {OK: OK_COMMAND, WARNING: WARNING_COMMAND, ERROR: ERROR_COMMAND}


@pytest.mark.parametrize("completion", [OK, WARNING, ERROR])
@pytest.mark.parametrize(
    ("msg_type", "report", "answered"),
    [
        (MQMT_REQUEST, 0, {OK, WARNING, ERROR}),
        (MQMT_DATAGRAM, 0, set()),
        (MQMT_DATAGRAM, MQRO_PAN, {OK, WARNING}),
        (MQMT_DATAGRAM, MQRO_NAN, {WARNING, ERROR}),
        (MQMT_DATAGRAM, MQRO_PAN | MQRO_NAN, {OK, WARNING, ERROR}),
    ],
)
def test_the_engine_answers_exactly_as_section_3_2_says(
    completion: str, msg_type: int, report: int, answered: set[str]
) -> None:
    b = Broker(authority=DENY_TENNIS)
    outcome = b.send(COMMANDS[completion], msg_type=msg_type, report=report)
    assert outcome.completion == completion
    if completion in answered:
        assert reply_folders(outcome) == EXPECTED[completion]
    else:
        assert reply(outcome) is None


def test_the_engine_reply_keeps_the_commands_descriptor_fields() -> None:
    b = Broker()
    outcome = b.send(
        OK_COMMAND,
        priority=2,
        persistence=MQPER_NOT_PERSISTENT,
        expiry=99,
        reply_to_qmgr="QM7",
        report=MQRO_PASS_CORREL_ID,
        correl_id=correl("ASK"),
    )
    answer = reply(outcome)
    assert answer is not None
    assert (answer.queue, answer.q_mgr) == (REPLY_Q, "QM7")
    md = answer.md
    assert (md["msg_type"], md["correl_id"], md["priority"], md["persistence"], md["expiry"]) == (
        MQMT_REPLY,
        correl("ASK"),
        2,
        MQPER_NOT_PERSISTENT,
        99,
    )
    assert (md["put_appl_type"], md["report"], md["user_id"]) == (MQAT_BROKER, 0, "alice")
