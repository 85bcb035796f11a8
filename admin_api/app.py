"""The admin API application: a thin HTTP shell over the queue manager, the state store and the broker.

It holds no SQL and no routing logic: queues go to :class:`~queues.QueueManager`,
ACLs and listings to ``broker.store``, tokens and the audit log to
``broker.admin.accounts``, and subscription and retained-publication changes to the
broker itself as command messages (``admin_api.commands``). Everything an app
needs lives on the app, so one process can hold several (one per database).

The OpenAPI document at ``/openapi.json`` (``/docs`` renders it) lists, for every
operation, the problems it can answer with, as ``application/problem+json``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.staticfiles import StaticFiles

import migrations
from admin_api import console, links, object_names, problems, prometheus
from admin_api.auditing import AuditLog
from admin_api.body_limit import BodyLimit
from admin_api.commands import BrokerCommands
from admin_api.models import MAX_BODY_BYTES, Problem
from admin_api.routers import (
    acl,
    audit,
    config,
    docs,
    health,
    messages,
    mqtt,
    network,
    publications,
    queues,
    retained,
    status,
    subscriptions,
    tokens,
)
from admin_api.services import Services
from admin_api.signins import Signins
from admin_api.transport_security import StrictTransport
from broker.client import DEFAULT_TIMEOUT
from broker.service.config import Settings
from broker.service.health import Health
from broker.service.metrics import BrokerMetrics
from queues import QueueManager
from queues.ids import now_ms

TITLE = "wmq-psc-broker admin API"
VERSION = "1.0.0"
DESCRIPTION = """\
Administer a WebSphere MQ-compatible publish/subscribe broker: queues and their messages, the
dead-letter queue, subscriptions, retained publications, ACL rules, status and metrics.

Every endpoint except `/health`, `/ready` and this description (`/openapi.json`, `/docs`) needs
`Authorization: Bearer <token>`; create the first token with `broker token create --role admin`.
Roles: **viewer** reads; **operator** also puts, purges, defines, alters and deletes queues,
manages subscriptions and retained publications and retries dead letters; **admin** also manages
ACL rules, groups, tokens and reads the audit log.

Errors are RFC 9457 problems (`application/problem+json`) with the MQ reason name and number
when there is one.
"""
ROUTERS = (
    health,
    queues,
    messages,
    subscriptions,
    retained,
    publications,
    acl,
    status,
    tokens,
    audit,
    network,
    mqtt,
    config,
    docs,
)
STATIC = Path(__file__).resolve().parent / "static"


def create_app(
    qm: QueueManager,
    settings: Settings,
    *,
    metrics: BrokerMetrics | None = None,
    started_at: int | None = None,
    command_timeout: float = DEFAULT_TIMEOUT,
) -> FastAPI:
    """The API over ``qm``'s database; ``metrics`` is the router's when both share the process."""
    commands = BrokerCommands(qm, command_timeout)
    signins = Signins(qm, settings)
    registry = prometheus.registry(qm, metrics)
    registry.register(signins.registry)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        commands.close()

    app = FastAPI(
        title=TITLE,
        version=VERSION,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # served from the package by routers.docs, never from a CDN
        redoc_url=None,
    )
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.state.services = Services(
        qm=qm,
        settings=settings,
        commands=commands,
        started_at=started_at if started_at is not None else now_ms(),
        schema_head=migrations.head(),
        registry=registry,
        health=metrics.health if metrics is not None else Health(),
        signins=signins,
    )
    problems.install(app)
    app.add_middleware(AuditLog)
    app.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES)
    object_names.install(app)
    app.add_middleware(StrictTransport)
    for module in ROUTERS:
        app.include_router(module.router)
    console.install(app)
    # FastAPI's documented way to extend its schema: replace the method on the instance.
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document, completed with the problems every operation can answer with, so no
    router has to remember them: 413 for a body over the limit (whatever the method), 401, 403
    and 429 (the sign-in throttle) where a token is needed, 400 where a JSON body is read, 422
    as a problem (FastAPI documents its own error shape), 503 for the database."""
    if app.openapi_schema is None:
        document = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        problem = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(problem.pop("$defs", {}))
        schemas["Problem"] = problem
        for path, item in document["paths"].items():
            for operation in item.values():
                operation["responses"] = {**_problems_of(path, operation), **operation["responses"]}
                if "422" in operation["responses"]:
                    operation["responses"]["422"] = _PROBLEMS["422"]
        links.add_links(document)
        app.openapi_schema = document
    return app.openapi_schema


_PROBLEMS = {
    str(status): entry
    for status, entry in problems.responses(400, 401, 403, 404, 409, 413, 422, 429, 503).items()
}


def _problems_of(path: str, operation: dict[str, Any]) -> dict[str, Any]:
    statuses = ["413"]  # a body too large, sent with any method
    if path != "/health":
        statuses += ["503"]
    if path.startswith("/api/"):
        statuses += ["409"]  # whatever the queue manager or the broker refuses
    if "{" in path:
        statuses += ["404"]
    if "security" in operation:
        statuses += ["401", "403", "429"]
    if "requestBody" in operation:
        statuses += ["400"]
    return {status: _PROBLEMS[status] for status in statuses}
