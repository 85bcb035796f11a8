"""What carries MQTT bytes to the listener: plain TCP, TLS, and WebSockets with or without TLS.

Each transport hands the listener every client connection as a :class:`Stream` (bytes in, bytes
out, the peer's address and the principal its client certificate names), and the listener serves
them all through one code path (:class:`~broker.service.mqtt.listener.Connection`): sessions,
authority and the topic tree never depend on how a client is connected.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from broker.service.config import Settings, mqtt_address
from broker.service.tls import certificate_principal, server_context

BACKLOG = 4096  # pending connections: a fleet reconnecting at once after a restart
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


class SocketStream(asyncio.Protocol):
    """A TCP connection, encrypted or not, as an asyncio protocol: the event loop's callbacks
    push what arrives into the connection's :class:`Sink` (no reader, writer or task per
    connection: an idle client costs its transport and this). With TLS, asyncio calls
    :meth:`connection_made` once the handshake is done, so the certificate is known."""

    __slots__ = ("_accept", "address", "principal", "sink", "transport")

    def __init__(self, accept: Accept) -> None:
        self._accept = accept
        self.address = ""
        self.principal: str | None = None
        self.transport: asyncio.Transport | None = None
        self.sink: Sink | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.address = peer_address(transport.get_extra_info("peername"))
        self.principal = peer_principal(transport.get_extra_info("ssl_object"))
        self.sink = self._accept(self)

    def data_received(self, data: bytes) -> None:
        assert self.sink is not None
        self.sink.received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.sink is not None:
            self.sink.lost("connection closed by the client" if exc is None else f"socket error: {exc}")

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def backlog(self) -> int:
        assert self.transport is not None
        return self.transport.get_write_buffer_size()

    def is_closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


@dataclass(frozen=True)
class Endpoint:
    """One address the listener serves, and how (``scheme``: mqtt, mqtts, ws or wss)."""

    scheme: str
    host: str
    port: int
    context: ssl.SSLContext | None = None

    def __str__(self) -> str:
        path = WEBSOCKET_PATH if self.scheme in ("ws", "wss") else ""
        return f"{self.scheme}://{self.host}:{self.port}{path}"

    async def start(self, accept: Accept, max_packet_size: int, *, shared: bool = False) -> Server:
        """Listen; every connection accepted is served by ``accept``. ``shared``: the port is
        bound with SO_REUSEPORT, so that several listener processes accept on it (the kernel
        spreads the connections among them)."""
        if self.scheme in ("ws", "wss"):
            from broker.service.mqtt.websocket import serve  # the websockets library: only if used

            return await serve(accept, self.host, self.port, self.context, max_packet_size, shared=shared)
        loop = asyncio.get_running_loop()
        return await loop.create_server(
            lambda: SocketStream(accept),
            self.host,
            self.port,
            ssl=self.context,
            reuse_port=shared or None,
            backlog=BACKLOG,
        )


# The setting naming each listener's address, by scheme; the TLS ones share one context.
LISTEN_SETTINGS = {
    "mqtt": "mqtt_listen",
    "mqtts": "mqtt_tls_listen",
    "ws": "mqtt_ws_listen",
    "wss": "mqtt_wss_listen",
}
SECURE = ("mqtts", "wss")


def endpoints(settings: Settings) -> list[Endpoint]:
    """The MQTT listeners the settings ask for (none: no listener). Every address and the TLS
    files are checked here, at start-up: a ConfigError before anything listens."""
    wanted = {
        scheme: mqtt_address(getattr(settings, name), name)
        for scheme, name in LISTEN_SETTINGS.items()
        if getattr(settings, name)
    }
    context = server_context(settings) if wanted.keys() & set(SECURE) else None
    return [
        Endpoint(scheme, host, port, context if scheme in SECURE else None)
        for scheme, (host, port) in wanted.items()
    ]
