"""/health and /ready: no token needed; ready means database reachable and schema at head."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import OperationalError

import migrations
from tests.admin_api.conftest import Api, assert_problem


def test_health_and_ready_need_no_token(api: Api) -> None:
    assert api.get("/health", None).json() == {"status": "ok"}
    assert api.get("/ready", None).json() == {"status": "ready", "revision": migrations.head()}


def test_not_ready_when_the_schema_is_behind(api: Api) -> None:
    migrations.downgrade(api.qm.engine, "0001")
    problem = assert_problem(api.get("/ready", None), 503)
    assert (problem["type"], problem["detail"]) == (
        "/problems/not-ready",
        f"the database schema is at 0001, this release needs {migrations.head()}: run 'broker db upgrade'",
    )


def test_not_ready_when_the_database_is_gone(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable() -> None:
        raise OperationalError("connect", {}, OSError("connection refused"))

    monkeypatch.setattr(api.qm.engine, "connect", unreachable)
    problem = assert_problem(api.get("/ready", None), 503)
    assert problem["detail"] == "the database is unreachable: connection refused"
    assert api.get("/health", None).status_code == 200
