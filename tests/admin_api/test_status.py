"""/api/v1/status and /metrics: what the live routers published, queue depths, the last errors."""

from __future__ import annotations

import time
from typing import Any

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import update

from admin_api import create_app
from broker import store
from broker.client import BrokerClient
from broker.core.authority import Permission
from broker.service.config import Settings
from broker.store.schema import instances
from queues.ids import now_ms
from queues.names import DEAD_LETTER_QUEUE
from tests.admin_api.conftest import Api, assert_problem
from tests.admin_api.test_subscriptions import deny
from tests.e2e.harness import ServiceThread

NOT_AUTHORIZED = "3081 MQRCCF_NOT_AUTHORIZED"


def route_some(api: Api, router: ServiceThread) -> None:
    """Two publications (one refused) to one subscriber, then a heartbeat with those numbers."""
    api.qm.define_queue("SCORES")
    deny(api.qm, "pub", "Secret", Permission.PUBLISH)
    with BrokerClient(api.qm, user_id="pub") as client:
        assert client.subscribe("Sport/#", "SCORES").ok
        assert client.publish("Sport/Soccer", "1-0").ok  # type: ignore[union-attr]
        assert client.publish("Secret/Plans", "x").completion == "error"  # type: ignore[union-attr]
    metrics = router.service.metrics
    deadline = time.monotonic() + 10
    while metrics.as_dict()["messages"] < 3:  # counted just after the commit the client saw
        assert time.monotonic() < deadline, metrics.as_dict()
        time.sleep(0.01)
    metrics.record_error("route", "boom")
    router.service.heartbeat()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_status_sums_the_live_routers(api: Api, router: ServiceThread) -> None:
    route_some(api, router)
    status: dict[str, Any] = api.get("/api/v1/status", "viewer").json()
    (live,) = status["routers"]
    assert live["instance"] == router.service.instance
    assert live["uptime_seconds"] >= 0
    totals = status["totals"]
    assert (totals["publications"], totals["deliveries"], totals["refusals"]) == (2, 1, {NOT_AUTHORIZED: 1})
    assert totals["messages"] >= 3 and totals["batches"] >= 1
    assert live["counters"] == totals
    assert status["qmgr"] == "QM1"
    assert status["api"]["uptime_seconds"] >= 0
    assert {"name": "SCORES", "depth": 1, "max_depth": 5000} in status["queues"]
    assert [(e["where"], e["error"], e["instance"]) for e in status["last_errors"]] == [
        ("route", "boom", router.service.instance)
    ]


def test_status_lists_the_broker_queues_that_cannot_be_used(api: Api, router: ServiceThread) -> None:
    assert api.get("/api/v1/status", "viewer").json()["problems"] == []
    router.stop()  # changed while the broker is stopped (a running one holds the queue open)
    api.qm.close_queues(router.service.instance)
    api.qm.alter_queue(DEAD_LETTER_QUEUE, put_enabled=False)

    (problem,) = api.get("/api/v1/status", "viewer").json()["problems"]

    assert problem == {
        "queue": DEAD_LETTER_QUEUE,
        "reason": 2051,
        "reason_name": "MQRC_PUT_INHIBITED",
        "effect": "takes no dead letters: messages that cannot be routed stay on their queues",
    }


def test_routers_that_stopped_reporting_are_left_out(api: Api) -> None:
    with api.qm.unit_of_work() as uow:
        store.write_instance(uow.connection, "gone:1:1", "router", 1, {"publications": 99})
        uow.connection.execute(update(instances).values(heartbeat_at=now_ms() - 31_000))
    status = api.get("/api/v1/status").json()
    assert (status["routers"], status["totals"]["publications"]) == ([], 0)


def test_metrics_read_queue_depths_and_router_counters_from_the_database(
    api: Api, router: ServiceThread
) -> None:
    route_some(api, router)
    response = api.get("/metrics", "viewer")
    assert response.headers["content-type"].startswith("text/plain")
    found = samples(response.text)
    instance = ("instance", router.service.instance)
    assert found[("broker_queue_depth", (("queue", "SCORES"),))] == 1
    assert found[("broker_queue_max_depth", (("queue", "SCORES"),))] == 5000
    assert found[("broker_router_publications_total", (instance,))] == 2
    assert found[("broker_router_deliveries_total", (instance,))] == 1
    refusal = (instance, ("reason", "3081"), ("reason_name", "MQRCCF_NOT_AUTHORIZED"))
    assert found[("broker_router_refusals_total", refusal)] == 1
    assert not any(name == "broker_routing_latency_seconds_count" for name, _ in found)
    assert_problem(api.get("/metrics", None), 401)


def test_in_the_routers_process_its_own_registry_is_exposed_too(api: Api, router: ServiceThread) -> None:
    route_some(api, router)
    app = create_app(api.qm, Settings(), metrics=router.service.metrics)
    with TestClient(app) as client:
        text = client.get("/metrics", headers=api.auth("viewer")).text
    found = samples(text)
    assert found[("broker_routing_latency_seconds_count", ())] >= 3
    assert found[("broker_deliveries_total", ())] == 1
    assert found[("broker_queue_depth", (("queue", "SCORES"),))] == 1
