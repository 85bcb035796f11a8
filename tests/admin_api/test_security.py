"""The authorisation matrix: every route against every role, no token, a bad token and a revoked one.

Each route is called with a request whose answer does not depend on what the
others did (a missing resource, an invalid body, a read), so the expected status
of an allowed caller is fixed: a role too weak gets 403 before the body or the
resource is even looked at, and a caller without a valid token gets 401.
"""

from __future__ import annotations

from typing import Any

from broker.admin import accounts
from queues import QueueManager
from tests.admin_api.conftest import Api, issue, start_api

NONE = ""
ROLES = ("viewer", "operator", "admin")
RANK = {NONE: -1, "viewer": 0, "operator": 1, "admin": 2}
DLQ_MSG = "00" * 24

# (method, path template, concrete path, request kwargs, least role, status for an allowed caller)
MATRIX: list[tuple[str, str, str, dict[str, Any], str, int]] = [
    ("GET", "/health", "/health", {}, NONE, 200),
    ("GET", "/ready", "/ready", {}, NONE, 200),
    ("GET", "/metrics", "/metrics", {}, "viewer", 200),
    ("GET", "/api/v1/queues", "/api/v1/queues", {}, "viewer", 200),
    ("POST", "/api/v1/queues", "/api/v1/queues", {"json": {}}, "operator", 422),
    ("GET", "/api/v1/queues/{name}", "/api/v1/queues/NOPE", {}, "viewer", 404),
    ("PATCH", "/api/v1/queues/{name}", "/api/v1/queues/NOPE", {"json": {"max_depth": 1}}, "operator", 404),
    ("DELETE", "/api/v1/queues/{name}", "/api/v1/queues/NOPE", {}, "operator", 404),
    ("POST", "/api/v1/queues/{name}/purge", "/api/v1/queues/NOPE/purge", {}, "operator", 404),
    ("GET", "/api/v1/queues/{name}/messages", "/api/v1/queues/NOPE/messages", {}, "viewer", 404),
    (
        "POST",
        "/api/v1/queues/{name}/messages",
        "/api/v1/queues/NOPE/messages",
        {"json": {"body_text": "x"}},
        "operator",
        404,
    ),
    ("GET", "/api/v1/dead-letters", "/api/v1/dead-letters", {}, "viewer", 200),
    (
        "POST",
        "/api/v1/dead-letters/{msg_id}/retry",
        f"/api/v1/dead-letters/{DLQ_MSG}/retry",
        {},
        "operator",
        404,
    ),
    ("DELETE", "/api/v1/dead-letters/{msg_id}", f"/api/v1/dead-letters/{DLQ_MSG}", {}, "operator", 404),
    ("GET", "/api/v1/subscriptions", "/api/v1/subscriptions", {}, "viewer", 200),
    ("POST", "/api/v1/subscriptions", "/api/v1/subscriptions", {"json": {}}, "operator", 422),
    ("GET", "/api/v1/subscriptions/{subscription_id}", "/api/v1/subscriptions/1", {}, "viewer", 404),
    ("DELETE", "/api/v1/subscriptions/{subscription_id}", "/api/v1/subscriptions/1", {}, "operator", 404),
    ("GET", "/api/v1/retained", "/api/v1/retained", {}, "viewer", 200),
    ("GET", "/api/v1/mqtt/sessions", "/api/v1/mqtt/sessions", {}, "viewer", 200),
    ("GET", "/api/v1/mqtt/nodes", "/api/v1/mqtt/nodes", {}, "viewer", 200),
    (
        "POST",
        "/api/v1/mqtt/clients/{client_id}/disconnect",
        "/api/v1/mqtt/clients/nobody/disconnect",
        {},
        "operator",
        404,
    ),
    ("DELETE", "/api/v1/mqtt/sessions/{client_id}", "/api/v1/mqtt/sessions/nobody", {}, "operator", 404),
    ("GET", "/api/v1/retained/{retained_id}", "/api/v1/retained/1", {}, "viewer", 404),
    ("DELETE", "/api/v1/retained/{retained_id}", "/api/v1/retained/1", {}, "operator", 404),
    ("GET", "/api/v1/acl/rules", "/api/v1/acl/rules", {}, "viewer", 200),
    ("POST", "/api/v1/acl/rules", "/api/v1/acl/rules", {"json": {}}, "admin", 422),
    ("PUT", "/api/v1/acl/rules/{rule_id}", "/api/v1/acl/rules/1", {"json": {}}, "admin", 422),
    ("DELETE", "/api/v1/acl/rules/{rule_id}", "/api/v1/acl/rules/1", {}, "admin", 404),
    (
        "GET",
        "/api/v1/acl/check",
        "/api/v1/acl/check",
        {"params": {"user": "u", "permission": "publish", "topic": "a"}},
        "viewer",
        200,
    ),
    ("GET", "/api/v1/acl/groups", "/api/v1/acl/groups", {}, "viewer", 200),
    ("PUT", "/api/v1/acl/groups/{group}/members/{user}", "/api/v1/acl/groups/g/members/u", {}, "admin", 200),
    (
        "DELETE",
        "/api/v1/acl/groups/{group}/members/{user}",
        "/api/v1/acl/groups/g/members/nobody",
        {},
        "admin",
        404,
    ),
    ("GET", "/api/v1/status", "/api/v1/status", {}, "viewer", 200),
    ("GET", "/api/v1/tokens", "/api/v1/tokens", {}, "admin", 200),
    ("POST", "/api/v1/tokens", "/api/v1/tokens", {"json": {}}, "admin", 422),
    ("DELETE", "/api/v1/tokens/{token_id}", "/api/v1/tokens/9999", {}, "admin", 404),
    ("GET", "/api/v1/audit", "/api/v1/audit", {}, "admin", 200),
    ("GET", "/api/v1/neighbours", "/api/v1/neighbours", {}, "viewer", 200),
    ("POST", "/api/v1/neighbours", "/api/v1/neighbours", {"json": {}}, "admin", 422),
    ("GET", "/api/v1/neighbours/{name}", "/api/v1/neighbours/NOPE", {}, "viewer", 404),
    ("DELETE", "/api/v1/neighbours/{name}", "/api/v1/neighbours/NOPE", {}, "admin", 404),
    ("PATCH", "/api/v1/neighbours/{name}", "/api/v1/neighbours/NOPE", {"json": {}}, "admin", 404),
    ("POST", "/api/v1/neighbours/{name}/stop", "/api/v1/neighbours/NOPE/stop", {}, "operator", 404),
    ("POST", "/api/v1/neighbours/{name}/start", "/api/v1/neighbours/NOPE/start", {}, "operator", 404),
    (
        "POST",
        "/api/v1/queues/{name}/messages/{msg_id}/get",
        f"/api/v1/queues/NOPE/messages/{DLQ_MSG}/get",
        {},
        "operator",
        404,
    ),
    (
        "DELETE",
        "/api/v1/queues/{name}/messages/{msg_id}",
        f"/api/v1/queues/NOPE/messages/{DLQ_MSG}",
        {},
        "operator",
        404,
    ),
    ("POST", "/api/v1/queues/{name}/move", "/api/v1/queues/NOPE/move", {"json": {}}, "operator", 422),
    ("POST", "/api/v1/queues/{name}/copy", "/api/v1/queues/NOPE/copy", {"json": {}}, "operator", 422),
    (
        "POST",
        "/api/v1/dead-letters/{msg_id}/forward",
        f"/api/v1/dead-letters/{DLQ_MSG}/forward",
        {"json": {"queue": "SCORES"}},
        "operator",
        404,
    ),
    ("POST", "/api/v1/publications", "/api/v1/publications", {"json": {}}, "operator", 422),
    ("GET", "/api/v1/mqtt/sessions/{client_id}", "/api/v1/mqtt/sessions/nobody", {}, "viewer", 404),
    ("GET", "/api/v1/mqtt/principals", "/api/v1/mqtt/principals", {}, "admin", 200),
    ("POST", "/api/v1/mqtt/principals", "/api/v1/mqtt/principals", {"json": {}}, "admin", 422),
    (
        "PUT",
        "/api/v1/mqtt/principals/{user}/password",
        "/api/v1/mqtt/principals/nobody/password",
        {"json": {}},
        "admin",
        422,
    ),
    ("DELETE", "/api/v1/mqtt/principals/{user}", "/api/v1/mqtt/principals/nobody", {}, "admin", 404),
    ("GET", "/api/v1/config", "/api/v1/config", {}, "admin", 200),
    (
        "POST",
        "/api/v1/config",
        "/api/v1/config",
        {"params": {"dry_run": "true"}},  # an empty file: nothing would change
        "admin",
        200,
    ),
]
# A neighbour's channel proves itself with the link's own secret, not an API token (broker.network).
LINK_TOKEN_ROUTES = {("POST", "/api/v1/channel/batches"), ("GET", "/api/v1/channel/reachable")}


def revoked_secret(api: Api) -> str:
    issued = issue(api.qm, "admin", "gone")
    with api.qm.unit_of_work() as uow:
        accounts.revoke_token(uow.connection, issued.token.token_id)
    return issued.secret


def test_the_matrix_covers_every_documented_route(api: Api) -> None:
    documented = {
        (method.upper(), path) for path, item in api.app.openapi()["paths"].items() for method in item
    }
    assert documented == {(method, template) for method, template, *_ in MATRIX} | LINK_TOKEN_ROUTES


def test_every_route_against_every_caller(qm: QueueManager) -> None:
    """The sign-in throttle off (``test_signins`` has it): every bad token is answered 401."""
    with start_api(qm, auth_throttle_delay=0) as api:
        assert _wrong_answers(api) == []


def _wrong_answers(api: Api) -> list[str]:
    callers = {
        "no token": (NONE, {}),
        "bad token": (NONE, {"Authorization": "Bearer mqa_not_a_token"}),
        "revoked token": (NONE, {"Authorization": f"Bearer {revoked_secret(api)}"}),
        **{role: (role, api.auth(role)) for role in ROLES},
    }
    wrong = []
    for method, _, path, kwargs, least, allowed in MATRIX:
        for caller, (role, headers) in callers.items():
            refused = 401 if role == NONE else 403
            expected = allowed if RANK[role] >= RANK[least] else refused
            status = api.request(method, path, None, headers=headers, **kwargs).status_code
            if status != expected:
                wrong.append(f"{caller:>13} {method} {path}: {status}, expected {expected}")
    return wrong
