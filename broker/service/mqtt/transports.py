"""What carries MQTT bytes to the listener: plain TCP, TLS, and WebSockets with or without TLS.

Each transport hands the listener every client connection as a :class:`Stream` (bytes in, bytes
out, the peer's address and the principal its client certificate names), and the listener serves
them all through one code path (:class:`~broker.service.mqtt.listener.Connection`): sessions,
authority and the topic tree never depend on how a client is connected.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from broker.service.config import Settings, mqtt_address
from broker.service.tls import certificate_principal, server_context

READ_SIZE = 65536
WEBSOCKET_PATH = "/mqtt"


class Stream(Protocol):
    """One client's connection, as the listener uses it (an ``asyncio`` stream's calls)."""

    address: str
    # The principal named by the client's verified certificate ("" when it names none); None
    # without a certificate (see broker.service.tls.certificate_principal).
    principal: str | None

    async def read(self) -> bytes:
        """The next bytes received, ``b""`` once the connection has ended."""

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None:
        """Wait until what was written has gone (flow control)."""

    def is_closing(self) -> bool: ...

    def close(self) -> None: ...


Accept = Callable[[Stream], Awaitable[None]]


class Server(Protocol):
    def close(self) -> None: ...


def peer_address(peer: Any) -> str:
    """``host:port`` of a socket's peer name (any other form as it is)."""
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)


def peer_principal(ssl_object: ssl.SSLObject | None) -> str | None:
    return None if ssl_object is None else certificate_principal(ssl_object.getpeercert())


class SocketStream:
    """A TCP connection, encrypted or not: asyncio's own streams."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.address = peer_address(writer.get_extra_info("peername"))
        self.principal = peer_principal(writer.get_extra_info("ssl_object"))

    async def read(self) -> bytes:
        return await self.reader.read(READ_SIZE)

    def write(self, data: bytes) -> None:
        self.writer.write(data)

    async def drain(self) -> None:
        await self.writer.drain()

    def is_closing(self) -> bool:
        return self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


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

    async def start(self, accept: Accept, max_packet_size: int) -> Server:
        """Listen; every connection accepted is served by ``accept``."""
        if self.scheme in ("ws", "wss"):
            from broker.service.mqtt.websocket import serve  # the websockets library: only if used

            return await serve(accept, self.host, self.port, self.context, max_packet_size)

        async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await accept(SocketStream(reader, writer))

        return await asyncio.start_server(connected, self.host, self.port, ssl=self.context)


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
