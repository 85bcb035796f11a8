"""The audit log: every authenticated change, with who, what, when and the outcome."""

from __future__ import annotations

import time

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


def test_entries_filter_by_principal_method_action_and_time(api: Api) -> None:
    api.post("/api/v1/queues", "operator", json={"name": "SCORES"})
    api.post("/api/v1/queues", json={"name": "TICKS"})
    cut = now_ms() + 1  # after every entry so far, which were written before their answers
    time.sleep(0.01)
    api.delete("/api/v1/queues/TICKS")
    api.post("/api/v1/tokens", json={"role": "viewer", "principal": "bot"})

    def paths(**params: object) -> list[tuple[str, str, str]]:
        return [(e["principal"], e["method"], e["path"]) for e in entries(api, **params)]  # type: ignore[misc]

    assert paths(principal="otto") == [("otto", "POST", "/api/v1/queues")]
    assert paths(principal="ada", method="POST") == [
        ("ada", "POST", "/api/v1/tokens"),
        ("ada", "POST", "/api/v1/queues"),
    ]
    assert paths(action="TICKS") == [("ada", "DELETE", "/api/v1/queues/TICKS")]
    assert paths(action="{name}") == paths(action="ticks")  # the route, in any case
    assert paths(action="%") == paths(action="_") == []  # LIKE's wildcards are plain text
    assert paths(since=cut) == [
        ("ada", "POST", "/api/v1/tokens"),
        ("ada", "DELETE", "/api/v1/queues/TICKS"),
    ]
    assert paths(until=cut) == [("ada", "POST", "/api/v1/queues"), ("otto", "POST", "/api/v1/queues")]
    assert paths(since=cut, action="queues", method="DELETE", principal="ada") == [
        ("ada", "DELETE", "/api/v1/queues/TICKS")
    ]
    page = api.get("/api/v1/audit", params={"principal": "ada", "limit": 1}).json()
    older = entries(api, principal="ada", limit=5, before=page["next_before"])
    assert [e["path"] for e in page["items"] + older] == [
        "/api/v1/tokens",
        "/api/v1/queues/TICKS",
        "/api/v1/queues",
    ]


def test_a_bad_filter_is_422(api: Api) -> None:
    for params in (
        {"method": "post"},
        {"action": ""},
        {"since": -1},
        {"principal": "x" * 65},
        {"action": "\x00"},
    ):
        assert_problem(api.get("/api/v1/audit", params=params), 422)
