"""/health and /ready: no token needed; ready means database reachable and schema at head."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import OperationalError

import migrations
from broker.core.system import CONTROL_QUEUE, DEFAULT_STREAM
from broker.service.provision import ensure_system_queues
from tests.admin_api.conftest import Api, assert_problem


def test_health_and_ready_need_no_token(api: Api) -> None:
    ensure_system_queues(api.qm)
    assert api.get("/health", None).json() == {"status": "ok"}
    assert api.get("/ready", None).json() == {
        "status": "ready",
        "revision": migrations.head(),
        "problems": [],
    }


def test_ready_but_degraded_while_a_broker_queue_cannot_be_used(api: Api) -> None:
    """200 all the same: the broker routes the rest, and this API is how the operator puts it right."""
    ensure_system_queues(api.qm)
    api.qm.alter_queue(CONTROL_QUEUE, get_enabled=False)
    api.qm.delete_queue(DEFAULT_STREAM)

    response = api.get("/ready", None)

    assert response.status_code == 200
    assert response.json() == {
        "status": "degraded",
        "revision": migrations.head(),
        "problems": [
            {
                "queue": CONTROL_QUEUE,
                "reason": 2016,
                "reason_name": "MQRC_GET_INHIBITED",
                "effect": "gets inhibited: not routed",
            },
            {
                "queue": DEFAULT_STREAM,
                "reason": 2085,
                "reason_name": "MQRC_UNKNOWN_OBJECT_NAME",
                "effect": "not defined: nothing to route",
            },
        ],
    }
    api.qm.alter_queue(CONTROL_QUEUE, get_enabled=True)
    ensure_system_queues(api.qm)
    assert api.get("/ready", None).json()["status"] == "ready"


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
