"""MQ object names in URL paths: one path segment each, ``/`` included.

MQ names may contain ``/`` (``A-Z a-z 0-9 . / _ %``), so a client sends a queue named
``APP/IN`` as ``/api/v1/queues/APP%2FIN``. The server decodes the path before routing, and
``APP%2FIN`` and ``APP/IN`` would then route alike: ``/queues/X%2Fmessages`` (the queue
``X/messages``) would browse the queue ``X``, and a route that let a name span segments
would swallow ``/queues/X/messages`` instead. So the path is decoded here segment by
segment, each encoded ``/`` becoming a character no MQ name may hold, and the ``name``
convertor turns it back: a name is exactly one segment, and ``/messages`` is never part of
one.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from starlette.convertors import Convertor, register_url_convertor
from starlette.types import ASGIApp, Receive, Scope, Send

SLASH_IN_NAME = "\u2215"  # DIVISION SLASH: stands for an encoded "/" until the name is read


class NameConvertor(Convertor[str]):
    regex = "[^/]+"

    def convert(self, value: str) -> str:
        return value.replace(SLASH_IN_NAME, "/")

    def to_string(self, value: str) -> str:
        return value.replace("/", SLASH_IN_NAME)


register_url_convertor("name", NameConvertor())


def decoded_path(raw_path: bytes) -> str:
    """The request path, each segment percent-decoded, an encoded ``/`` kept apart."""
    segments = raw_path.decode("latin-1").split("/")
    return "/".join(unquote(segment).replace("/", SLASH_IN_NAME) for segment in segments)


class SegmentedPaths:
    """ASGI middleware: route on segments as the client encoded them."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("raw_path"):
            scope = dict(scope)
            scope["path"] = decoded_path(scope["raw_path"].split(b"?", 1)[0])
        await self.app(scope, receive, send)


def install(app: Any) -> None:
    app.add_middleware(SegmentedPaths)
