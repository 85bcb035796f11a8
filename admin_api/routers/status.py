"""``/api/v1/status`` for people and ``/metrics`` for Prometheus (both need a viewer token).

Routers publish their counters in ``psb_instances`` every few seconds; status
sums those of the routers that reported within the last 30 s (one that stopped
reporting is gone or stuck, and its frozen numbers would mislead), and lists
each of them with its uptime, beside this API process's own uptime, the
depth of every queue and the broker queues that cannot be used now.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from admin_api.commands import ROUTER_ALIVE_MS, ROUTER_ROLE
from admin_api.models import (
    ApiProcess,
    Counters,
    ErrorNote,
    QueueDepth,
    QueueProblemOut,
    RouterStatus,
    Status,
)
from admin_api.security import ViewerToken
from admin_api.services import Services, Svc
from broker import store
from queues.ids import now_ms

router = APIRouter(tags=["status"])

LAST_ERRORS = 20


def _counters(stats: dict[str, Any]) -> Counters:
    return Counters.model_validate({name: stats[name] for name in Counters.model_fields if name in stats})


def total(counters: list[Counters]) -> Counters:
    """The counters of several routers added up (refusals reason by reason)."""
    result = Counters()
    for c in counters:
        for name in Counters.model_fields:
            if name != "refusals":
                setattr(result, name, getattr(result, name) + getattr(c, name))
        for label, count in c.refusals.items():
            result.refusals[label] = result.refusals.get(label, 0) + count
    return result


def live_routers(svc: Services, now: int) -> tuple[list[RouterStatus], list[ErrorNote]]:
    """The routers that reported within ``ROUTER_ALIVE_MS`` and their last errors, newest first."""
    with svc.qm.reading() as conn:
        live = [
            i for i in store.list_instances(conn, alive_within_ms=ROUTER_ALIVE_MS) if i["role"] == ROUTER_ROLE
        ]
    routers = [
        RouterStatus(
            instance=i["instance"],
            started_at=i["started_at"],
            heartbeat_at=i["heartbeat_at"],
            uptime_seconds=(now - i["started_at"]) / 1000,
            counters=_counters(i["stats"]),
        )
        for i in live
    ]
    errors = sorted(
        (
            ErrorNote(instance=i["instance"], **error)
            for i in live
            for error in i["stats"].get("last_errors", [])
        ),
        key=lambda e: e.at,
        reverse=True,
    )
    return routers, errors[:LAST_ERRORS]


@router.get(
    "/api/v1/status",
    response_model=Status,
    summary="Queue manager, routers, what they routed and refused, queue depths, the last errors",
)
def status(
    _: ViewerToken,
    svc: Svc,
) -> Status:
    now = now_ms()
    queues = svc.qm.list_queues()
    routers, errors = live_routers(svc, now)
    return Status(
        qmgr=svc.qm.name,
        api=ApiProcess(started_at=svc.started_at, uptime_seconds=(now - svc.started_at) / 1000),
        routers=routers,
        totals=total([r.counters for r in routers]),
        queues=[QueueDepth(name=q.name, depth=q.depth, max_depth=q.max_depth) for q in queues],
        problems=[QueueProblemOut.of(problem) for problem in svc.queue_problems()],
        last_errors=errors,
    )


@router.get(
    "/metrics",
    response_class=Response,
    summary="Prometheus text format",
    responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}}},
)
def metrics(
    _: ViewerToken,
    svc: Svc,
) -> Response:
    return Response(generate_latest(svc.registry), media_type=CONTENT_TYPE_LATEST)
