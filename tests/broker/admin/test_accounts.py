"""API tokens and the audit log in SQL, on both dialects."""

from __future__ import annotations

import hashlib
import json

import pytest
from sqlalchemy import select, update

from broker.admin import accounts
from broker.admin.accounts import AccountError, Role
from broker.admin.schema import api_tokens
from queues import MQError, QueueManager
from queues.ids import now_ms
from queues.reasons import Reason


def create(qm: QueueManager, role: str = "viewer", principal: str = "alice") -> accounts.IssuedToken:
    with qm.unit_of_work() as uow:
        return accounts.create_token(uow.connection, role, principal)


def test_roles_are_cumulative() -> None:
    assert [Role.ADMIN.allows(r) for r in Role] == [True, True, True]
    assert [Role.OPERATOR.allows(r) for r in Role] == [True, True, False]
    assert [Role.VIEWER.allows(r) for r in Role] == [True, False, False]


def test_only_a_hash_of_the_secret_is_stored(qm: QueueManager) -> None:
    issued = create(qm, "operator", "deploy")
    token = issued.token
    assert issued.secret.startswith("mqa_") and len(issued.secret) == 47
    assert (token.role, token.principal, token.prefix, token.revoked) == (
        Role.OPERATOR,
        "deploy",
        issued.secret[:12],
        False,
    )
    assert now_ms() - 60_000 < token.created_at <= now_ms()
    with qm.reading() as conn:
        (row,) = conn.execute(select(api_tokens)).all()
    assert row.secret_hash == hashlib.sha256(issued.secret.encode()).digest()
    assert issued.secret not in json.dumps([str(value) for value in row])


def test_authenticate_finds_live_tokens_only(qm: QueueManager) -> None:
    issued = create(qm)
    other = create(qm, "admin", "bob")
    with qm.unit_of_work() as uow:
        assert accounts.authenticate(uow.connection, issued.secret) == issued.token
        assert accounts.authenticate(uow.connection, issued.secret + "x") is None
        assert accounts.authenticate(uow.connection, "") is None
        revoked = accounts.revoke_token(uow.connection, issued.token.token_id)
        assert revoked is not None and revoked.revoked
        assert accounts.authenticate(uow.connection, issued.secret) is None
        assert accounts.authenticate(uow.connection, other.secret) == other.token


def test_an_expired_token_is_refused_and_is_not_a_live_admin(qm: QueueManager) -> None:
    lasting = create(qm, "admin", "ada")
    with qm.unit_of_work() as uow:
        brief = accounts.create_token(uow.connection, "admin", "bob", lifetime=60)
        assert brief.token.expires_at == brief.token.created_at + 60_000
        assert accounts.authenticate(uow.connection, brief.secret) == brief.token
        uow.connection.execute(update(api_tokens).values(expires_at=now_ms() - 1))  # both past
        assert accounts.authenticate(uow.connection, brief.secret) is None
        assert accounts.authenticate(uow.connection, lasting.secret) is None
        uow.connection.execute(
            update(api_tokens).values(expires_at=None).where(api_tokens.c.id == lasting.token.token_id)
        )
        with pytest.raises(MQError, match="last live admin token"):  # the expired one does not count
            accounts.revoke_token(uow.connection, lasting.token.token_id)
        for lifetime in (0, accounts.MAX_LIFETIME + 1):
            with pytest.raises(accounts.AccountError):
                accounts.create_token(uow.connection, "viewer", "x", lifetime=lifetime)


def test_revoking_twice_keeps_the_first_time_and_unknown_ids_are_none(qm: QueueManager) -> None:
    issued = create(qm)
    with qm.unit_of_work() as uow:
        first = accounts.revoke_token(uow.connection, issued.token.token_id)
        again = accounts.revoke_token(uow.connection, issued.token.token_id)
        assert accounts.revoke_token(uow.connection, 999) is None
    assert first is not None and again is not None and first.revoked_at == again.revoked_at


@pytest.mark.parametrize("principal", ["", "a b", "thirteen-char", "é", "tab\t"])
def test_principals_must_fit_the_mqmd_user_identifier(qm: QueueManager, principal: str) -> None:
    with pytest.raises(MQError) as caught:
        create(qm, "viewer", principal)
    assert caught.value.reason == Reason.MQRCCF_ATTR_VALUE_ERROR
    assert accounts.check_principal("twelve_chars") == "twelve_chars"


def test_unknown_roles_are_refused() -> None:
    with pytest.raises(AccountError, match="role 'root' is not one of viewer, operator, admin"):
        accounts.check_role("root")


def test_tokens_list_oldest_first_in_pages(qm: QueueManager) -> None:
    ids = [create(qm, principal=f"user{i}").token.token_id for i in range(3)]
    with qm.reading() as conn:
        first = accounts.list_tokens(conn, limit=2)
        rest = accounts.list_tokens(conn, after_id=first[-1].token_id, limit=2)
        everything = accounts.list_tokens(conn, limit=None)
    assert [t.token_id for t in first + rest] == ids == [t.token_id for t in everything]


def test_audit_entries_list_newest_first_with_their_summary(qm: QueueManager) -> None:
    with qm.unit_of_work() as uow:
        for path in ("/a", "/b", "/c"):
            accounts.record(
                uow.connection,
                token_id=7,
                principal="ada",
                method="POST",
                path=path,
                resource="/x",
                summary={"path": path, "n": [1, 2]},
                status=201,
            )
        accounts.record(
            uow.connection,
            token_id=None,
            principal="cli:root",
            method="CLI",
            path="broker token create",
            resource="broker token",
            summary={"big": "x" * accounts.MAX_SUMMARY_CHARS},
            status=0,
        )
    with qm.reading() as conn:
        newest, c, b = accounts.list_audit(conn, limit=3)
        (a,) = accounts.list_audit(conn, before_id=b.entry_id)
    assert (newest.token_id, newest.method, newest.summary["truncated"]) == (None, "CLI", True)
    assert [e.path for e in (c, b, a)] == ["/c", "/b", "/a"]
    assert (a.summary, a.status, a.principal, a.token_id) == ({"path": "/a", "n": [1, 2]}, 201, "ada", 7)
