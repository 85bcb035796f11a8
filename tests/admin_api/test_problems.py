"""Every error class answers with an RFC 9457 problem, and nothing of the server leaks into it."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from tests.admin_api.conftest import Api, assert_problem


def test_401_without_or_with_an_unknown_token(api: Api) -> None:
    for headers in ({}, {"Authorization": "Bearer mqa_unknown"}, {"Authorization": "Basic YTpi"}):
        problem = assert_problem(api.get("/api/v1/queues", None, headers=headers), 401)
        assert (problem["type"], problem["title"]) == ("/problems/unauthorized", "Authentication required")
    response = api.get("/api/v1/queues", None)
    assert response.headers["www-authenticate"] == 'Bearer realm="broker"'


def test_403_for_a_role_that_is_not_enough(api: Api) -> None:
    problem = assert_problem(api.post("/api/v1/queues", "viewer", json={"name": "Q"}), 403)
    assert (problem["type"], problem["detail"]) == (
        "/problems/forbidden",
        "this needs the operator role; the token is viewer",
    )


def test_404_and_405_from_routing(api: Api) -> None:
    missing = assert_problem(api.get("/api/v1/nothing"), 404)
    assert (missing["type"], missing["title"]) == ("about:blank", "Not Found")
    wrong = assert_problem(api.request("PUT", "/api/v1/queues"), 405)
    assert (wrong["type"], wrong["title"]) == ("about:blank", "Method Not Allowed")


def test_mq_errors_carry_reason_name_and_number(api: Api) -> None:
    problem = assert_problem(api.get("/api/v1/queues/NOPE"), 404, "MQRC_UNKNOWN_OBJECT_NAME")
    assert problem == {
        "type": "/problems/mq/MQRC_UNKNOWN_OBJECT_NAME",
        "title": "MQRC_UNKNOWN_OBJECT_NAME (2085)",
        "status": 404,
        "detail": "queue 'NOPE' is not defined",
        "instance": "/api/v1/queues/NOPE",
        "reason": 2085,
        "reason_name": "MQRC_UNKNOWN_OBJECT_NAME",
    }
    api.qm.define_queue("Q")
    assert_problem(api.post("/api/v1/queues", json={"name": "Q"}), 409, "MQRCCF_OBJECT_ALREADY_EXISTS")


def test_422_lists_field_errors_without_echoing_input(api: Api) -> None:
    response = api.post("/api/v1/queues", json={"name": "SECRET VALUE", "max_depth": "deep"})
    problem = assert_problem(response, 422)
    assert problem["type"] == "/problems/validation"
    assert sorted(tuple(e["loc"]) for e in problem["errors"]) == [("body", "max_depth"), ("body", "name")]
    assert "SECRET VALUE" not in response.text
    malformed = api.post("/api/v1/queues", content=b"{not json", headers={"content-type": "application/json"})
    assert assert_problem(malformed, 422)["errors"][0]["type"] == "json_invalid"


def test_413_for_a_declared_or_a_streamed_body_over_4_mib(api: Api) -> None:
    big = b"x" * (4 * 1024 * 1024 + 1)
    declared = assert_problem(api.post("/api/v1/queues", content=big), 413)
    assert declared["detail"] == "the request body is larger than 4194304 bytes"

    def chunks() -> Iterator[bytes]:
        for _ in range(5):
            yield b"x" * (1024 * 1024)

    streamed = assert_problem(api.post("/api/v1/queues", content=chunks()), 413)
    assert streamed["detail"] == declared["detail"]


def test_500_is_generic_and_the_error_goes_to_the_log(
    api: Api, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(pattern: str = "*", **_: object) -> list[object]:
        raise RuntimeError("password=hunter2")

    monkeypatch.setattr(api.qm, "list_queues", broken)
    with caplog.at_level(logging.ERROR, logger="admin_api"):
        response = api.get("/api/v1/queues")
    problem = assert_problem(response, 500)
    assert (problem["type"], problem["title"]) == ("/problems/internal", "Internal Server Error")
    assert "hunter2" not in response.text and "RuntimeError" not in response.text
    assert "hunter2" in caplog.text


def test_503_when_no_broker_routes(api: Api) -> None:
    api.qm.define_queue("Q")
    problem = assert_problem(api.post("/api/v1/subscriptions", json={"topics": ["a"], "queue": "Q"}), 503)
    assert problem["type"] == "/problems/no-broker"
