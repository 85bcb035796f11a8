"""``broker queue``: what ``runmqsc`` DEFINE/ALTER/DISPLAY/CLEAR/DELETE QLOCAL do."""

from __future__ import annotations

import argparse
from contextlib import ExitStack
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from broker.cli.context import Context
from queues.definition import QueueDefinition
from queues.errors import MQError
from queues.formatting import local_time

if TYPE_CHECKING:
    from broker.core.subscription import Identity

# flag -> attribute, for define and alter alike
_ATTRIBUTE_FLAGS: tuple[tuple[str, str, type, str], ...] = (
    ("--max-depth", "max_depth", int, "MAXDEPTH: most messages the queue holds (default 5000)"),
    ("--max-msg-length", "max_msg_length", int, "MAXMSGL in bytes (default 4 MiB)"),
    ("--backout-threshold", "backout_threshold", int, "BOTHRESH: backouts before a message is moved"),
    ("--backout-queue", "backout_requeue_q", str, "BOQNAME: where such messages go (else the DLQ)"),
    ("--priority", "def_priority", int, "DEFPRTY 0-9"),
    ("--description", "description", str, "DESCR"),
    ("--usage", "usage", str, "normal or xmitq"),
    ("--definition-type", "definition_type", str, "predefined, permdyn or tempdyn"),
    ("--index-type", "index_type", str, "INDXTYPE: correlid (gets by CorrelId use an index) or none"),
)


def _add_attribute_flags(parser: argparse.ArgumentParser) -> None:
    for flag, dest, kind, text in _ATTRIBUTE_FLAGS:
        parser.add_argument(flag, dest=dest, type=kind, help=text)
    persistence = parser.add_mutually_exclusive_group()
    persistence.add_argument("--persistent", dest="def_persistence", action="store_const", const=1)
    persistence.add_argument("--non-persistent", dest="def_persistence", action="store_const", const=0)
    for name in ("put", "get"):
        toggle = parser.add_mutually_exclusive_group()
        toggle.add_argument(f"--{name}-enabled", dest=f"{name}_enabled", action="store_const", const=True)
        toggle.add_argument(f"--{name}-inhibited", dest=f"{name}_enabled", action="store_const", const=False)


def _attributes(args: argparse.Namespace) -> dict[str, Any]:
    names = [dest for _, dest, _, _ in _ATTRIBUTE_FLAGS] + ["def_persistence", "put_enabled", "get_enabled"]
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    queue = commands.add_parser("queue", help="define, alter, list, show, purge and delete queues")
    sub = queue.add_subparsers(dest="queue_command", required=True, metavar="COMMAND")

    define = sub.add_parser("define", help="define a local queue")
    define.add_argument("name")
    define.add_argument("--replace", action="store_true", help="alter it if it exists (MQ's REPLACE)")
    _add_attribute_flags(define)
    define.set_defaults(handler=define_queue)

    alter = sub.add_parser("alter", help="change a queue's attributes")
    alter.add_argument("name")
    _add_attribute_flags(alter)
    alter.set_defaults(handler=alter_queue)

    listing = sub.add_parser("list", help="queues with their depth")
    listing.add_argument("pattern", nargs="?", default="*", help="name pattern with * and ? (default *)")
    listing.set_defaults(handler=list_queues)

    show = sub.add_parser("show", help="every attribute of one queue")
    show.add_argument("name")
    show.set_defaults(handler=show_queue)

    purge = sub.add_parser("purge", help="remove every message (CLEAR QLOCAL)")
    purge.add_argument("name")
    purge.set_defaults(handler=purge_queue)

    delete = sub.add_parser(
        "delete",
        help="delete an empty queue",
        description="Refused while a running broker uses the queue, while it holds messages (unless "
        "--purge) and while subscriptions deliver to it (unless --force, which deregisters them through "
        "the running broker first).",
    )
    delete.add_argument("name")
    delete.add_argument("--purge", action="store_true", help="remove its messages first")
    delete.add_argument("--force", action="store_true", help="deregister the subscriptions delivering to it")
    delete.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for each deregistration")
    delete.set_defaults(handler=delete_queue)


def _show(ctx: Context, definition: QueueDefinition) -> None:
    fields = asdict(definition)
    text = {key: local_time(value) if key.endswith("_at") else value for key, value in fields.items()}
    ctx.emit(fields, "\n".join(f"{key:<18} {value}" for key, value in text.items()))


def define_queue(ctx: Context) -> None:
    _show(ctx, ctx.qm.define_queue(ctx.args.name, replace_existing=ctx.args.replace, **_attributes(ctx.args)))


def alter_queue(ctx: Context) -> None:
    _show(ctx, ctx.qm.alter_queue(ctx.args.name, **_attributes(ctx.args)))


def show_queue(ctx: Context) -> None:
    _show(ctx, ctx.qm.inquire_queue(ctx.args.name))


def list_queues(ctx: Context) -> None:
    found = ctx.qm.list_queues(ctx.args.pattern)
    header = f"{'QUEUE':<48} {'DEPTH':>10} {'MAXDEPTH':>10}  {'USAGE':<6}  DESCRIPTION"
    rows = [f"{q.name:<48} {q.depth:>10} {q.max_depth:>10}  {q.usage:<6}  {q.description}" for q in found]
    ctx.emit([asdict(q) for q in found], "\n".join([header, *rows]))


def purge_queue(ctx: Context) -> None:
    count = ctx.qm.purge_queue(ctx.args.name)
    ctx.emit({"queue": ctx.args.name, "purged": count}, f"{count} messages purged from {ctx.args.name}")


def delete_queue(ctx: Context) -> None:
    from broker.admin import subscriber_queues
    from broker.client import BrokerClient

    args = ctx.args
    admin = ctx.settings.admin_group
    with ExitStack() as stack:
        clients: list[BrokerClient] = []  # one, made for the first deregistration only

        def deregister(identity: Identity) -> None:
            if not clients:
                clients.append(stack.enter_context(BrokerClient(ctx.qm, timeout=args.timeout, user_id=admin)))
            response = subscriber_queues.deregistration(identity, admin)(clients[0])
            if response.completion == "error":
                raise MQError(response.items[0].reason, f"the broker refused: {response.describe()}")

        count = subscriber_queues.delete_queue(
            ctx.qm,
            args.name,
            purge=args.purge,
            force=args.force,
            deregister=deregister,
            force_option="--force",
        )
    ctx.emit({"queue": args.name, "deleted": True, "purged": count}, f"queue {args.name} deleted")
