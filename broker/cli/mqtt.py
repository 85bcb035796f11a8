"""``broker mqtt ...``: MQTT principals' passwords, the stored sessions, and an operator's
disconnect of a client or deletion of a session.

A password is read from the terminal (or one line of standard input with
``--password-stdin``) and stored only as a salted scrypt hash. Disconnect and delete are
requests to the MQTT listener through the database (``broker.store.mqtt_requests``), as
the admin API makes them: the listener may run in another process.
"""

from __future__ import annotations

import argparse
import getpass
import sys

from broker.cli.context import EXIT_MQ_ERROR, EXIT_USAGE, Context
from queues.formatting import local_time

MAX_USER_ID = 12  # the MQMD UserIdentifier the broker's authority checks compare


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mqtt = commands.add_parser("mqtt", help="MQTT principals and sessions")
    sub = mqtt.add_subparsers(dest="mqtt_command", required=True, metavar="COMMAND")
    passwd = sub.add_parser("passwd", help="set (or create) an MQTT principal's password")
    passwd.add_argument("user", help="the principal: its ACL rules are the broker's (12 characters at most)")
    passwd.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    passwd.set_defaults(handler=set_password)
    users = sub.add_parser("users", help="the MQTT principals")
    users.set_defaults(handler=list_users)
    remove = sub.add_parser("remove-user", help="remove an MQTT principal: it can no longer connect")
    remove.add_argument("user")
    remove.set_defaults(handler=remove_user)
    sessions = sub.add_parser("sessions", help="the stored MQTT sessions (connected or persistent)")
    sessions.set_defaults(handler=list_sessions)
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
    if ctx.args.password_stdin:
        return sys.stdin.readline().rstrip("\r\n").encode("utf-8")
    first = getpass.getpass("password: ")
    if getpass.getpass("again: ") != first:
        print("the passwords differ", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)
    return first.encode("utf-8")


def set_password(ctx: Context) -> None:
    from broker.service.provision import prepare_database
    from broker.store import mqtt
    from queues.ids import now_ms

    user = ctx.args.user
    if not 0 < len(user) <= MAX_USER_ID:
        print(f"a principal has 1 to {MAX_USER_ID} characters: {user!r}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)
    password = _password(ctx)
    if not password:
        print("the password is empty", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)
    prepare_database(ctx.engine(), ctx.settings.qmgr_name)
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
        removed = mqtt.delete_principal(uow.connection, ctx.args.user)
    if not removed:
        print(f"no MQTT principal {ctx.args.user}", file=sys.stderr)
        raise SystemExit(EXIT_MQ_ERROR)
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
    lines = [
        f"{'CLIENT ID':<24}  {'USER':<12}  {'ONLINE':<6}  {'CLEAN':<5}  {'VERSION':<7}  {'IN FLIGHT':>9}  "
        f"{'DROPPED':>7}  {'REFUSED':>7}  {'ADDRESS':<21}  SINCE"
    ]
    lines += [
        f"{s.client_id:<24}  {s.user_id:<12}  {_yes(s.online):<6}  {_yes(s.clean):<5}  "
        f"{'3.1.1' if s.protocol_level == 4 else '3.1':<7}  {s.in_flight:>9}  {s.dropped:>7}  "
        f"{s.refused:>7}  {s.address:<21}  {local_time(s.connected_at)}"
        for s in found
    ]
    ctx.emit(
        [
            {
                "client_id": s.client_id,
                "user": s.user_id,
                "online": s.online,
                "in_flight": s.in_flight,
                "dropped": s.dropped,
                "refused": s.refused,
                "offline_since": s.offline_since,
                "clean": s.clean,
                "protocol_level": s.protocol_level,
                "address": s.address,
                "queue": s.queue,
                "created_at": s.created_at,
                "connected_at": s.connected_at,
            }
            for s in found
        ],
        "\n".join(lines),
    )


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"
