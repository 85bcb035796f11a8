"""The audit log: every authenticated change, with who, what, when and the outcome."""

from __future__ import annotations

from queues.ids import now_ms
from tests.admin_api.conftest import Api, assert_problem


def entries(api: Api, **params: object) -> list[dict[str, object]]:
    response = api.get("/api/v1/audit", params=params)
    assert response.status_code == 200
    items: list[dict[str, object]] = response.json()["items"]
    return items


def test_changes_are_recorded_newest_first_with_outcome(api: Api) -> None:
    before = now_ms()
    api.post("/api/v1/queues", "operator", json={"name": "SCORES", "max_depth": 10})
    api.post("/api/v1/queues", "operator", json={"name": "SCORES"})  # 409
    api.delete("/api/v1/queues/SCORES", "viewer")  # 403
    api.get("/api/v1/queues", "operator")  # a read: not recorded
    newest, refused, created = entries(api)
    assert created == {
        "id": created["id"],
        "at": created["at"],
        "token_id": 2,
        "principal": "otto",
        "method": "POST",
        "path": "/api/v1/queues",
        "resource": "/api/v1/queues",
        "summary": {"queue": "SCORES", "replace": False, "attributes": {"max_depth": 10}},
        "status": 201,
    }
    assert before <= created["at"] <= now_ms()  # type: ignore[operator]
    assert (refused["status"], refused["principal"]) == (409, "otto")
    assert {k: newest[k] for k in ("method", "path", "resource", "summary", "status", "principal")} == {
        "method": "DELETE",
        "path": "/api/v1/queues/SCORES",
        "resource": "/api/v1/queues/{name}",
        "summary": {"name": "SCORES"},
        "status": 403,
        "principal": "vera",
    }


def test_requests_without_a_token_and_secrets_are_never_recorded(api: Api) -> None:
    """A bad token is recorded as a failed sign-in (``test_signins``), without its secret."""
    api.post("/api/v1/queues", None, json={"name": "Q"})
    api.post("/api/v1/queues", None, json={"name": "Q"}, headers={"Authorization": "Bearer nope"})
    (failed,) = entries(api)
    assert (failed["status"], failed["token_id"], failed["summary"]) == (
        401,
        None,
        {"sign_in": "unknown token", "door": "bearer", "address": "testclient"},
    )
    assert "nope" not in api.get("/api/v1/audit").text
    created = api.post("/api/v1/tokens", json={"role": "viewer", "principal": "bot"}).json()
    entry, _ = entries(api)
    assert entry["summary"] == {"token_id": created["id"], "role": "viewer", "principal": "bot"}
    assert created["token"] not in api.get("/api/v1/audit").text


def test_audit_pages_backwards_and_is_admin_only(api: Api) -> None:
    for name in ("A", "B", "C"):
        api.post("/api/v1/queues", json={"name": name})
    page = api.get("/api/v1/audit", params={"limit": 2}).json()
    older = entries(api, before=page["next_before"], limit=2)
    assert [e["summary"]["queue"] for e in page["items"] + older] == ["C", "B", "A"]  # type: ignore[index]
    assert_problem(api.get("/api/v1/audit", "operator"), 403)
