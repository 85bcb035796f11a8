"""``GET/POST /api/v1/config`` on both dialects: admins only, the export as a TOML download, an
import (a dry run first) with its report, every problem of a bad file in a 409 problem, and both
in the audit log."""

from __future__ import annotations

import httpx
import pytest

from broker.admin import accounts
from tests.admin_api.conftest import Api, assert_problem

TOML = {"Content-Type": "application/toml"}


def export(api: Api, **params: str) -> str:
    response = api.get("/api/v1/config", params=params)
    assert response.status_code == 200, response.text
    return response.text


def send(api: Api, text: str | bytes, role: str = "admin", **params: str) -> httpx.Response:
    content = text.encode() if isinstance(text, str) else text
    return api.post("/api/v1/config", role, content=content, headers=TOML, params=params)


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_only_admins_export_or_import(api: Api, role: str) -> None:
    assert_problem(api.get("/api/v1/config", role), 403)
    assert_problem(send(api, "", role), 403)
    assert_problem(api.get("/api/v1/config", None), 401)


def test_the_export_is_a_toml_download_with_secrets_only_when_asked(api: Api) -> None:
    api.qm.define_queue("APP.IN", max_depth=100)
    response = api.get("/api/v1/config")
    assert response.headers["content-type"].startswith("application/toml")
    assert response.headers["content-disposition"] == 'attachment; filename="QM1-config.toml"'
    assert '[[queue]]\nname = "APP.IN"\ndescription = ""\nmax_depth = 100\n' in response.text
    assert "secrets = false" in response.text and "retained = false" in response.text
    assert "secrets = true" in export(api, secrets="true")
    assert "retained = true" in export(api, retained="true")


def test_an_import_reports_its_changes_after_a_dry_run_that_makes_none(api: Api) -> None:
    text = export(api) + '\n[[queue]]\nname = "APP.NEW"\nmax_depth = 10\n'
    dry = send(api, text, dry_run="true")
    assert dry.status_code == 200, dry.text
    assert dry.json() == {
        "dry_run": True,
        "changes": [{"action": "create", "kind": "queue", "name": "APP.NEW", "line": "create queue APP.NEW"}],
        "left": [],
        "lines": ["create queue APP.NEW"],
    }
    assert api.qm.list_queues("APP.*") == []
    assert send(api, text).json()["lines"] == ["create queue APP.NEW"]
    assert api.qm.inquire_queue("APP.NEW").max_depth == 10
    assert send(api, text).json()["lines"] == ["no changes"]
    empty = send(api, b"").json()  # a file that names nothing leaves everything as it is
    assert empty["lines"] == ["leave queue APP.NEW: not in the file", "no changes"]
    assert empty["left"][0]["action"] == "leave"


def test_a_bad_file_is_refused_listing_every_problem_and_nothing_changes(api: Api) -> None:
    """The body matched its schema (a string): what it says is refused as the queue manager refuses a
    bad attribute (409, 4005), with every problem of the file in ``errors``."""
    text = '[[queue]]\nname = "A B"\nmax_depth = -1\n\n[[acl_rule]]\nprincipal = "bob"\n'
    body = assert_problem(send(api, text), 409, "MQRCCF_ATTR_VALUE_ERROR")
    assert [(e["loc"], e["msg"].split(": ")[0]) for e in body["errors"]] == [
        (["queue", "1", "name"], "line 2"),
        (["queue", "1", "max_depth"], "line 3"),
        (["acl_rule", "1", "permission"], "line 5"),
        (["acl_rule", "1", "topic"], "line 5"),
        (["acl_rule", "1", "allow"], "line 5"),
    ]
    assert body["detail"].startswith("5 problems: line 2: queue 1 (A B): name:")
    assert api.qm.list_queues("A*") == []
    assert assert_problem(send(api, "[[queue]\n"), 409)["errors"][0]["loc"] == ["file"]
    assert assert_problem(send(api, b"\xff\xfe"), 409)["detail"] == "1 problem: the file is not UTF-8 text"
    json_body = {"Content-Type": "application/json"}
    assert_problem(api.post("/api/v1/config", content=b"{", headers=json_body), 422)  # not its schema


def test_the_file_may_come_as_plain_text(api: Api) -> None:
    text = {"Content-Type": "text/plain; charset=utf-8"}
    sent = api.post("/api/v1/config", content=b"[[queue]]\nname = 'APP.TEXT'\n", headers=text)
    assert sent.json()["lines"] == ["create queue APP.TEXT"]
    content = api.app.openapi()["paths"]["/api/v1/config"]["post"]["requestBody"]["content"]
    assert set(content) == {"application/toml", "text/plain"}


def test_exports_and_imports_are_in_the_audit_log(api: Api) -> None:
    export(api, secrets="true")
    send(api, '[[queue]]\nname = "APP.AUDITED"\n')
    send(api, "[[queue]]\nname = 1\n")
    with api.qm.reading() as conn:
        found = [(e.method, e.principal, e.status, e.summary) for e in accounts.list_audit(conn)]
    assert found == [
        (
            "POST",
            "ada",
            409,
            {"dry_run": False, "prune": False, "problems": ["line 2: queue 1: name: must be a string"]},
        ),
        ("POST", "ada", 200, {"dry_run": False, "prune": False, "changes": ["create queue APP.AUDITED"]}),
        ("GET", "ada", 200, {"retained": False, "secrets": True}),
    ]
