"""MQDLH, the dead-letter header, byte-compatible with IBM's so existing
dead-letter handlers (runmqdlq, amqsdlq, rfhutil) can read our dead-letter queue.

Layout (172 bytes, integers in the byte order of the message's Encoding)::

    StrucId 'DLH ' | Version 1 | Reason | DestQName 48 | DestQMgrName 48 |
    Encoding | CodedCharSetId | Format 8 | PutApplType | PutApplName 28 |
    PutDate 8 | PutTime 8

Encoding/CodedCharSetId/Format describe the original message data that follows
the header; the Put* fields say who put the message on the dead-letter queue.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from queues.errors import MQError
from queues.message import MQENC_INTEGER_MASK, MQENC_INTEGER_NORMAL, MQENC_INTEGER_REVERSED, Message, derive
from queues.reasons import Reason

STRUC_ID = b"DLH "
VERSION_1 = 1
LENGTH = 172
_LAYOUT = "4s i i 48s 48s i i 8s i 28s 8s 8s"
_BIG = struct.Struct(">" + _LAYOUT)
_LITTLE = struct.Struct("<" + _LAYOUT)
assert _BIG.size == LENGTH


@dataclass(frozen=True, slots=True)
class DeadLetterHeader:
    """Why a message is on the dead-letter queue and where it was going."""

    reason: int
    dest_q_name: str
    dest_q_mgr_name: str
    encoding: int
    ccsid: int
    format: str
    put_appl_type: int
    put_appl_name: str
    put_date: str
    put_time: str


def _layout(encoding: int) -> struct.Struct:
    order = encoding & MQENC_INTEGER_MASK
    if order == MQENC_INTEGER_NORMAL:
        return _BIG
    if order == MQENC_INTEGER_REVERSED:
        return _LITTLE
    raise MQError(Reason.MQRC_MD_ERROR, f"encoding {encoding} has no integer byte order")


def _char(value: str, length: int) -> bytes:
    return value.encode("ascii", "replace")[:length].ljust(length)


def encode(header: DeadLetterHeader, encoding: int) -> bytes:
    """The 172 header bytes, integers in ``encoding``'s byte order."""
    return _layout(encoding).pack(
        STRUC_ID,
        VERSION_1,
        header.reason,
        _char(header.dest_q_name, 48),
        _char(header.dest_q_mgr_name, 48),
        header.encoding,
        header.ccsid,
        _char(header.format, 8),
        header.put_appl_type,
        _char(header.put_appl_name, 28),
        _char(header.put_date, 8),
        _char(header.put_time, 8),
    )


def decode(data: bytes, encoding: int) -> tuple[DeadLetterHeader, bytes]:
    """Split a dead-letter message body into its header and the original data."""
    if len(data) < LENGTH:
        raise MQError(Reason.MQRC_MD_ERROR, f"dead-letter body of {len(data)} bytes is too short")
    fields = _layout(encoding).unpack_from(data)
    if fields[0] != STRUC_ID or fields[1] != VERSION_1:
        raise MQError(Reason.MQRC_MD_ERROR, "body does not start with an MQDLH version 1")

    def text(raw: bytes) -> str:
        return raw.decode("ascii", "replace").rstrip(" \x00")

    header = DeadLetterHeader(
        reason=fields[2],
        dest_q_name=text(fields[3]),
        dest_q_mgr_name=text(fields[4]),
        encoding=fields[5],
        ccsid=fields[6],
        format=fields[7].decode("ascii", "replace"),
        put_appl_type=fields[8],
        put_appl_name=text(fields[9]),
        put_date=text(fields[10]),
        put_time=text(fields[11]),
    )
    return header, data[LENGTH:]


def unwrap(message: Message) -> tuple[DeadLetterHeader, Message]:
    """A dead letter's MQDLH, and the message it carries as the header describes it (its
    data, format, encoding and CCSID; the rest of the descriptor is the dead letter's).
    MQError if the body holds no MQDLH."""
    header, data = decode(message.body, message.encoding)
    original = derive(message, body=data, format=header.format, encoding=header.encoding, ccsid=header.ccsid)
    return header, original
