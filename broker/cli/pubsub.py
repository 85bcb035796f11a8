"""``broker publish/subscribe/unsubscribe/request-update/delete-publication/receive``.

Each command is sent to a running broker (``broker serve``) as MQRFH2 command
messages, exactly as an application would, and the broker's ``<pscr>`` answer
is printed in words: completion, reason name and number, refused topics.
Exit code 1 when the broker answers ``error``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker.cli.context import EXIT_MQ_ERROR, EXIT_USAGE, Context
from queues.formatting import body_text, mqmd_fields, parse_id
from queues.message import MQPER_NOT_PERSISTENT, MQPER_PERSISTENT

if TYPE_CHECKING:
    from broker.client import BrokerClient, BrokerResponse, ReceivedPublication
    from broker.protocol.options import RegOpt
    from queues.message import Message

_REG_FLAGS = (
    ("--local", "Local", "not propagated to other brokers; sees only publications made here"),
    ("--new-pubs-only", "NewPubsOnly", "no retained publications on registering"),
    ("--pub-on-req-only", "PubOnReqOnly", "publications only on request-update"),
    ("--inform-if-retained", "InformIfRet", "mark retained publications (IsRetainedPub)"),
    ("--dups-ok", "DupsOK", "occasional duplicates are acceptable"),
    ("--add-name", "AddName", "name an existing unnamed subscription (with --sub-name)"),
    ("--no-alter", "NoAlter", "do not change an existing subscription"),
    ("--full-response", "FullResp", "answer with every attribute of the subscription"),
    ("--join-shared", "JoinShared", "join the identity set (with --sub-identity)"),
    ("--join-exclusive", "JoinExcl", "join the identity set exclusively"),
    ("--variable-user-id", "VariableUserId", "other users may use this identity"),
)
_PERSISTENCE = {
    "as-publisher": "PersAsPub",
    "as-queue": "PersAsQueue",
    "persistent": "Pers",
    "non-persistent": "NonPers",
}


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--user-id", default="", help="MQMD UserIdentifier to act as (default: your login)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the broker's answer")
    parser.add_argument("--json", action="store_true", help="print JSON")


def _subscriber(parser: argparse.ArgumentParser, topics_required: bool = True) -> None:
    parser.add_argument("--topic", action="append", required=topics_required, default=[], help="repeatable")
    parser.add_argument("--queue", help="subscriber queue (QName)")
    # Its own dest: the global --qmgr is the queue manager the database must belong to.
    parser.add_argument("--qmgr", dest="subscriber_qmgr", help="subscriber queue manager (QMgrName)")
    parser.add_argument("--sub-point", help="subscription point (default: the default one)")
    parser.add_argument("--sub-name", help="SubName")
    parser.add_argument("--sub-identity", help="SubIdentity (identity sets)")
    parser.add_argument("--correl-id", help="CorrelId for CorrelAsId (48 hex digits, 0x..., or text)")
    _common(parser)


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pub = commands.add_parser("publish", help="publish on one or more topics")
    pub.add_argument("text", nargs="?", help="the body; else --file, else standard input")
    pub.add_argument("--topic", action="append", required=True, help="repeatable")
    pub.add_argument("--file", type=Path, help="read the body from this file")
    pub.add_argument("--retain", action="store_true", help="RetainPub")
    pub.add_argument("--local", action="store_true", help="Local: never forwarded to other brokers")
    pub.add_argument("--other-subs-only", action="store_true", help="OtherSubsOnly: not to the publisher")
    pub.add_argument("--correl-as-id", action="store_true", help="CorrelAsId (with --correl-id)")
    pub.add_argument("--correl-id", help="CorrelId (48 hex digits, 0x..., or text)")
    pub.add_argument("--reply-queue", help="publisher identity queue for OtherSubsOnly (QName)")
    pub.add_argument("--sub-point", help="subscription point")
    pub.add_argument("--pub-time", help="PubTime to carry to subscribers")
    pub.add_argument("--seq-num", help="SeqNum to carry to subscribers")
    pub.add_argument("--stream", help="stream queue (default SYSTEM.BROKER.DEFAULT.STREAM)")
    pub.add_argument("--persistent", dest="persistence", action="store_const", const=MQPER_PERSISTENT)
    pub.add_argument("--non-persistent", dest="persistence", action="store_const", const=MQPER_NOT_PERSISTENT)
    pub.add_argument("--expiry", type=int, default=-1, help="tenths of a second (MQMD Expiry)")
    pub.add_argument("--no-wait", action="store_true", help="send as a datagram, do not wait for an answer")
    _common(pub)
    pub.set_defaults(handler=publish)

    sub = commands.add_parser("subscribe", help="register a subscription (RegSub)")
    _subscriber(sub)
    for flag, _, text in _REG_FLAGS:
        sub.add_argument(flag, action="store_true", help=text)
    sub.add_argument("--persistence", choices=sorted(_PERSISTENCE), help="persistence of deliveries")
    sub.add_argument("--sub-user-data", help="SubUserData")
    sub.add_argument("--expiry", type=int, default=-1, help="subscription lifetime in tenths of a second")
    sub.set_defaults(handler=subscribe)

    unsub = commands.add_parser("unsubscribe", help="deregister subscriptions (DeregSub)")
    _subscriber(unsub, topics_required=False)
    unsub.add_argument("--all", action="store_true", help="DeregAll: every subscription of the identity")
    unsub.add_argument("--leave-only", action="store_true", help="leave the identity set only")
    unsub.add_argument("--full-response", action="store_true")
    unsub.add_argument("--variable-user-id", action="store_true")
    unsub.set_defaults(handler=unsubscribe)

    update = commands.add_parser("request-update", help="ask for retained publications (ReqUpdate)")
    _subscriber(update)
    update.add_argument("--variable-user-id", action="store_true")
    update.set_defaults(handler=request_update)

    delete = commands.add_parser("delete-publication", help="delete retained publications (DeletePub)")
    delete.add_argument("--topic", action="append", required=True, help="repeatable, wildcards allowed")
    delete.add_argument("--local", action="store_true", help="only at this broker")
    delete.add_argument("--sub-point", help="subscription point")
    delete.add_argument("--stream", help="stream queue (default SYSTEM.BROKER.DEFAULT.STREAM)")
    _common(delete)
    delete.set_defaults(handler=delete_publication)

    receive = commands.add_parser("receive", help="get the next publication from a subscriber queue")
    receive.add_argument("queue")
    receive.add_argument("--wait", type=float, default=0.0, help="seconds to wait")
    receive.add_argument("--json", action="store_true", help="print JSON")
    receive.set_defaults(handler=receive_publication, gets=True)


def _client(ctx: Context) -> BrokerClient:
    from broker.client import BrokerClient

    return BrokerClient(ctx.qm, user_id=ctx.args.user_id, timeout=ctx.args.timeout)


def _answer(ctx: Context, response: BrokerResponse | None) -> None:
    if response is None:
        ctx.emit({"sent": True}, "sent (no answer requested)")
        return
    hints = [hint for item in response.items if (hint := _hint(ctx.args, item.reason, item.parameter))]
    ctx.emit(
        {
            "completion": response.completion,
            "responses": [
                {"reason": i.reason, "topic": i.topic, "parameter": i.parameter, "detail": i.detail}
                for i in response.items
            ],
            "attributes": [list(a) for a in response.attributes],
            "hints": hints,
        },
        "\n".join([response.describe(), *(f"  hint: {hint}" for hint in hints)]),
    )
    if response.completion == "error":
        raise SystemExit(EXIT_MQ_ERROR)


def _hint(args: argparse.Namespace, reason: int, parameter: str | None) -> str | None:
    """What a newcomer does next about a refusal the reason alone does not explain."""
    queue, qmgr = getattr(args, "queue", None), getattr(args, "subscriber_qmgr", None)
    if reason == 3076 and parameter == "QName" and queue:  # MQRCCF_Q_NAME_ERROR
        return f"the queue {queue} is not defined on this broker: broker queue define {queue}"
    if reason == 3074 and qmgr:  # MQRCCF_Q_MGR_NAME_ERROR
        return f"{qmgr} is neither this broker's queue manager nor a neighbour (broker neighbour list)"
    if reason == 3073 and args.command == "request-update":  # MQRCCF_NOT_REGISTERED
        return (
            "request-update names one of the subscriber's subscriptions exactly as it was "
            f"registered (wildcards included): broker subscriptions list --queue {queue or 'QUEUE'}"
        )
    return None


def _flags(kind: Any, pairs: Iterable[tuple[bool, str]]) -> Any:
    """The options named in ``pairs`` whose flag was given, as a ``kind`` (PubOpt, RegOpt...)."""
    options = kind(0)
    for given, name in pairs:
        if given:
            options |= kind[name]
    return options


def _body(args: argparse.Namespace) -> bytes | str:
    if args.text is not None and args.file is not None:
        print("give the body as TEXT or --file, not both", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)
    if args.file is not None:
        return args.file.read_bytes()
    if args.text is not None:
        return args.text
    return sys.stdin.read()


def publish(ctx: Context) -> None:
    from broker.protocol.options import PubOpt

    args = ctx.args
    options = _flags(
        PubOpt,
        [
            (args.retain, "RetainPub"),
            (args.local, "Local"),
            (args.other_subs_only, "OtherSubsOnly"),
            (args.correl_as_id, "CorrelAsId"),
        ],
    )
    extra: dict[str, Any] = {"expiry": args.expiry}
    if args.persistence is not None:
        extra["persistence"] = args.persistence
    with _client(ctx) as client:
        response = client.publish(
            args.topic,
            _body(args),
            options=options,
            sub_point=args.sub_point,
            pub_time=args.pub_time,
            seq_num=args.seq_num,
            q_name=args.reply_queue,
            correl_id=parse_id(args.correl_id) if args.correl_id else None,
            stream=args.stream,
            wait=not args.no_wait,
            **extra,
        )
        _answer(ctx, response)


def _registration(ctx: Context, options: RegOpt) -> dict[str, Any]:
    from broker.protocol.options import RegOpt

    args = ctx.args
    if args.correl_id:
        options |= RegOpt.CorrelAsId
    return {
        "queue": args.queue,
        "q_mgr": args.subscriber_qmgr,
        "sub_point": args.sub_point,
        "sub_name": args.sub_name,
        "options": options,
        "correl_id": parse_id(args.correl_id) if args.correl_id else None,
    }


def subscribe(ctx: Context) -> None:
    from broker.protocol.options import RegOpt

    args = ctx.args
    given = [(getattr(args, flag[2:].replace("-", "_")), name) for flag, name, _ in _REG_FLAGS]
    options = _flags(RegOpt, [*given, (bool(args.persistence), _PERSISTENCE.get(args.persistence, ""))])
    with _client(ctx) as client:
        _answer(
            ctx,
            client.subscribe(
                args.topic,
                sub_identity=args.sub_identity,
                sub_user_data=args.sub_user_data,
                expiry=args.expiry,
                **_registration(ctx, options),
            ),
        )


def unsubscribe(ctx: Context) -> None:
    from broker.protocol.options import RegOpt

    args = ctx.args
    options = _flags(
        RegOpt,
        [
            (args.all, "DeregAll"),
            (args.leave_only, "LeaveOnly"),
            (args.full_response, "FullResp"),
            (args.variable_user_id, "VariableUserId"),
        ],
    )
    with _client(ctx) as client:
        _answer(
            ctx, client.unsubscribe(args.topic, sub_identity=args.sub_identity, **_registration(ctx, options))
        )


def request_update(ctx: Context) -> None:
    from broker.protocol.options import RegOpt

    args = ctx.args
    if len(args.topic) != 1:
        print("request-update takes exactly one --topic", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)
    options = RegOpt.VariableUserId if args.variable_user_id else RegOpt(0)
    with _client(ctx) as client:
        _answer(ctx, client.request_update(args.topic[0], **_registration(ctx, options)))


def delete_publication(ctx: Context) -> None:
    from broker.protocol.options import DelOpt

    args = ctx.args
    with _client(ctx) as client:
        _answer(
            ctx,
            client.delete_publication(
                args.topic,
                options=DelOpt.Local if args.local else DelOpt(0),
                sub_point=args.sub_point,
                stream=args.stream,
            ),
        )


def receive_publication(ctx: Context) -> None:
    from broker.protocol.messages import decode_publication

    with ctx.qm.getting(ctx.args.queue, wait=ctx.args.wait) as message:  # gone once written out
        _show_publication(ctx, message, decode_publication(message))


def _show_publication(ctx: Context, message: Message, pub: ReceivedPublication) -> None:
    text = body_text(pub.body)
    ctx.emit(
        {
            "topics": list(pub.topics),
            "sub_point": pub.sub_point,
            "retained": pub.retained,
            "pub_time": pub.pub_time,
            "seq_num": pub.seq_num,
            "folders": list(pub.folders),
            "body_text": text,
            "body_hex": None if text is not None else pub.body.hex(),
            "mqmd": mqmd_fields(message),
        },
        "\n".join(
            [
                f"topic    {', '.join(pub.topics)}" + ("  (retained)" if pub.retained else ""),
                *([f"subpoint {pub.sub_point}"] if pub.sub_point else []),
                f"body     {text if text is not None else pub.body.hex()}",
            ]
        ),
    )
