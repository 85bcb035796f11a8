"""The tokens page (admin only, both dialects): the list, a new token whose secret the page that
follows its creation shows once, and revocation after a confirmation page."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import update

from broker.admin import accounts
from broker.admin.schema import api_tokens
from queues.ids import now_ms
from tests.admin_api.console.conftest import Console


def test_only_admins_see_or_change_tokens(console: Console) -> None:
    for role in ("viewer", "operator"):
        console.sign_in(role)
        menu = console.get("/console/network")
        assert menu.status_code == 200 and 'href="/console/tokens"' not in menu.text
        for path in ("/console/tokens", "/console/tokens/1/revoke"):
            refused = console.get(path)
            assert refused.status_code == 403 and "needs the admin role" in refused.text
        for path in ("/console/tokens", "/console/tokens/1/revoke"):
            assert console.post(path, role="admin", principal="mallory").status_code == 403
    with console.api.qm.reading() as conn:
        assert [t.principal for t in accounts.list_tokens(conn)] == ["vera", "otto", "ada"]
        assert all(t.revoked_at is None for t in accounts.list_tokens(conn))


def test_an_admin_creates_a_token_and_sees_its_secret_once(console: Console) -> None:
    console.sign_in("admin")
    listed = console.get("/console/tokens").text
    assert 'href="/console/tokens"' in listed and 'href="/console/audit"' in listed  # in the menu
    assert '<tr data-token="3"><td>3</td>' in listed and "this session" in listed
    created = console.post("/console/tokens", role="operator", principal="deploy")
    assert created.status_code == 201
    secret = re.search(r'<pre id="secret">([^<]+)</pre>', created.text)
    assert secret is not None
    with console.api.qm.reading() as conn:
        token = accounts.authenticate(conn, secret.group(1))
    assert token is not None and (token.token_id, str(token.role), token.principal) == (
        4,
        "operator",
        "deploy",
    )
    assert created.headers["cache-control"] == "no-store"
    assert "Token 4 created" in created.text and "shown on this page only" in created.text
    later = console.get("/console/tokens").text
    assert '<tr data-token="4"><td>4</td>' in later and "<td>deploy</td>" in later
    assert secret.group(1) not in later
    assert secret.group(1)[: accounts.PREFIX_LENGTH] in later  # the prefix tells tokens apart
    with console.api.qm.reading() as conn:
        entry = accounts.list_audit(conn, limit=1)[0]
    assert (entry.path, entry.summary) == (
        "/console/tokens",
        {"token_id": 4, "role": "operator", "principal": "deploy"},
    )
    assert secret.group(1) not in str(entry)


def test_a_token_made_to_expire_says_when_and_is_refused_after(console: Console) -> None:
    console.sign_in("admin")
    created = console.post("/console/tokens", role="viewer", principal="temp", expires_days="7")
    assert created.status_code == 201 and ", expires " in created.text
    secret = re.search(r'<pre id="secret">([^<]+)</pre>', created.text)
    assert secret is not None
    with console.api.qm.unit_of_work() as uow:
        token = accounts.authenticate(uow.connection, secret.group(1))
        assert token is not None and token.expires_at is not None
        assert token.expires_at - token.created_at == 7 * 86_400_000
        uow.connection.execute(
            update(api_tokens).values(expires_at=now_ms() - 1).where(api_tokens.c.id == token.token_id)
        )
    listed = console.get("/console/tokens").text
    assert re.search(rf'<tr data-token="{token.token_id}">.*<td class="expires">expired ', listed)
    bearer = {"Authorization": f"Bearer {secret.group(1)}"}
    assert console.api.client.get("/api/v1/queues", headers=bearer).status_code == 401
    assert console.api.client.post("/console/signin", data={"token": secret.group(1)}).status_code == 401


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        (
            {"role": "root", "principal": "deploy"},
            "role: Input should be &#39;viewer&#39;, &#39;operator&#39;",
        ),
        ({"role": "viewer", "principal": "thirteen_char"}, "principal: String should match pattern"),
        ({"role": "viewer", "principal": ""}, "principal: String should match pattern"),
    ],
)
def test_a_bad_token_is_a_notice_and_nothing_is_created(
    console: Console, fields: dict[str, str], why: str
) -> None:
    console.sign_in("admin")
    refused = console.post("/console/tokens", **fields)
    assert (
        str(refused.url).endswith("/console/tokens") and "Refused: " in refused.text and why in refused.text
    )
    assert 'id="secret"' not in refused.text
    with console.api.qm.reading() as conn:
        assert len(accounts.list_tokens(conn)) == 3


def test_revoking_asks_first_and_then_the_token_stops_working(console: Console) -> None:
    console.sign_in("admin")
    confirm = console.get("/console/tokens/2/revoke").text
    assert "<h1>Revoke token 2?</h1>" in confirm and "principal otto" in confirm
    with console.api.qm.reading() as conn:
        assert accounts.get_token(conn, 2).revoked_at is None  # type: ignore[union-attr]  # asking changes nothing
    revoked = console.post("/console/tokens/2/revoke")
    assert str(revoked.url).endswith("/console/tokens") and "Token 2 revoked" in revoked.text
    with console.api.qm.reading() as conn:
        assert accounts.get_token(conn, 2).revoked_at is not None  # type: ignore[union-attr]
    assert console.api.get("/api/v1/queues", "operator").status_code == 401
    assert 'href="/console/tokens/2/revoke"' not in revoked.text  # a revoked token has no button


def test_the_own_token_and_unknown_tokens_are_refused(console: Console) -> None:
    console.sign_in("admin")
    own = console.post("/console/tokens/3/revoke")
    assert "Refused: MQRC_OBJECT_IN_USE (2042): token 3 is the one making this request" in own.text
    missing = console.get("/console/tokens/99/revoke")
    assert str(missing.url).endswith("/console/tokens")
    assert "Refused: Not Found: token 99 does not exist" in missing.text
    assert "Refused: Not Found: token 99 does not exist" in console.post("/console/tokens/99/revoke").text
    assert console.get("/console/tokens/abc/revoke").status_code == 400
    assert console.get("/console/tokens?after=-1").status_code == 400


def test_the_list_pages_by_id(console: Console) -> None:
    console.sign_in("admin")
    with console.api.qm.unit_of_work() as uow:
        for n in range(60):
            accounts.create_token(uow.connection, "viewer", f"bot{n}")
    first = console.get("/console/tokens").text
    assert first.count("<tr data-token=") == 50 and 'href="/console/tokens?after=50"' in first
    second = console.get("/console/tokens", params={"after": 50}).text
    assert second.count("<tr data-token=") == 13 and "?after=" not in second
    assert '<tr data-token="63">' in second and 'href="/console/tokens">First page' in second
