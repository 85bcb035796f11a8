"""``broker put/get/browse``: what amqsput, amqsget and amqsbcg do."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from broker.cli.context import EXIT_USAGE, Context
from queues import Message
from queues.formatting import describe, message_json, parse_id
from queues.message import (
    MQCI_NONE,
    MQFMT_STRING,
    MQMI_NONE,
    MQMT_DATAGRAM,
    MQMT_REPLY,
    MQMT_REPORT,
    MQMT_REQUEST,
    MQPER_NOT_PERSISTENT,
    MQPER_PERSISTENCE_AS_Q_DEF,
    MQPER_PERSISTENT,
)

_MSG_TYPES = {"datagram": MQMT_DATAGRAM, "request": MQMT_REQUEST, "reply": MQMT_REPLY, "report": MQMT_REPORT}


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    put = commands.add_parser("put", help="put a message (like amqsput)")
    put.add_argument("queue")
    put.add_argument("text", nargs="?", help="the body; else --file, else standard input")
    put.add_argument("--file", type=Path, help="read the body from this file, as bytes")
    put.add_argument("--correl-id", help="48 hex digits, 0x..., or text")
    put.add_argument("--msg-id", help="48 hex digits, 0x..., or text (default: generated)")
    put.add_argument("--reply-to", default="", help="ReplyToQ")
    put.add_argument("--reply-to-qmgr", default="", help="ReplyToQMgr")
    put.add_argument("--priority", type=int, default=-1, help="0-9 (default: the queue's)")
    persistence = put.add_mutually_exclusive_group()
    persistence.add_argument("--persistent", dest="persistence", action="store_const", const=MQPER_PERSISTENT)
    persistence.add_argument(
        "--non-persistent", dest="persistence", action="store_const", const=MQPER_NOT_PERSISTENT
    )
    put.add_argument("--expiry", type=int, default=-1, help="lifetime in tenths of a second (MQMD Expiry)")
    put.add_argument("--format", default=MQFMT_STRING, help="MQMD Format (default MQSTR)")
    put.add_argument("--msg-type", default="datagram", help="datagram, request, reply, report or a number")
    put.add_argument("--user-id", default="", help="UserIdentifier (default: your login name)")
    put.set_defaults(handler=put_message, persistence=MQPER_PERSISTENCE_AS_Q_DEF)

    get = commands.add_parser("get", help="get a message destructively (like amqsget)")
    get.add_argument("queue")
    get.add_argument("--wait", type=float, default=0.0, help="seconds to wait for a message")
    get.add_argument("--msg-id", help="get the message with this MsgId")
    get.add_argument("--correl-id", help="get the message with this CorrelId")
    get.add_argument("--json", action="store_true", help="print JSON")
    get.set_defaults(handler=get_message, gets=True)

    browse = commands.add_parser("browse", help="show messages without removing them (like amqsbcg)")
    browse.add_argument("queue")
    browse.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    browse.add_argument("--json", action="store_true", help="print JSON")
    browse.set_defaults(handler=browse_messages)


def _body(args: argparse.Namespace) -> bytes:
    if args.text is not None and args.file is not None:
        print("give the body as TEXT or --file, not both", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)
    if args.file is not None:
        try:
            return args.file.read_bytes()
        except OSError as exc:
            print(f"cannot read --file: {exc}", file=sys.stderr)
            raise SystemExit(EXIT_USAGE) from None
    if args.text is not None:
        return args.text.encode("utf-8")
    return sys.stdin.buffer.read()


def _msg_type(value: str) -> int:
    if value.lower() in _MSG_TYPES:
        return _MSG_TYPES[value.lower()]
    try:
        return int(value)
    except ValueError:
        print(f"--msg-type {value!r}: use {', '.join(_MSG_TYPES)} or a number", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None


def put_message(ctx: Context) -> None:
    args = ctx.args
    message = Message(
        body=_body(args),
        correl_id=parse_id(args.correl_id) if args.correl_id else MQCI_NONE,
        msg_id=parse_id(args.msg_id) if args.msg_id else MQMI_NONE,
        format=args.format.ljust(8),
        msg_type=_msg_type(args.msg_type),
        reply_to_q=args.reply_to,
        reply_to_qmgr=args.reply_to_qmgr,
        priority=args.priority,
        persistence=args.persistence,
        expiry=args.expiry,
        user_id=args.user_id,
    )
    msg_id = ctx.qm.put(args.queue, message)
    ctx.emit({"queue": args.queue, "msg_id": msg_id.hex()}, f"put to {args.queue}: msg_id {msg_id.hex()}")


def get_message(ctx: Context) -> None:
    """The message leaves its queue only once it has been written out (``QueueManager.getting``):
    ``broker get Q | head -3`` loses nothing."""
    args = ctx.args
    with ctx.qm.getting(
        args.queue,
        wait=args.wait,
        msg_id=parse_id(args.msg_id) if args.msg_id else None,
        correl_id=parse_id(args.correl_id) if args.correl_id else None,
    ) as message:
        ctx.emit(*_shown(message))


def browse_messages(ctx: Context) -> None:
    found = ctx.qm.browse(ctx.args.queue, limit=ctx.args.limit)
    shown = [_shown(b.message) for b in found]
    blocks = [f"message {i + 1}:\n{text}" for i, (_, text) in enumerate(shown)]
    ctx.emit(
        [value for value, _ in shown], "\n\n".join(blocks) if blocks else f"no messages on {ctx.args.queue}"
    )


def _shown(message: Message) -> tuple[dict[str, Any], str]:
    """The message as JSON and as text: the descriptor and the raw body, and an MQRFH2
    message's folders and command decoded beside them."""
    from broker.protocol.decoded import decode_message

    decoded = decode_message(message)
    value, text = message_json(message), describe(message)
    if decoded is None:
        return value, text
    return {**value, "rfh2": decoded.as_json()}, f"{text}\n{decoded.describe()}"
