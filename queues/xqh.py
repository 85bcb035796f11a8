"""MQXQH, the transmission queue header: what a message bound for another queue
manager carries while it waits on a transmission queue.

As in MQ, a put to a queue on a remote queue manager lands on the local
transmission queue named after that queue manager, its body prefixed with an
MQXQH holding the destination (RemoteQName, RemoteQMgrName) and the message's
own descriptor (an MQMD version 1). The channel agent sends the whole thing;
the receiving side strips the header and puts the original message, descriptor
intact, on the destination queue. Layout (428 bytes, big-endian integers, as a
channel would put on the wire)::

    StrucId 'XQH ' | Version 1 | RemoteQName 48 | RemoteQMgrName 48 | MsgDesc (MQMD v1, 324)
"""

from __future__ import annotations

import struct

from queues.errors import MQError
from queues.message import Message
from queues.reasons import Reason

STRUC_ID = b"XQH "
MD_STRUC_ID = b"MD  "
_MD = struct.Struct(">4s 7i 8s 2i 24s 24s i 48s 48s 12s 32s 32s i 28s 8s 8s 4s")
_HEADER = struct.Struct(">4s i 48s 48s")
MD_LENGTH = _MD.size
LENGTH = _HEADER.size + MD_LENGTH
assert MD_LENGTH == 324 and LENGTH == 428


def _char(value: str, length: int) -> bytes:
    return value.encode("utf-8")[:length].ljust(length)


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace").rstrip(" \x00")


def encode(queue: str, q_mgr: str, message: Message) -> bytes:
    """The transmission-queue body for ``message`` bound for ``queue`` at ``q_mgr``."""
    m = message
    descriptor = _MD.pack(
        MD_STRUC_ID,
        1,
        m.report,
        m.msg_type,
        m.expiry,
        0,  # Feedback
        m.encoding,
        m.ccsid,
        m.format.encode("ascii", "replace")[:8].ljust(8),
        m.priority,
        m.persistence,
        m.msg_id,
        m.correl_id,
        m.backout_count,
        _char(m.reply_to_q, 48),
        _char(m.reply_to_qmgr, 48),
        _char(m.user_id, 12),
        b"\x00" * 32,  # AccountingToken
        b" " * 32,  # ApplIdentityData
        m.put_appl_type,
        _char(m.put_appl_name, 28),
        _char(m.put_date, 8),
        _char(m.put_time, 8),
        b"    ",  # ApplOriginData
    )
    return _HEADER.pack(STRUC_ID, 1, _char(queue, 48), _char(q_mgr, 48)) + descriptor + m.body


def decode(data: bytes) -> tuple[str, str, Message]:
    """(RemoteQName, RemoteQMgrName, the original message) from a transmission body."""
    if len(data) < LENGTH:
        raise MQError(Reason.MQRC_MD_ERROR, f"transmission message of {len(data)} bytes has no MQXQH")
    struc_id, version, queue, q_mgr = _HEADER.unpack_from(data)
    md = _MD.unpack_from(data, _HEADER.size)
    if struc_id != STRUC_ID or version != 1 or md[0] != MD_STRUC_ID:
        raise MQError(Reason.MQRC_MD_ERROR, "transmission message does not start with an MQXQH")
    # Refused here, not at the put: a descriptor no put accepts could not even be dead-lettered.
    if not -1 <= md[9] <= 9 or md[10] not in (0, 1, 2):
        raise MQError(Reason.MQRC_MD_ERROR, f"MQXQH descriptor has priority {md[9]}, persistence {md[10]}")
    message = Message(
        body=data[LENGTH:],
        report=md[2],
        msg_type=md[3],
        expiry=md[4],
        encoding=md[6],
        ccsid=md[7],
        format=md[8].decode("ascii", "replace"),
        priority=md[9],
        persistence=md[10],
        msg_id=md[11],
        correl_id=md[12],
        backout_count=md[13],
        reply_to_q=_text(md[14]),
        reply_to_qmgr=_text(md[15]),
        user_id=_text(md[16]),
        put_appl_type=md[19],
        put_appl_name=_text(md[20]),
        put_date=_text(md[21]),
        put_time=_text(md[22]),
    )
    return _text(queue), _text(q_mgr), message
