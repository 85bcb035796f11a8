"""The application: its OpenAPI document (what /docs shows and schemathesis checks) and its isolation."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from admin_api import create_app
from broker.service.config import Settings
from tests.admin_api.conftest import Api
from tests.admin_api.test_security import LINK_TOKEN_ROUTES

PUBLIC = {("GET", "/health"), ("GET", "/ready")}
PROBLEM = {"schema": {"$ref": "#/components/schemas/Problem"}}


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, op) for path, item in document["paths"].items() for method, op in item.items()]


def test_every_protected_operation_declares_bearer_auth_and_its_problems(api: Api) -> None:
    document = api.app.openapi()
    assert document["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    unsecured = {(method.upper(), path) for path, method, op in operations(document) if "security" not in op}
    assert unsecured == PUBLIC | LINK_TOKEN_ROUTES
    for path, method, op in operations(document):
        responses = op["responses"]
        if (method.upper(), path) in unsecured:
            continue
        assert op["security"] == [{"HTTPBearer": []}], (method, path)
        for status in ("401", "403"):
            assert responses[status]["content"] == {"application/problem+json": PROBLEM}, (method, path)
        if "requestBody" in op:
            assert {"400", "413", "422"} <= responses.keys(), (method, path)


def test_the_problem_schema_and_examples_are_documented(api: Api) -> None:
    document = api.app.openapi()
    schemas = document["components"]["schemas"]
    assert {"type", "title", "status", "detail", "instance"} <= set(schemas["Problem"]["required"])
    assert schemas["Problem"]["examples"][0]["reason_name"] == "MQRC_UNKNOWN_OBJECT_NAME"
    assert schemas["FieldError"]["required"] == ["loc", "msg", "type"]
    for model in ("SubscriptionCreate", "QueueCreate", "MessageIn", "RuleIn", "TokenIn"):
        assert schemas[model]["examples"], model
    assert api.get("/docs", None).status_code == 200
    assert api.get("/openapi.json", None).json() == document


def test_apps_share_nothing_but_the_database(api: Api) -> None:
    deny_by_default = create_app(api.qm, Settings(default_policy="deny"))
    params = {"user": "bob", "permission": "publish", "topic": "a"}
    with TestClient(deny_by_default) as other:
        answer = other.get("/api/v1/acl/check", params=params, headers=api.auth("viewer")).json()
    assert (answer["allowed"], answer["default_policy"]) == (False, "deny")
    assert api.get("/api/v1/acl/check", params=params).json()["allowed"] is True


def test_docs_load_swagger_ui_from_the_package_not_a_cdn(api: Api) -> None:
    page = api.get("/docs", None)
    assert page.status_code == 200
    assert "/static/swagger-ui/swagger-ui-bundle.js" in page.text
    assert "cdn" not in page.text.lower() and "https://" not in page.text
    script = api.get("/static/swagger-ui/swagger-ui-bundle.js", None)
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert len(script.content) > 1_000_000  # swagger-ui-dist 5, whole
    assert api.get("/static/swagger-ui/swagger-ui.css", None).status_code == 200
    assert api.get("/redoc", None).status_code == 404  # it would load from a CDN
