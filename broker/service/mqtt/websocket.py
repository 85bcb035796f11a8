"""MQTT over WebSockets (MQTT 3.1.1 section 6), as browser clients (MQTT.js, Paho JavaScript)
speak it: path ``/mqtt``, subprotocol ``mqtt`` (or ``mqttv3.1``, Paho JavaScript's for 3.1),
MQTT bytes in binary messages. The WebSocket protocol is the ``websockets`` library's; a message
may hold part of a packet or several packets, which the listener's decoder reassembles as it
does TCP segments. A client that offers neither subprotocol is refused (HTTP 400), as the
specification has clients offer ``mqtt``.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from http import HTTPStatus

from websockets.asyncio.server import Server, ServerConnection
from websockets.asyncio.server import serve as serve_websockets
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode
from websockets.http11 import Request, Response
from websockets.protocol import State
from websockets.typing import Subprotocol

from broker.service.mqtt.admission import Admission
from broker.service.mqtt.streams import WEBSOCKET_PATH, Accept, peer_address, peer_principal

SUBPROTOCOLS = [Subprotocol("mqtt"), Subprotocol("mqttv3.1")]
HEADER_BYTES = 5  # an MQTT fixed header: the type byte and at most 4 bytes of Remaining Length

# The library logs every connection opened at INFO; the listener logs the MQTT connection itself.
library_log = logging.getLogger("broker.mqtt.websocket")
library_log.setLevel(logging.WARNING)


class WebSocketStream:
    """One WebSocket connection as a :class:`~broker.service.mqtt.streams.Stream`. Writes
    are gathered while a message is being sent and go out together in the next one, in order."""

    def __init__(self, websocket: ServerConnection) -> None:
        self.websocket = websocket
        self.address = peer_address(websocket.remote_address)
        self.principal = peer_principal(websocket.transport.get_extra_info("ssl_object"))
        self._pending: list[bytes] = []
        self._sending: asyncio.Task[None] | None = None
        self._closing: asyncio.Task[None] | None = None
        self._reading = asyncio.Event()  # cleared while paused: the library's queue then fills,
        self._reading.set()  # and it stops reading the socket

    def pause_reading(self) -> None:
        self._reading.clear()

    def resume_reading(self) -> None:
        self._reading.set()

    async def read(self) -> bytes:
        await self._reading.wait()
        try:
            message = await self.websocket.recv()
        except ConnectionClosed:
            return b""
        if isinstance(message, str):
            await self.websocket.close(CloseCode.UNSUPPORTED_DATA, "MQTT travels in binary messages")
            raise ConnectionError("a text WebSocket message (MQTT travels in binary ones)")
        return message

    def write(self, data: bytes) -> None:
        self._pending.append(data)
        if self._sending is None:
            self._sending = asyncio.create_task(self._send())

    async def _send(self) -> None:
        try:
            while self._pending:
                data = b"".join(self._pending)
                self._pending.clear()
                await self.websocket.send(data)
        except ConnectionClosed:
            self._pending.clear()
        finally:
            self._sending = None

    async def drain(self) -> None:
        if self._sending is not None:
            await asyncio.shield(self._sending)  # a cancelled drain leaves the message whole

    def backlog(self) -> int:
        return sum(map(len, self._pending)) + self.websocket.transport.get_write_buffer_size()

    def is_closing(self) -> bool:
        return self._closing is not None or self.websocket.state is not State.OPEN

    def close(self) -> None:
        """Send what was written, then the closing handshake."""
        self._reading.set()  # a paused read loop goes on, to find the connection closed
        if self._closing is None:
            self._closing = asyncio.create_task(self._close())

    async def _close(self) -> None:
        await self.drain()
        await self.websocket.close()

    async def closed(self) -> None:
        if self._closing is not None:
            await self._closing


def _at_mqtt_path(connection: ServerConnection, request: Request) -> Response | None:
    """Only ``/mqtt`` (any query string) is an MQTT endpoint: elsewhere, 404."""
    if request.path.partition("?")[0] != WEBSOCKET_PATH:
        return connection.respond(HTTPStatus.NOT_FOUND, f"MQTT over WebSockets is at {WEBSOCKET_PATH}\n")
    return None


async def serve(
    accept: Accept,
    sock: socket.socket,
    context: ssl.SSLContext | None,
    max_packet_size: int,
    admission: Admission,
) -> Server:
    """A WebSocket server handing every MQTT connection to ``accept``, as ``admission``
    allows: over its rate or its half-open connections, a connection is closed at once with
    1013 (try again later). No WebSocket pings (the MQTT keepalive watches the client) and no
    compression (MQTT payloads are the applications'; deflating every message would cost the
    broker's CPU for what is usually small)."""

    async def connected(websocket: ServerConnection) -> None:
        if not admission.try_enter():
            await websocket.close(CloseCode.TRY_AGAIN_LATER, "too many new connections: try again later")
            return
        stream = WebSocketStream(websocket)
        sink = accept(stream)
        try:
            while data := await stream.read():
                sink.received(data)
            reason = "connection closed by the client"
        except (ConnectionError, OSError) as exc:
            reason = f"socket error: {exc}"
        try:
            sink.lost(reason)
            await sink.closed()
        finally:
            await stream.closed()

    return await serve_websockets(
        connected,
        sock=sock,
        ssl=context,
        subprotocols=SUBPROTOCOLS,
        process_request=_at_mqtt_path,
        max_size=max_packet_size + HEADER_BYTES,
        compression=None,
        ping_interval=None,
        logger=library_log,
    )
