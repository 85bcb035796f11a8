"""``broker neighbour``: link this broker with neighbouring broker instances, and stop and start
the channels to them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from broker.cli.context import EXIT_USAGE, Context


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    neighbour = commands.add_parser("neighbour", help="neighbouring brokers (both sides define the link)")
    sub = neighbour.add_subparsers(dest="neighbour_command", required=True, metavar="COMMAND")
    add = sub.add_parser(
        "add",
        help="link a neighbour: its queue manager NAME, its admin API --url, the link --token",
        description="Defines the transmission queue NAME, checks that the link keeps the network a "
        "tree (refused if it would close a cycle), and records the link; the running broker then "
        "sends the neighbour its proxy subscriptions and starts the channel.",
    )
    add.add_argument("name", help="the neighbour's queue manager name")
    add.add_argument("--url", required=True, help="the neighbour's admin API base URL, e.g. http://host:8080")
    _secret_arguments(add, required=True)
    add.add_argument(
        "--no-topology-check", action="store_true", help="skip the cycle check (when a neighbour is down)"
    )
    add.add_argument("--json", action="store_true")
    add.set_defaults(handler=add_neighbour)
    listing = sub.add_parser("list", help="neighbours with their channel state and queue depths")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=list_neighbours)
    alter = sub.add_parser(
        "alter",
        help="change a neighbour's --url, the link's token, or both",
        description="The channel sends to the new URL, with the new token, from its next batch; "
        "change the token on both sides.",
    )
    alter.add_argument("name")
    alter.add_argument("--url", help="the neighbour's admin API base URL, e.g. http://host:8080")
    _secret_arguments(alter, required=False)
    alter.add_argument("--json", action="store_true")
    alter.set_defaults(handler=alter_neighbour)
    for verb, effect in (
        ("stop", "its messages wait on the transmission queue until it is started"),
        ("start", "it sends what waits on the transmission queue"),
    ):
        channel = sub.add_parser(verb, help=f"{verb} the channel to a neighbour: {effect}")
        channel.add_argument("name")
        channel.add_argument("--json", action="store_true")
        channel.set_defaults(handler=change_channel, verb=verb)
    remove = sub.add_parser("remove", help="unlink a neighbour")
    remove.add_argument("name")
    remove.add_argument("--purge", action="store_true", help="discard messages still waiting for it")
    remove.add_argument("--json", action="store_true")
    remove.set_defaults(handler=remove_neighbour)


def _secret_arguments(parser: argparse.ArgumentParser, *, required: bool) -> None:
    secret = parser.add_mutually_exclusive_group(required=required)
    secret.add_argument(
        "--token",
        help="the link's shared secret (same on both sides, >= 16 chars); it shows in the process "
        "list: prefer --token-file",
    )
    secret.add_argument(
        "--token-file", metavar="FILE", help="a file holding the link's secret ('-': standard input)"
    )


def _token(args: argparse.Namespace) -> str | None:
    """The secret given with --token or in --token-file, if either was."""
    return args.token if args.token_file is None else _read_secret(args.token_file)


def add_neighbour(ctx: Context) -> None:
    from broker.admin import neighbours

    a = ctx.args
    token = _token(a)
    assert token is not None  # one of the two is required
    checked = not a.no_topology_check
    link, warning = neighbours.add_neighbour(ctx.qm, a.name, a.url, token, check_topology=checked)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    ctx.emit(
        {"name": link.name, "url": link.url, "warning": warning}, f"neighbour {link.name} added ({link.url})"
    )


def _read_secret(path: str) -> str:
    """The secret in ``path`` (``-``: standard input), without the line end a file ends with."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        print(f"cannot read --token-file: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None
    return text.strip()


def alter_neighbour(ctx: Context) -> None:
    from broker.admin import neighbours

    a = ctx.args
    token = _token(a)
    if a.url is None and token is None:
        print("give --url, --token or --token-file", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)
    link = neighbours.alter_neighbour(ctx.qm, a.name, url=a.url, token=token)
    ctx.emit(
        {"name": link.name, "url": link.url, "token_changed": token is not None},
        f"neighbour {link.name} altered ({link.url})",
    )


def change_channel(ctx: Context) -> None:
    """``stop`` or ``start``; doing it twice changes nothing and says so."""
    from broker.admin import neighbours

    a = ctx.args
    stopping = a.verb == "stop"
    changed = (neighbours.stop_channel if stopping else neighbours.start_channel)(ctx.qm, a.name)
    done, was = ("stopped", "stopped") if stopping else ("started", "running")
    ctx.emit(
        {"name": a.name, "stopped": stopping, "changed": changed},
        f"channel to {a.name} {done}" if changed else f"channel to {a.name} was already {was}",
    )


def list_neighbours(ctx: Context) -> None:
    from broker.admin import neighbours

    rows = [status.as_dict() for status in neighbours.neighbour_status(ctx.qm)]
    text = [f"{'NEIGHBOUR':<20} {'CHANNEL':<9} {'WAITING':>8} {'IN FLIGHT':>9}  {'URL':<30} LAST ERROR"]
    text += [
        f"{r['name']:<20} {r['state']:<9} {r['transmission_depth']:>8} {r['in_flight']:>9}  {r['url']:<30} "
        f"{r['last_error'] or ''}"
        for r in rows
    ]
    ctx.emit(rows, "\n".join(text))


def remove_neighbour(ctx: Context) -> None:
    from broker.admin import neighbours

    discarded = neighbours.remove_neighbour(ctx.qm, ctx.args.name, purge=ctx.args.purge)
    ctx.emit(
        {"name": ctx.args.name, "removed": True, "discarded": discarded},
        f"neighbour {ctx.args.name} removed" + (f" ({discarded} messages discarded)" if discarded else ""),
    )
