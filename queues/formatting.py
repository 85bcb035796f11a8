"""Messages shown to people and programs: the CLI, the admin API and logs.

Ids are shown as 48 hex digits, as amqsbcg and MQ Explorer do; bodies as text
when they decode cleanly, else as an amqsbcg-style hex dump (or base64 in JSON),
so binary headers such as MQRFH2 or MQDLH are never mangled.
"""

from __future__ import annotations

import base64
import string
from datetime import datetime
from typing import Any

from queues.errors import MQError
from queues.ids import mq_timestamp_ms
from queues.message import ID_LENGTH, Message
from queues.reasons import Reason

_HEX = set(string.hexdigits)
_PRINTABLE = set(string.printable) - set("\x0b\x0c")


def parse_id(text: str) -> bytes:
    """A MsgId/CorrelId typed by a person: ``0x``-prefixed or exactly 48 hex digits
    are hex; anything else is text, UTF-8 encoded and NUL-padded to 24 bytes."""
    if text.lower().startswith("0x") or (len(text) == 2 * ID_LENGTH and set(text) <= _HEX):
        digits = text[2:] if text.lower().startswith("0x") else text
        try:
            raw = bytes.fromhex(digits)
        except ValueError:
            raise MQError(Reason.MQRC_MD_ERROR, f"{text!r} is not valid hexadecimal") from None
    else:
        raw = text.encode("utf-8")
    if len(raw) > ID_LENGTH:
        raise MQError(Reason.MQRC_MD_ERROR, f"id {text!r} is longer than {ID_LENGTH} bytes")
    return raw.ljust(ID_LENGTH, b"\x00")


def body_text(body: bytes) -> str | None:
    """The body as text if it is printable UTF-8, else None."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if all(ch in _PRINTABLE or ch.isprintable() for ch in text):
        return text
    return None


def hexdump(data: bytes, width: int = 16) -> str:
    """``00000000:  5246 4820 ...  'RFH ....'`` lines, as amqsbcg prints them."""
    lines = []
    for offset in range(0, len(data), width):
        chunk = data[offset : offset + width]
        groups = " ".join(chunk[i : i + 2].hex().upper() for i in range(0, len(chunk), 2))
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{offset:08X}:  {groups:<{width * 2 + width // 2}} '{text}'")
    return "\n".join(lines)


def mqmd_fields(message: Message) -> dict[str, Any]:
    """The descriptor as JSON-ready fields (ids in hex, formats unpadded)."""
    return {
        "msg_id": message.msg_id.hex(),
        "correl_id": message.correl_id.hex(),
        "format": message.format.rstrip(),
        "encoding": message.encoding,
        "ccsid": message.ccsid,
        "msg_type": message.msg_type,
        "report": message.report,
        "reply_to_q": message.reply_to_q,
        "reply_to_qmgr": message.reply_to_qmgr,
        "user_id": message.user_id,
        "persistence": message.persistence,
        "priority": message.priority,
        "expiry": message.expiry,
        "put_appl_type": message.put_appl_type,
        "put_appl_name": message.put_appl_name,
        "put_date": message.put_date,
        "put_time": message.put_time,
        "backout_count": message.backout_count,
    }


def message_json(message: Message) -> dict[str, Any]:
    """Descriptor plus body: ``body_text`` when printable, ``body_base64`` always."""
    fields = mqmd_fields(message)
    fields["body_length"] = len(message.body)
    fields["body_text"] = body_text(message.body)
    fields["body_base64"] = base64.b64encode(message.body).decode("ascii")
    return fields


def local_time(ms: int | None) -> str:
    """Epoch milliseconds as ISO-8601 in this machine's time zone, for people to read
    (JSON output and the API keep the numbers)."""
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000).astimezone().isoformat(timespec="milliseconds")


def describe(message: Message) -> str:
    """Multi-line, amqsbcg-like description for terminals: the MQMD as stored (PutDate and
    PutTime are GMT, as MQ writes them), then when that was in local time."""
    lines = [f"  {name:<14} {value!r}" for name, value in mqmd_fields(message).items()]
    put_at = mq_timestamp_ms(message.put_date, message.put_time)
    if put_at is not None:
        lines.append(f"  {'put at':<14} {local_time(put_at)}")
    text = body_text(message.body)
    if text is not None:
        lines += [f"  {'body':<14} {len(message.body)} bytes, text", text]
    else:
        lines += [f"  {'body':<14} {len(message.body)} bytes, binary (hex)", hexdump(message.body)]
    return "\n".join(lines)
