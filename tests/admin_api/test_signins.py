"""Bad API tokens, at every door (a bearer token, the console's sign-in and its cookie): each
failure in the audit log, counted and throttled, the throttle in ``/metrics``. Every request of
FastAPI's TestClient comes from one address ("testclient")."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from admin_api.console.sessions import COOKIE
from broker.admin import accounts
from queues import QueueManager
from tests.admin_api.conftest import Api, assert_problem, issue, start_api

DELAY = 30  # seconds: the delays begun here outlast every test


@pytest.fixture
def throttled_api(qm: QueueManager) -> Iterator[Api]:
    with start_api(qm, auth_throttle_delay=DELAY) as started:
        yield started


def failures(api: Api) -> list[dict[str, object]]:
    """The audit log's failed sign-ins, newest first."""
    entries: list[dict[str, object]] = api.get("/api/v1/audit").json()["items"]
    return [entry for entry in entries if entry["status"] == 401]


def samples(api: Api) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = api.get("/metrics").text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("broker_api_")
    }


def test_bad_bearer_tokens_are_audited_then_refused_unchecked(throttled_api: Api) -> None:
    """Five failures are free, the sixth begins a delay; then a bad token, and a good one never
    used from this address, are refused with 429 and Retry-After. The admin token, used here
    before, is not: only the address is throttled, not the token."""
    api = throttled_api
    assert api.get("/api/v1/queues").status_code == 200  # the admin token, from this address
    revoked = issue(api.qm, "viewer", "grafana")
    with api.qm.unit_of_work() as uow:
        accounts.revoke_token(uow.connection, revoked.token.token_id)
    secrets = [revoked.secret, *(f"mqa_guess{n}" for n in range(5))]
    for secret in secrets:
        assert_problem(api.get("/api/v1/queues", None, headers={"Authorization": f"Bearer {secret}"}), 401)

    refused = api.get("/api/v1/queues", None, headers={"Authorization": "Bearer mqa_guess6"})
    assert assert_problem(refused, 429)["type"] == "/problems/throttled"
    assert refused.headers["retry-after"] == str(DELAY)
    assert api.get("/api/v1/queues", "viewer").status_code == 429
    assert api.get("/api/v1/queues", "admin").status_code == 200

    recorded = failures(api)
    assert len(recorded) == 6  # the refusals unchecked are not recorded
    newest, *_, oldest = recorded
    assert {k: oldest[k] for k in ("token_id", "principal", "method", "path", "resource", "summary")} == {
        "token_id": revoked.token.token_id,
        "principal": "grafana",
        "method": "GET",
        "path": "/api/v1/queues",
        "resource": "/api/v1/queues",
        "summary": {"sign_in": "revoked token", "door": "bearer", "address": "testclient"},
    }
    assert (newest["token_id"], newest["principal"]) == (None, "")
    assert newest["summary"] == {
        "sign_in": "unknown token",
        "door": "bearer",
        "address": "testclient",
        "throttled_for": {"address": float(DELAY)},
    }
    audit = api.get("/api/v1/audit").text
    assert not any(secret in audit for secret in secrets)

    metrics = samples(api)
    assert metrics[("broker_api_signin_failures_total", (("door", "bearer"),))] == 6
    assert metrics[("broker_api_signins_throttled_total", (("door", "bearer"),))] == 2
    assert metrics[("broker_api_throttled", (("key", "address"),))] == 1
    assert metrics[("broker_api_throttled", (("key", "user"),))] == 0


def test_failed_console_sign_ins_are_audited_then_refused_unchecked(throttled_api: Api) -> None:
    api = throttled_api
    assert failures(api) == []  # (the admin token, used from this address before the throttle)
    for n in range(6):
        failed = api.client.post("/console/signin", data={"token": f"mqa_guess{n}"}, follow_redirects=False)
        assert failed.status_code == 401
        assert "unknown or revoked" in failed.text
    for token in ("mqa_guess6", api.secrets["viewer"]):  # a good token never used from here, too
        refused = api.client.post("/console/signin", data={"token": token}, follow_redirects=False)
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == str(DELAY)
        assert "Too many failed sign-ins" in refused.text
        assert "set-cookie" not in refused.headers
    recorded = failures(api)
    assert len(recorded) == 6
    assert {(e["method"], e["path"], e["summary"]["door"]) for e in recorded} == {  # type: ignore[index]
        ("POST", "/console/signin", "console sign-in")
    }


def test_a_revoked_session_cookie_ends_the_session_and_is_no_failure(throttled_api: Api) -> None:
    """The console polls: a revoked token's session must not throttle the next sign-in."""
    api = throttled_api
    viewer = issue(api.qm, "viewer", "vic")
    signed_in = api.client.post("/console/signin", data={"token": viewer.secret}, follow_redirects=False)
    assert signed_in.status_code == 303
    with api.qm.unit_of_work() as uow:
        accounts.revoke_token(uow.connection, viewer.token.token_id)
    for _ in range(10):
        assert api.client.get("/console/", follow_redirects=False).headers["location"] == "/console/signin"
    again = api.client.post(
        "/console/signin", data={"token": api.secrets["operator"]}, follow_redirects=False
    )
    assert again.status_code == 303
    assert failures(api) == []
    api.client.cookies.set(COOKIE, "mqa_forged")  # a cookie the console never set is a failure
    assert api.client.get("/console/", follow_redirects=False).status_code == 303
    (forged,) = failures(api)
    assert forged["summary"]["door"] == "console session"  # type: ignore[index]


def test_the_document_lists_429_wherever_a_token_is_needed(api: Api) -> None:
    paths = api.app.openapi()["paths"]
    assert "429" in paths["/api/v1/queues"]["get"]["responses"]
    assert "429" not in paths["/health"]["get"]["responses"]
