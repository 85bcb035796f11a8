"""``/health`` and ``/ready``: for load balancers and orchestrators, so without authentication.

``/health`` answers as long as the process serves requests. ``/ready`` also
needs the database to answer and its schema to be the one this release
expects; an API process in front of a database that is mid-upgrade (or of a
newer release's schema) is taken out of rotation rather than failing requests.

A broker queue that is missing or inhibited leaves ``/ready`` at 200 with status
``degraded`` and the problems listed: the broker routes the rest, and this API is
what the operator puts it right with, so it must stay in rotation.
"""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy.exc import SQLAlchemyError

import migrations
from admin_api.models import Health, QueueProblemOut, Readiness
from admin_api.problems import ApiProblem
from admin_api.services import Svc

router = APIRouter(tags=["health"])


@router.get("/health", response_model=Health, summary="The process is alive")
def health() -> Health:
    return Health(status="ok")


@router.get(
    "/ready",
    response_model=Readiness,
    summary="Database reachable, schema at head; degraded while a broker queue cannot be used",
)
def ready(
    svc: Svc,
) -> Readiness:
    try:
        revision = migrations.current(svc.qm.engine)
    except SQLAlchemyError as exc:
        raise ApiProblem(
            503, "not-ready", "Not ready", f"the database is unreachable: {getattr(exc, 'orig', None) or exc}"
        ) from None
    if revision is None or revision != svc.schema_head:
        raise ApiProblem(
            503,
            "not-ready",
            "Not ready",
            f"the database schema is at {revision}, this release needs {svc.schema_head}:"
            " run 'broker db upgrade'",
        )
    problems = [QueueProblemOut.of(problem) for problem in svc.queue_problems()]
    return Readiness(status="degraded" if problems else "ready", revision=revision, problems=problems)
