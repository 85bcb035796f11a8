"""``broker token``: the first admin token of a new installation, listing and revoking, on both dialects."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from broker.admin import accounts
from broker.cli import main
from queues import QueueManager, make_engine


def run(url: str, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main(["--db", url, "--log-format", "text", *argv])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def url(database_url: str, capsys: pytest.CaptureFixture[str]) -> str:
    """A new installation's database, as ``broker db upgrade`` (or ``broker serve``) leaves it."""
    assert run(database_url, capsys, "db", "upgrade")[0] == 0
    return database_url


def test_create_works_on_a_new_installation_and_prints_the_secret_once(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(url, capsys, "token", "create", "--role", "admin", "--principal", "ops", "--json")
    assert code == 0
    created = json.loads(out)
    assert (created["id"], created["role"], created["principal"], created["revoked_at"]) == (
        1,
        "admin",
        "ops",
        None,
    )
    engine = make_engine(url)
    try:
        with QueueManager(engine) as qm, qm.reading() as conn:
            assert accounts.authenticate(conn, created["token"]) is not None
            (entry,) = accounts.list_audit(conn)
        assert (entry.method, entry.path, entry.summary) == (
            "CLI",
            "broker token create",
            {"token_id": 1, "role": "admin", "principal": "ops"},
        )
    finally:
        engine.dispose()

    code, out, _ = run(url, capsys, "token", "list")
    assert code == 0
    assert created["token"] not in out
    row = out.splitlines()[1].split()
    assert row[:6] == ["1", created["prefix"], "admin", "ops", "live", "never"]
    assert datetime.fromisoformat(row[6]).timestamp() * 1000 == pytest.approx(created["created_at"], abs=1)


def test_a_token_may_expire(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        url, capsys, "token", "create", "--role", "viewer", "--principal", "ci", "--expires", "30d", "--json"
    )
    created = json.loads(out)
    assert code == 0 and created["expires_at"] - created["created_at"] == 30 * 86_400_000
    assert (
        run(url, capsys, "token", "create", "--role", "viewer", "--principal", "ci", "--expires", "0")[0] == 2
    )
    assert (
        run(url, capsys, "token", "create", "--role", "viewer", "--principal", "ci", "--expires", "soon")[0]
        == 2
    )


def test_text_output_warns_that_the_secret_is_not_kept(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(url, capsys, "token", "create", "--role", "viewer", "--principal", "grafana")
    lines = out.splitlines()
    assert code == 0
    assert lines[0] == "token #1 (viewer, principal grafana):"
    assert lines[1].startswith("mqa_")
    assert "cannot be shown again" in lines[2]


def test_revoke_and_errors(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    run(url, capsys, "token", "create", "--role", "operator", "--principal", "ci")
    code, out, _ = run(url, capsys, "token", "revoke", "1")
    assert (code, out.strip()) == (0, "token #1 revoked")
    assert run(url, capsys, "token", "list", "--json")[1].count('"revoked_at": null') == 0
    code, _, err = run(url, capsys, "token", "revoke", "2")
    assert (code, err.strip()) == (1, "MQRC_UNKNOWN_OBJECT_NAME (2085): no token #2")
    code, _, err = run(url, capsys, "token", "revoke", "2", "--json")
    assert (code, json.loads(err)["reason"]) == (1, 2085)
    code, _, err = run(url, capsys, "token", "create", "--role", "operator", "--principal", "a b")
    assert code == 1 and err.startswith("MQRCCF_ATTR_VALUE_ERROR (4005): principal 'a b'")
    assert run(url, capsys, "token", "create", "--role", "root")[0] == 2
