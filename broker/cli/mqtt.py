"""``broker mqtt ...``: MQTT principals' passwords, the stored sessions, the nodes of the
cluster, and an operator's disconnect of a client or deletion of a session.

A password is read from the terminal (or one line of standard input, when that is not a
terminal or with ``--password-stdin``) and stored only as a salted scrypt hash. Disconnect and delete are
requests to the MQTT listener through the database (``broker.store.mqtt_requests``), as
the admin API makes them: the listener may run in another process.
"""

from __future__ import annotations

import argparse
import getpass
import sys

from broker.cli.context import EXIT_USAGE, Context
from broker.cli.tables import table
from queues.formatting import local_time

SESSION_COLUMNS = (
    "CLIENT ID",
    "USER",
    "ONLINE",
    "NODE",
    "CLEAN",
    "VERSION",
    "KEEPALIVE",
    "IN FLIGHT",
    "QUEUED",
    "DROPPED",
    "REFUSED",
    "BYTES IN",
    "BYTES OUT",
    "ADDRESS",
    "SINCE",
)
COUNTS = ("KEEPALIVE", "IN FLIGHT", "QUEUED", "DROPPED", "REFUSED", "BYTES IN", "BYTES OUT")


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mqtt = commands.add_parser("mqtt", help="MQTT principals and sessions")
    sub = mqtt.add_subparsers(dest="mqtt_command", required=True, metavar="COMMAND")
    passwd = sub.add_parser("passwd", help="set (or create) an MQTT principal's password")
    passwd.add_argument("user", help="the principal: its ACL rules are the broker's (12 characters at most)")
    passwd.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the password from standard input (the default when it is not a terminal)",
    )
    passwd.set_defaults(handler=set_password)
    users = sub.add_parser("users", help="the MQTT principals")
    users.set_defaults(handler=list_users)
    remove = sub.add_parser("remove-user", help="remove an MQTT principal: it can no longer connect")
    remove.add_argument("user")
    remove.set_defaults(handler=remove_user)
    sessions = sub.add_parser("sessions", help="the stored MQTT sessions (connected or persistent)")
    sessions.set_defaults(handler=list_sessions)
    nodes = sub.add_parser(
        "nodes", help="the nodes of the MQTT cluster: their clients, last heartbeat, state"
    )
    nodes.set_defaults(handler=list_nodes)
    disconnect = sub.add_parser(
        "disconnect", help="close a connected client's connection (its will is published)"
    )
    disconnect.add_argument("client_id", metavar="CLIENT_ID")
    disconnect.set_defaults(handler=disconnect_client)
    delete = sub.add_parser(
        "delete-session",
        help="delete a session (its client disconnected first): subscriptions, queued and in-flight messages",
    )
    delete.add_argument("client_id", metavar="CLIENT_ID")
    delete.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for the MQTT listener (default 10)"
    )
    delete.set_defaults(handler=delete_session)


def _password(ctx: Context) -> bytes:
    """Asked twice on the terminal; one line of standard input when that is not a terminal
    (``echo secret | broker mqtt passwd USER``) or with ``--password-stdin``."""
    if ctx.args.password_stdin or not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\r\n").encode("utf-8")
    first = getpass.getpass("password: ")
    if getpass.getpass("again: ") != first:
        print("the passwords differ", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)
    return first.encode("utf-8")


def set_password(ctx: Context) -> None:
    from broker.core.authority import check_principal
    from broker.store import mqtt
    from queues.ids import now_ms

    user = check_principal(ctx.args.user)
    password = _password(ctx)
    if not password:
        print("the password is empty", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)
    with ctx.qm.unit_of_work() as uow:
        mqtt.set_password(uow.connection, user, password, now_ms())
    ctx.emit({"user": user}, f"password of MQTT principal {user} set")


def list_users(ctx: Context) -> None:
    from broker.store import mqtt

    with ctx.qm.reading() as conn:
        found = mqtt.list_principals(conn)
    lines = [f"{'USER':<12}  CREATED"] + [f"{user:<12}  {local_time(at)}" for user, at in found]
    ctx.emit([{"user": user, "created_at": at} for user, at in found], "\n".join(lines))


def remove_user(ctx: Context) -> None:
    from broker.store import mqtt

    with ctx.qm.unit_of_work() as uow:
        mqtt.delete_principal(uow.connection, ctx.args.user)
    ctx.emit({"user": ctx.args.user}, f"MQTT principal {ctx.args.user} removed")


def _reason() -> str:
    return f"{getpass.getuser()} through the CLI"


def disconnect_client(ctx: Context) -> None:
    from broker.store import mqtt_requests

    stored = mqtt_requests.disconnect(ctx.qm, ctx.args.client_id, _reason())
    ctx.emit(
        {"client_id": stored.client_id, "user": stored.user_id, "requested": True},
        f"disconnect of MQTT client {stored.client_id} requested",
    )


def delete_session(ctx: Context) -> None:
    from broker.store import mqtt_requests

    stored = mqtt_requests.delete_session(ctx.qm, ctx.args.client_id, _reason(), timeout=ctx.args.timeout)
    ctx.emit(
        {"client_id": stored.client_id, "user": stored.user_id, "queue": stored.queue, "deleted": True},
        f"MQTT session {stored.client_id} deleted",
    )


def list_sessions(ctx: Context) -> None:
    from broker.store import mqtt

    with ctx.qm.reading() as conn:
        found = mqtt.list_sessions(conn)
    depths = ctx.qm.inquire_queues([s.queue for s in found])
    queued = {name: 0 if d is None else d.depth for name, d in depths.items()}
    rows = [
        [
            s.client_id,
            s.user_id,
            _yes(s.online),
            s.node,
            _yes(s.clean),
            s.version,
            s.keepalive,
            s.in_flight,
            queued[s.queue],
            s.dropped,
            s.refused,
            s.bytes_in,
            s.bytes_out,
            s.address,
            local_time(s.connected_at),
        ]
        for s in found
    ]
    ctx.emit(
        [
            {
                "client_id": s.client_id,
                "user": s.user_id,
                "online": s.online,
                "node": s.node,
                "in_flight": s.in_flight,
                "queued": queued[s.queue],
                "dropped": s.dropped,
                "refused": s.refused,
                "offline_since": s.offline_since,
                "clean": s.clean,
                "protocol_level": s.protocol_level,
                "keepalive": s.keepalive,
                "bytes_in": s.bytes_in,
                "bytes_out": s.bytes_out,
                "session_expiry": s.expiry,
                "receive_maximum": s.receive_maximum,
                "topic_alias_maximum": s.topic_alias_maximum,
                "address": s.address,
                "queue": s.queue,
                "created_at": s.created_at,
                "connected_at": s.connected_at,
            }
            for s in found
        ],
        table(SESSION_COLUMNS, rows, right=COUNTS),
    )


def list_nodes(ctx: Context) -> None:
    from broker.core.cluster import nodes
    from broker.store import nodes as members
    from queues.ids import now_ms

    with ctx.qm.reading() as conn:
        found = nodes(members.members(conn), now_ms(), int(ctx.settings.node_timeout * 1000))
    lines = [f"{'NODE':<24}  {'STATE':<6}  {'CLIENTS':>7}  {'PROCESSES':>9}  {'LAST HEARTBEAT':<29}  ADDRESS"]
    lines += [
        f"{n.name:<24}  {n.state:<6}  {n.clients:>7}  {n.processes:>9}  {local_time(n.last_heartbeat):<29}  "
        f"{n.address}"
        for n in found
    ]
    ctx.emit(
        [
            {
                "node": n.name,
                "state": n.state,
                "clients": n.clients,
                "processes": n.processes,
                "last_heartbeat": n.last_heartbeat,
                "started_at": n.started_at,
                "address": n.address,
            }
            for n in found
        ],
        "\n".join(lines),
    )


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"
