"""Request bodies are bounded, so one request can never hold gigabytes in an API process.

A declared ``Content-Length`` over the limit is answered before the body is
read; a body that turns out larger while it streams stops the request as soon
as it crosses the limit. Both answers are 413 problems like every other error
(Starlette's own limiter answers in plain text, hence this middleware).
"""

from __future__ import annotations

from http import HTTPStatus

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from admin_api.problems import problem_response


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


class BodyLimit:
    """ASGI middleware: 413 for request bodies over ``max_bytes``."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _too_large(self) -> HTTPException:
        return HTTPException(413, f"the request body is larger than {self.max_bytes} bytes")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _declared_length(scope)
        if declared is not None and declared > self.max_bytes:
            request = Request(scope, receive)
            error = self._too_large()
            phrase = HTTPStatus.REQUEST_ENTITY_TOO_LARGE.phrase
            response = problem_response(request, 413, "about:blank", phrase, error.detail)
            await response(scope, receive, send)
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise self._too_large()
            return message

        await self.app(scope, limited, send)
