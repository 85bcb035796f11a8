"""/health and /ready: no token needed; ready means schema at head and background work alive;
degraded while the database or a broker queue is unavailable."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import OperationalError

import migrations
from broker.core.system import CONTROL_QUEUE, DEFAULT_STREAM
from broker.service.health import FAILING_AFTER, Health
from broker.service.provision import ensure_system_queues
from queues.errors import MQError
from queues.reasons import Reason
from tests.admin_api.conftest import Api, assert_problem


def test_health_and_ready_need_no_token(api: Api) -> None:
    ensure_system_queues(api.qm)
    assert api.get("/health", None).json() == {"status": "ok"}
    assert api.get("/ready", None).json() == {
        "status": "ready",
        "revision": migrations.head(),
        "problems": [],
        "database": None,
        "tasks": [],
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
        "database": None,
        "tasks": [],
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


def test_degraded_naming_the_database_while_it_is_gone(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """200: the process's work waits for the database and resumes; taking every process out of
    rotation would not bring it back."""

    def unreachable() -> None:
        raise OperationalError("connect", {}, OSError("connection refused"))

    monkeypatch.setattr(api.qm.engine, "connect", unreachable)
    response = api.get("/ready", None)
    assert response.status_code == 200
    assert response.json() == {
        "status": "degraded",
        "revision": None,
        "problems": [],
        "database": {"error": "connection refused", "since": None, "tasks": []},
        "tasks": [],
    }
    assert api.get("/health", None).status_code == 200


def health_of(api: Api) -> Health:
    found: Health = api.app.state.services.health
    return found


def test_degraded_while_background_work_waits_for_the_database(api: Api) -> None:
    ensure_system_queues(api.qm)
    health = health_of(api)
    health.watch("mqtt-watcher", lambda: True)
    health.failed("mqtt-watcher", MQError(Reason.MQRC_CONNECTION_BROKEN, "database unavailable: gone"))

    body = api.get("/ready", None).json()
    assert (body["status"], body["revision"]) == ("degraded", migrations.head())
    assert body["database"]["tasks"] == ["mqtt-watcher"]
    assert body["database"]["error"] == "database unavailable: gone"
    assert body["tasks"] == [
        {"name": "mqtt-watcher", "state": "waiting for the database", "alive": True, "failures": 0}
    ]

    health.succeeded("mqtt-watcher")
    body = api.get("/ready", None).json()
    assert (body["status"], body["database"], body["tasks"][0]["state"]) == ("ready", None, "running")


def test_not_ready_while_a_task_keeps_failing_or_has_died(api: Api) -> None:
    ensure_system_queues(api.qm)
    health = health_of(api)
    health.watch("mqtt-sys", lambda: True)
    for _ in range(FAILING_AFTER - 1):
        health.failed("mqtt-sys", ValueError("bad value"))
    assert api.get("/ready", None).status_code == 200  # a failure or two: retried, still ready

    health.failed("mqtt-sys", ValueError("bad value"))
    problem = assert_problem(api.get("/ready", None), 503)
    assert problem["detail"] == "background work is failing: mqtt-sys: ValueError: bad value"

    health.succeeded("mqtt-sys")
    assert api.get("/ready", None).status_code == 200
    health.watch("channels", lambda: False)
    problem = assert_problem(api.get("/ready", None), 503)
    assert problem["detail"] == "background work is failing: channels: stopped"
