"""Every change made through the API is written to the audit log: who, what, when, how it ended.

A change is any request other than GET, HEAD or OPTIONS made with a valid token,
whatever its outcome: a refused change (403, 409, 422...) is recorded too, since
an administrator reading the log wants the attempts as much as the successes.
A request with a bad token, whatever its method, is recorded as a failed sign-in
(``admin_api.signins``, :func:`record_failed_sign_in`); one refused by the sign-in
throttle is not, so nobody can fill the table, and one with no token at all is not.

The entry is written before the last byte of the response is sent, so a client
that has its answer can already read the entry. Handlers describe what they
changed in ``request.state.audit`` (a JSON-ready dict, never a secret); the path
parameters are always recorded.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from admin_api.object_names import SLASH_IN_NAME
from broker.admin import accounts
from broker.admin.accounts import Token
from queues import QueueManager

log = logging.getLogger("admin_api.audit")

UNCHANGING = frozenset({"GET", "HEAD", "OPTIONS"})


def note(request_state: Any, **summary: Any) -> None:
    """Add to what the audit entry of the current request says was changed."""
    current = getattr(request_state, "audit", None) or {}
    request_state.audit = {**current, **summary}


class AuditLog:
    """ASGI middleware that records authenticated changes with their HTTP status."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in UNCHANGING:
            await self.app(scope, receive, send)
            return
        status = 500
        recorded = False

        async def send_after_recording(message: Message) -> None:
            nonlocal status, recorded
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body") and not recorded:
                recorded = True
                await self._record(scope, status)
            await send(message)

        try:
            await self.app(scope, receive, send_after_recording)
        except Exception:
            if not recorded:
                await self._record(scope, 500)
            raise

    async def _record(self, scope: Scope, status: int) -> None:
        state = scope.get("state", {})
        token: Token | None = state.get("token")
        if token is None:
            return
        path, resource = where(scope)
        summary = {**scope.get("path_params", {}), **(state.get("audit") or {})}
        qm = scope["app"].state.services.qm

        def write() -> None:
            with qm.unit_of_work() as uow:
                accounts.record(
                    uow.connection,
                    token_id=token.token_id,
                    principal=token.principal,
                    method=scope["method"],
                    path=path,
                    resource=resource,
                    summary=summary,
                    status=status,
                )

        try:
            await run_in_threadpool(write)
        except Exception:  # the change is made and answered; a lost entry must not turn it into a 500
            log.exception(
                "audit entry not written",
                extra={"method": scope["method"], "path": path, "status": status},
            )


def where(scope: Scope) -> tuple[str, str]:
    """The request's path as the client encoded it, and its route's template as the OpenAPI
    document writes it ("{name}", not "{name:name}")."""
    path: str = scope["path"].replace(SLASH_IN_NAME, "%2F")
    return path, re.sub(r"{(\w+):\w+}", r"{\1}", getattr(scope.get("route"), "path", path))


def record_failed_sign_in(
    qm: QueueManager, scope: Scope, token: Token | None, summary: dict[str, Any], status: int
) -> None:
    """A failed sign-in's entry: nobody's, or the revoked ``token``'s that was shown (never the
    secret). Written at once, from the worker thread checking the token."""
    path, resource = where(scope)
    with qm.unit_of_work() as uow:
        accounts.record(
            uow.connection,
            token_id=None if token is None else token.token_id,
            principal="" if token is None else token.principal,
            method=scope["method"],
            path=path,
            resource=resource,
            summary=summary,
            status=status,
        )
