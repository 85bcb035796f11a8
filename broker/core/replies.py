"""Broker responses: when to answer a command, and the reply message (reference 3.2, 3.3).

A REQUEST is always answered. A DATAGRAM is answered on success only with
MQRO_PAN, on failure only with MQRO_NAN, and with a warning if either is set;
neither means never. The reply is an MQMT_REPLY whose CorrelId is the
command's MsgId (or its CorrelId with MQRO_PASS_CORREL_ID), with priority,
persistence and expiry copied and PutApplType MQAT_BROKER, so IBM's samples and
clients that wait by CorrelId find it.
"""

from __future__ import annotations

from broker.core.effects import REPLY, Put
from broker.protocol import pscr, rfh2
from queues.ids import derived_id, mq_date_time
from queues.message import (
    CCSID_UTF8,
    MQAT_BROKER,
    MQENC_INTEGER_MASK,
    MQENC_NATIVE,
    MQFMT_NONE,
    MQFMT_RF_HEADER_2,
    MQMT_DATAGRAM,
    MQMT_REPLY,
    MQMT_REQUEST,
    MQRO_NAN,
    MQRO_PAN,
    MQRO_PASS_CORREL_ID,
    MQRO_PASS_MSG_ID,
    Message,
)


def wants_reply(command: Message, completion: str) -> bool:
    if command.msg_type == MQMT_REQUEST:
        return True
    if command.msg_type != MQMT_DATAGRAM:
        return False
    pan = bool(command.report & MQRO_PAN)
    nan = bool(command.report & MQRO_NAN)
    if completion == pscr.OK:
        return pan
    if completion == pscr.ERROR:
        return nan
    return pan or nan


def encoding_of(message: Message) -> int:
    """The integer encoding to write headers in: the message's own, if it has one."""
    return message.encoding if message.encoding & MQENC_INTEGER_MASK in (1, 2) else MQENC_NATIVE


def reply(command: Message, response: pscr.Response, qmgr: str, now: int) -> Put | None:
    """The reply to ``command``, or None when it asked for none or said nowhere to send it."""
    if not wants_reply(command, response.completion) or not command.reply_to_q.strip():
        return None
    encoding = encoding_of(command)
    body = rfh2.encode(
        rfh2.RFH2Body(
            headers=(
                rfh2.RFH2Header(
                    encoding=encoding, ccsid=CCSID_UTF8, format=MQFMT_NONE, folders=pscr.to_folders(response)
                ),
            ),
            payload=b"",
        ),
        encoding,
    )
    date, time = mq_date_time(now)
    message = Message(
        body=body,
        msg_id=(
            command.msg_id
            if command.report & MQRO_PASS_MSG_ID
            else derived_id(b"reply", command.msg_id, command.put_date.encode(), command.put_time.encode())
        ),
        correl_id=command.correl_id if command.report & MQRO_PASS_CORREL_ID else command.msg_id,
        format=MQFMT_RF_HEADER_2,
        encoding=encoding,
        ccsid=CCSID_UTF8,
        msg_type=MQMT_REPLY,
        report=0,
        reply_to_q="",
        reply_to_qmgr=qmgr,
        user_id=command.user_id,
        persistence=command.persistence,
        priority=command.priority,
        expiry=command.expiry,
        put_appl_type=MQAT_BROKER,
        put_appl_name=qmgr[:28],
        put_date=date,
        put_time=time,
    )
    q_mgr = command.reply_to_qmgr.strip()
    return Put(command.reply_to_q.strip(), message, "" if q_mgr in ("", qmgr) else q_mgr, REPLY)
