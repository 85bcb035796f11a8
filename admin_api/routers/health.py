"""``/health`` and ``/ready``: for load balancers and orchestrators, so without authentication.

``/health`` answers as long as the process serves requests. ``/ready`` also needs the
database's schema to be the one this release expects, and every background task of the
process (the routing loop, the MQTT listener's gateway, watcher and chores, when they run
beside this API) to be alive and not failing for a reason of its own
(``broker.service.health``): a process in front of a database that is mid-upgrade, or whose
work has broken, is taken out of rotation rather than failing requests.

A database that is unavailable, or a broker queue that is missing or inhibited, leaves
``/ready`` at 200 with status ``degraded``, naming the database or the queues: the work waits
for the database and resumes when it answers, the broker routes the rest meanwhile, and this
API is what the operator puts a queue right with, so it must stay in rotation.
"""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy.exc import SQLAlchemyError

import migrations
from admin_api.models import DatabaseOutageOut, Health, QueueProblemOut, Readiness, TaskOut
from admin_api.problems import ApiProblem
from admin_api.services import Svc
from queues.errors import MQError

router = APIRouter(tags=["health"])


@router.get("/health", response_model=Health, summary="The process is alive")
def health() -> Health:
    return Health(status="ok")


@router.get(
    "/ready",
    response_model=Readiness,
    summary="Schema at head, work alive; degraded while the database or a broker queue is unavailable",
)
def ready(
    svc: Svc,
) -> Readiness:
    report = svc.health.report()
    if not report.ready:
        failing = "; ".join(f"{t.name}: {t.error if t.alive else 'stopped'}" for t in report.failing)
        raise ApiProblem(503, "not-ready", "Not ready", f"background work is failing: {failing}")
    tasks = [TaskOut.of(task) for task in report.tasks]
    database = None if report.outage is None else DatabaseOutageOut.of(report.outage)
    try:
        revision = migrations.current(svc.qm.engine)
        if revision is None or revision != svc.schema_head:
            raise ApiProblem(
                503,
                "not-ready",
                "Not ready",
                f"the database schema is at {revision}, this release needs {svc.schema_head}:"
                " run 'broker db upgrade'",
            )
        problems = [QueueProblemOut.of(problem) for problem in svc.queue_problems()]
    except (SQLAlchemyError, MQError) as exc:
        error = exc.detail if isinstance(exc, MQError) else str(getattr(exc, "orig", None) or exc)
        database = database or DatabaseOutageOut(error=error, since=None, tasks=[])
        return Readiness(status="degraded", revision=None, problems=[], database=database, tasks=tasks)
    degraded = problems or database is not None
    return Readiness(
        status="degraded" if degraded else "ready",
        revision=revision,
        problems=problems,
        database=database,
        tasks=tasks,
    )
