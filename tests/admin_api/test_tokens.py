"""Tokens over HTTP: created with their secret shown once, listed without it, revoked at once."""

from __future__ import annotations

from broker.admin import accounts
from tests.admin_api.conftest import Api, assert_problem

TOKENS = "/api/v1/tokens"


def test_create_shows_the_secret_once_and_it_works(api: Api) -> None:
    response = api.post(TOKENS, json={"role": "viewer", "principal": "grafana"})
    assert response.status_code == 201
    created = response.json()
    assert response.headers["location"] == f"{TOKENS}/{created['id']}"
    assert (created["role"], created["principal"], created["revoked_at"]) == ("viewer", "grafana", None)
    assert created["token"].startswith(created["prefix"])
    secret = {"Authorization": f"Bearer {created['token']}"}
    assert api.get("/api/v1/queues", None, headers=secret).status_code == 200
    assert_problem(api.post("/api/v1/queues", None, headers=secret, json={"name": "Q"}), 403)

    listed = api.get(TOKENS).json()
    assert [t["principal"] for t in listed["items"]] == ["vera", "otto", "ada", "grafana"]
    assert "token" not in listed["items"][-1]
    assert created["token"] not in api.get(TOKENS).text
    with api.qm.reading() as conn:
        stored = accounts.get_token(conn, created["id"])
    assert stored is not None and stored.prefix == created["prefix"]


def test_revoke_refuses_the_token_from_the_next_request(api: Api) -> None:
    created = api.post(TOKENS, json={"role": "operator", "principal": "ci"}).json()
    secret = {"Authorization": f"Bearer {created['token']}"}
    assert api.get("/api/v1/status", None, headers=secret).status_code == 200
    assert api.delete(f"{TOKENS}/{created['id']}").status_code == 204
    assert_problem(api.get("/api/v1/status", None, headers=secret), 401)
    assert api.delete(f"{TOKENS}/{created['id']}").status_code == 204  # revoking again changes nothing
    (revoked,) = [t for t in api.get(TOKENS).json()["items"] if t["id"] == created["id"]]
    assert revoked["revoked_at"] is not None
    assert_problem(api.delete(f"{TOKENS}/9999"), 404)


def test_tokens_page_by_keyset_and_bad_bodies_are_422(api: Api) -> None:
    first = api.get(TOKENS, params={"limit": 2}).json()
    rest = api.get(TOKENS, params={"limit": 2, "after": first["next_after"]}).json()
    assert ([t["principal"] for t in first["items"] + rest["items"]], rest["next_after"]) == (
        ["vera", "otto", "ada"],
        None,
    )
    for body in (
        {"role": "root", "principal": "x"},
        {"role": "viewer", "principal": "thirteen-char"},
        {"role": "viewer", "principal": "a b"},
        {"role": "viewer"},
    ):
        assert_problem(api.post(TOKENS, json=body), 422)
