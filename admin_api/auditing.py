"""Every change made through the API is written to the audit log: who, what, when, how it ended.

A change is any request other than GET, HEAD or OPTIONS made with a valid token,
whatever its outcome: a refused change (403, 409, 422...) is recorded too, since
an administrator reading the log wants the attempts as much as the successes.
Requests without a valid token are not recorded (they are not anyone's doing,
and recording them would let anyone fill the table).

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

from admin_api import accounts
from admin_api.accounts import Token
from admin_api.object_names import SLASH_IN_NAME

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
        path: str = scope["path"].replace(SLASH_IN_NAME, "%2F")  # as the client encoded it
        # the route's template, as the OpenAPI document writes it ("{name}", not "{name:name}")
        resource = re.sub(r"{(\w+):\w+}", r"{\1}", getattr(scope.get("route"), "path", path))
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
