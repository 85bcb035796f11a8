"""What every transport hands the listener: each client connection as a :class:`Stream` (bytes
out, the peer's address, the principal its certificate names) whose input goes to a
:class:`Sink`. The transports (``transports``, ``websocket``) and the listener share these
and nothing else of each other."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import Any, Protocol

from broker.service.tls import certificate_principal

WEBSOCKET_PATH = "/mqtt"


class Sink(Protocol):
    """What a transport hands a connection's input to (the listener's ``Connection``): pushed
    from the transport's callbacks, so that an idle connection waits on no task of its own."""

    def received(self, data: bytes) -> None: ...

    def lost(self, reason: str) -> None:
        """The connection has ended (closed by the client, or a socket error)."""

    async def closed(self) -> None:
        """Wait until the connection has ended and its session is left as it should be."""


class Stream(Protocol):
    """One client's connection, as the listener uses it for output."""

    address: str
    # The principal named by the client's verified certificate ("" when it names none); None
    # without a certificate (see broker.service.tls.certificate_principal).
    principal: str | None

    def write(self, data: bytes) -> None: ...

    def pause_reading(self) -> None:
        """Read nothing more until :meth:`resume_reading` (the client's TCP then slows it)."""

    def resume_reading(self) -> None: ...

    def backlog(self) -> int:
        """Bytes written and not yet taken by the network (the per-connection output bound)."""

    def is_closing(self) -> bool: ...

    def close(self) -> None: ...


Accept = Callable[[Stream], Sink]


class Server(Protocol):
    def close(self) -> None: ...


def peer_address(peer: Any) -> str:
    """``host:port`` of a socket's peer name (any other form as it is)."""
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)


def peer_principal(ssl_object: ssl.SSLObject | None) -> str | None:
    return None if ssl_object is None else certificate_principal(ssl_object.getpeercert())
