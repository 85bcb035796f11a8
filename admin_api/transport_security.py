"""``Strict-Transport-Security`` on every response served over HTTPS (``--api-tls``): a browser
that has reached the console or the API over TLS once will not be led back to cleartext, where
the session cookie and the tokens could be read."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# A year, as browsers' preload lists ask; not includeSubDomains: the host's other names may serve
# other things. Browsers ignore it for an IP address and over HTTP, where it is not sent.
HSTS = (b"strict-transport-security", b"max-age=31536000")


class StrictTransport:
    """ASGI middleware: adds :data:`HSTS` to the responses of HTTPS requests."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("scheme") != "https":
            await self.app(scope, receive, send)
            return

        async def send_with_hsts(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), HSTS]}
            await send(message)

        await self.app(scope, receive, send_with_hsts)
