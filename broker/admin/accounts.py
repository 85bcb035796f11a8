"""Who may use the admin API, and what they did with it: tokens and the audit log in SQL.

Tokens are random secrets shown once, when they are created; the database keeps
only their SHA-256, so a stolen backup or a read-only SQL login grants nothing.
A secret carries 256 bits of entropy, so a plain (unsalted, fast) hash is enough:
nothing about it can be guessed, only looked up. Listings show a short public
prefix instead. A token is never deleted, only revoked, so that audit entries
keep pointing at the token that made them.

Like ``broker.store``, this module is the only place with SQL on its tables; the
admin API and the ``broker token`` CLI call it with a connection of their own.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy import ColumnElement, Connection, CursorResult, func, insert, or_, select, update

from broker.admin.schema import api_audit, api_tokens
from broker.core.authority import check_principal
from queues.errors import MQError
from queues.ids import now_ms
from queues.reasons import Reason
from queues.sql import like_literal

SECRET_PREFIX = "mqa_"
PREFIX_LENGTH = 12
MAX_SUMMARY_CHARS = 8192


class Role(StrEnum):
    """What a token may do; each role may do everything the roles before it may."""

    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return _RANKS[self]

    def allows(self, needed: Role) -> bool:
        return self.rank >= needed.rank


_RANKS = {role: rank for rank, role in enumerate(Role)}


class AccountError(MQError):
    """4005 MQRCCF_ATTR_VALUE_ERROR: a role or principal a token cannot have."""

    def __init__(self, message: str) -> None:
        super().__init__(Reason.MQRCCF_ATTR_VALUE_ERROR, message)


@dataclass(frozen=True, slots=True)
class Token:
    token_id: int
    prefix: str
    role: Role
    principal: str
    created_at: int
    revoked_at: int | None
    expires_at: int | None = None  # epoch ms (None: never)

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    def expired(self, now: int) -> bool:
        return self.expires_at is not None and self.expires_at <= now

    def live(self, now: int) -> bool:
        """Neither revoked nor expired: the API accepts it."""
        return not self.revoked and not self.expired(now)


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """A new token and its secret: the only time the secret exists outside its holder."""

    token: Token
    secret: str


@dataclass(frozen=True, slots=True)
class AuditEntry:
    entry_id: int
    at: int
    token_id: int | None
    principal: str
    method: str
    path: str
    resource: str
    summary: dict[str, Any]
    status: int


def check_role(role: str) -> Role:
    try:
        return Role(role)
    except ValueError:
        raise AccountError(f"role {role!r} is not one of {', '.join(Role)}") from None


def secret_hash(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


def _token(row: Any) -> Token:
    role = Role(row.role)
    return Token(row.id, row.prefix, role, row.principal, row.created_at, row.revoked_at, row.expires_at)


MAX_LIFETIME = 10 * 365 * 24 * 3600  # seconds: a token that must last longer needs no expiry


def create_token(conn: Connection, role: str, principal: str, *, lifetime: int | None = None) -> IssuedToken:
    """A new token with ``role``, sending commands as ``principal``, expiring ``lifetime`` seconds
    from now (None: never)."""
    checked_role, checked_principal = check_role(role), check_principal(principal)
    if lifetime is not None and not 0 < lifetime <= MAX_LIFETIME:
        raise AccountError(f"a token's lifetime must be 1 to {MAX_LIFETIME} seconds, not {lifetime}")
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    created_at = now_ms()
    expires_at = None if lifetime is None else created_at + lifetime * 1000
    result = conn.execute(
        insert(api_tokens).values(
            prefix=secret[:PREFIX_LENGTH],
            secret_hash=secret_hash(secret),
            role=str(checked_role),
            principal=checked_principal,
            created_at=created_at,
            expires_at=expires_at,
        )
    )
    token_id = _new_id(result)
    prefix = secret[:PREFIX_LENGTH]
    token = Token(token_id, prefix, checked_role, checked_principal, created_at, None, expires_at)
    return IssuedToken(token, secret)


def authenticate(conn: Connection, secret: str) -> Token | None:
    """The live token with this secret, or None (unknown, revoked or expired)."""
    row = conn.execute(
        select(api_tokens).where(
            api_tokens.c.secret_hash == secret_hash(secret), api_tokens.c.revoked_at.is_(None), _unexpired()
        )
    ).first()
    return None if row is None else _token(row)


def _unexpired() -> ColumnElement[bool]:
    return or_(api_tokens.c.expires_at.is_(None), api_tokens.c.expires_at > now_ms())


def find_token(conn: Connection, secret: str) -> Token | None:
    """The token with this secret, live or revoked; None if no token ever had it."""
    row = conn.execute(select(api_tokens).where(api_tokens.c.secret_hash == secret_hash(secret))).first()
    return None if row is None else _token(row)


def get_token(conn: Connection, token_id: int) -> Token | None:
    row = conn.execute(select(api_tokens).where(api_tokens.c.id == token_id)).first()
    return None if row is None else _token(row)


def list_tokens(conn: Connection, *, after_id: int = 0, limit: int | None = 100) -> list[Token]:
    """Oldest first, after ``after_id``; ``limit`` None lists them all."""
    stmt = select(api_tokens).where(api_tokens.c.id > after_id).order_by(api_tokens.c.id).limit(limit)
    return [_token(row) for row in conn.execute(stmt)]


def revoke_token(conn: Connection, token_id: int, *, last_admin: bool = False) -> Token | None:
    """Revoke the token (revoking twice keeps the first time); None if there is no such token.

    The last live admin token is kept unless ``last_admin``: without one, nobody could
    manage tokens, rules or the audit log through the API again (only the CLI, on the
    database itself, could make another)."""
    token = get_token(conn, token_id)
    if token is not None and not last_admin and _last_live_admin(conn, token):
        raise MQError(
            Reason.MQRC_OBJECT_IN_USE,
            f"token {token_id} is the last live admin token: create another admin token first "
            "(revoking it would leave the API without an administrator)",
        )
    conn.execute(
        update(api_tokens)
        .where(api_tokens.c.id == token_id, api_tokens.c.revoked_at.is_(None))
        .values(revoked_at=now_ms())
    )
    return get_token(conn, token_id)


def _last_live_admin(conn: Connection, token: Token) -> bool:
    if not token.live(now_ms()) or token.role != Role.ADMIN:
        return False
    others = select(func.count()).where(
        api_tokens.c.role == str(Role.ADMIN),
        api_tokens.c.revoked_at.is_(None),
        _unexpired(),
        api_tokens.c.id != token.token_id,
    )
    return conn.execute(others).scalar_one() == 0


def record(
    conn: Connection,
    *,
    token_id: int | None,
    principal: str,
    method: str,
    path: str,
    resource: str,
    summary: dict[str, Any],
    status: int,
) -> int:
    """Append one audit entry; a summary too large to keep is replaced by a note saying so."""
    text = json.dumps(summary, ensure_ascii=False, default=str, sort_keys=True)
    if len(text) > MAX_SUMMARY_CHARS:
        text = json.dumps({"truncated": True, "chars": len(text)})
    result = conn.execute(
        insert(api_audit).values(
            at=now_ms(),
            token_id=token_id,
            principal=principal[:64],
            method=method[:8],
            path=path,
            resource=resource[:128],
            summary=text,
            status=status,
        )
    )
    return _new_id(result)


def _new_id(result: CursorResult[Any]) -> int:
    """The id the database gave the row ``result`` inserted."""
    key = result.inserted_primary_key
    assert key is not None  # an INSERT of one row
    return int(key[0])


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """Which audit entries to list; each field given narrows them."""

    principal: str | None = None
    method: str | None = None  # POST, PUT, PATCH, DELETE, CLI...
    action: str | None = None  # text the request's path or its route contains, in any case
    since: int | None = None  # epoch ms, inclusive
    until: int | None = None  # epoch ms, exclusive


def list_audit(
    conn: Connection, *, before_id: int | None = None, limit: int = 100, where: AuditFilter | None = None
) -> list[AuditEntry]:
    """Newest first; pass the last entry's id as ``before_id`` for the next page."""
    stmt = select(api_audit).order_by(api_audit.c.id.desc()).limit(limit)
    if before_id is not None:
        stmt = stmt.where(api_audit.c.id < before_id)
    if where is not None:
        stmt = stmt.where(*_audit_conditions(where))
    return [
        AuditEntry(
            row.id,
            row.at,
            row.token_id,
            row.principal,
            row.method,
            row.path,
            row.resource,
            json.loads(row.summary),
            row.status,
        )
        for row in conn.execute(stmt)
    ]


def _audit_conditions(where: AuditFilter) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = []
    if where.principal is not None:
        conditions.append(api_audit.c.principal == where.principal)
    if where.method is not None:
        conditions.append(api_audit.c.method == where.method)
    if where.action is not None:
        pattern = f"%{like_literal(where.action)}%"
        conditions.append(
            or_(
                api_audit.c.path.ilike(pattern, escape="\\"), api_audit.c.resource.ilike(pattern, escape="\\")
            )
        )
    if where.since is not None:
        conditions.append(api_audit.c.at >= where.since)
    if where.until is not None:
        conditions.append(api_audit.c.at < where.until)
    return conditions
