"""``broker token create/list/revoke``: bearer tokens of the admin REST API.

These work on the database directly, so the first admin token of a new
installation comes from here (``broker token create --role admin``), with no
API running and no token needed. The secret is printed once and never stored.
Creations and revocations are written to the API's audit log, as the CLI's.
"""

from __future__ import annotations

import argparse
import getpass
from typing import TYPE_CHECKING

from broker.cli.context import Context
from queues.errors import MQError
from queues.formatting import local_time
from queues.ids import now_ms
from queues.message import USER_ID_LENGTH
from queues.reasons import Reason

if TYPE_CHECKING:
    from broker.admin.accounts import Token

ROLES = ("viewer", "operator", "admin")  # broker.admin.accounts.Role, without loading SQLAlchemy


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    token = commands.add_parser("token", help="bearer tokens of the admin REST API")
    sub = token.add_subparsers(dest="token_command", required=True, metavar="COMMAND")
    create = sub.add_parser("create", help="create a token and print its secret (shown only once)")
    create.add_argument("--role", required=True, choices=ROLES)
    create.add_argument(
        "--principal",
        help="the MQMD UserIdentifier of commands sent for the token (default: your login, 12 characters)",
    )
    create.add_argument(
        "--expires",
        type=lifetime,
        metavar="DURATION",
        help="the token expires after DURATION: seconds, or a number with s, m, h or d (default: never)",
    )
    create.add_argument("--json", action="store_true")
    create.set_defaults(handler=create_token)
    listing = sub.add_parser("list", help="every token (without secrets)")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=list_tokens)
    revoke = sub.add_parser("revoke", help="revoke a token: the API refuses it from its next request")
    revoke.add_argument("token_id", type=int)
    revoke.add_argument(
        "--force", action="store_true", help="revoke it even if it is the last live admin token"
    )
    revoke.add_argument("--json", action="store_true")
    revoke.set_defaults(handler=revoke_token)


def token_json(token: Token) -> dict[str, object]:
    return {
        "id": token.token_id,
        "prefix": token.prefix,
        "role": str(token.role),
        "principal": token.principal,
        "created_at": token.created_at,
        "revoked_at": token.revoked_at,
        "expires_at": token.expires_at,
    }


UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def lifetime(text: str) -> int:
    """Seconds of a DURATION: ``3600``, ``90s``, ``15m``, ``12h`` or ``30d``."""
    number, unit = (text[:-1], text[-1]) if text[-1:] in UNITS else (text, "s")
    if not number.isdigit() or int(number) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 3600, 90s, 15m, 12h or 30d")
    return int(number) * UNITS[unit]


def _audit(ctx: Context, token: Token, what: str) -> None:
    summary = {"token_id": token.token_id, "role": str(token.role), "principal": token.principal}
    ctx.audit(f"token {what}", summary)


def create_token(ctx: Context) -> None:
    from broker.admin import accounts

    principal = ctx.args.principal or getpass.getuser()[:USER_ID_LENGTH]
    with ctx.qm.unit_of_work() as uow:
        issued = accounts.create_token(uow.connection, ctx.args.role, principal, lifetime=ctx.args.expires)
    _audit(ctx, issued.token, "create")
    token = issued.token
    expires = f", expires {local_time(token.expires_at)}" if token.expires_at is not None else ""
    ctx.emit(
        {**token_json(token), "token": issued.secret},
        f"token #{token.token_id} ({token.role}, principal {token.principal}{expires}):\n{issued.secret}\n"
        "keep it now: it is stored only as a hash and cannot be shown again",
    )


def _state(token: Token, now: int) -> str:
    return "revoked" if token.revoked else "expired" if token.expired(now) else "live"


def list_tokens(ctx: Context) -> None:
    from broker.admin import accounts

    with ctx.qm.reading() as conn:
        found = accounts.list_tokens(conn, limit=None)
    now = now_ms()
    lines = [
        f"{'ID':>6}  {'PREFIX':<12}  {'ROLE':<8}  {'PRINCIPAL':<12}  {'STATE':<7}  {'EXPIRES':<29}  CREATED"
    ]
    lines += [
        f"{t.token_id:>6}  {t.prefix:<12}  {t.role:<8}  {t.principal:<12}  {_state(t, now):<7}  "
        f"{local_time(t.expires_at) or 'never':<29}  {local_time(t.created_at)}"
        for t in found
    ]
    ctx.emit([token_json(t) for t in found], "\n".join(lines))


def revoke_token(ctx: Context) -> None:
    from broker.admin import accounts

    with ctx.qm.unit_of_work() as uow:
        token = accounts.revoke_token(uow.connection, ctx.args.token_id, last_admin=ctx.args.force)
    if token is None:
        raise MQError(Reason.MQRC_UNKNOWN_OBJECT_NAME, f"no token #{ctx.args.token_id}")
    _audit(ctx, token, "revoke")
    ctx.emit(token_json(token), f"token #{token.token_id} revoked")
