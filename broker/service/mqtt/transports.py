"""What carries MQTT bytes to the listener: plain TCP, TLS, and WebSockets with or without TLS.

Each transport hands the listener every client connection as a
:class:`~broker.service.mqtt.streams.Stream` (bytes in, bytes out, the peer's address and the
principal its client certificate names), and the listener serves them all through one code path
(:class:`~broker.service.mqtt.listener.Connection`): sessions, authority and the topic tree never
depend on how a client is connected.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple, cast

from broker.protocol import proxy
from broker.service.config import ConfigError, Settings, mqtt_address
from broker.service.listening import cannot_listen
from broker.service.mqtt.admission import Admission
from broker.service.mqtt.streams import WEBSOCKET_PATH, Accept, Server, Sink, peer_address, peer_principal
from broker.service.tls import server_context

log = logging.getLogger("broker.mqtt")

BACKLOG = 4096  # pending connections: a fleet reconnecting at once after a restart
HANDSHAKE_SECONDS = 10.0  # a TLS handshake (or a PROXY header) longer than this ends its connection
PROXY_PEEK_SECONDS = 0.005  # between two looks at a PROXY header that has not all come yet
ACCEPT_RETRY_SECONDS = 0.1
# The most one read of a connection takes (asyncio's own is 256 KiB): what the listener's input
# bounds may be overshot by (broker.service.mqtt.intake).
READ_SIZE = 16 * 1024


class SocketStream(asyncio.BufferedProtocol):
    """A TCP connection, encrypted or not, as an asyncio protocol: the event loop's callbacks
    push what arrives into the connection's :class:`Sink` (no reader, writer or task per
    connection: an idle client costs its transport and this). With TLS, asyncio calls
    :meth:`connection_made` once the handshake is done, so the certificate is known.

    Reads go into one buffer of ``READ_SIZE`` bytes shared by every connection of a server,
    which runs on one event loop (asyncio fills it and calls :meth:`buffer_updated` in the same
    callback, and what it holds is copied out there): an idle connection holds no buffer of
    its own."""

    __slots__ = ("_accept", "_carrier", "_reads", "address", "principal", "sink", "transport")

    def __init__(self, accept: Accept, reads: memoryview, address: str | None = None) -> None:
        """``address``: the client's, as a load balancer's PROXY header named it (None: the
        socket's peer)."""
        self._accept = accept
        self._reads = reads
        self.address = address or ""
        self.principal: str | None = None
        self.transport: asyncio.Transport | None = None
        self._carrier: asyncio.BaseTransport | None = None  # the socket's, under TLS's
        self.sink: Sink | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not its subclasses
        self._carrier = getattr(getattr(transport, "_ssl_protocol", None), "_transport", transport)
        self.address = self.address or peer_address(transport.get_extra_info("peername"))
        self.principal = peer_principal(transport.get_extra_info("ssl_object"))
        self.sink = self._accept(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._reads

    def buffer_updated(self, nbytes: int) -> None:
        assert self.sink is not None
        self.sink.received(self._reads[:nbytes].tobytes())

    def connection_lost(self, exc: Exception | None) -> None:
        sink, self.sink = self.sink, None
        _unlink(self._carrier)
        self._carrier = None
        if sink is not None:
            sink.lost("connection closed by the client" if exc is None else f"socket error: {exc}")

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def pause_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def backlog(self) -> int:
        assert self.transport is not None
        return self.transport.get_write_buffer_size()

    def is_closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def _unlink(transport: asyncio.BaseTransport | None) -> None:
    """Leave no reference cycle behind a connection that has ended, for refcounting to free it
    at once: the routing loop paces the cycle collector for its own work (see
    broker.service.collector), and a wave of connections left to it grows memory by some
    kilobytes each. CPython 3.11's selector transport keeps a bound method of itself, its read
    callback (under TLS, the socket's transport beneath asyncio's TLS one); ``None`` is what it
    holds before its first read, and nothing reads once the connection is lost (its socket is
    off the selector by then)."""
    if transport is not None and getattr(transport, "_read_ready_cb", None) is not None:
        # asyncio's private attribute, not in its stubs; tested by tests/.../test_transports.py.
        transport._read_ready_cb = None  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Endpoint:
    """One address the listener serves, and how (``scheme``: mqtt, mqtts, ws or wss); once
    :meth:`bind` has bound it, its listening socket."""

    scheme: str
    host: str
    port: int
    context: ssl.SSLContext | None = None
    sock: socket.socket | None = field(default=None, compare=False, repr=False)
    proxies: tuple[Network, ...] = ()  # load balancers whose connections begin with a PROXY header

    def __str__(self) -> str:
        path = WEBSOCKET_PATH if self.scheme in ("ws", "wss") else ""
        return f"{self.scheme}://{self.host}:{self.port}{path}"

    @property
    def kind(self) -> str:
        """What it serves, in words (``MQTT over TLS``)."""
        return LISTEN_SETTINGS[self.scheme].kind

    def bind(self, *, shared: bool = False) -> Endpoint:
        """This endpoint with its socket bound and listening (its port the one the kernel gave,
        for port 0). A port in use is a ConfigError naming the setting and the flag: ``broker
        serve`` binds every port before anything starts. ``shared``: bound with SO_REUSEPORT,
        so that several listener processes accept on it (the kernel spreads the connections)."""
        try:
            sock = socket.create_server((self.host, self.port), backlog=BACKLOG, reuse_port=shared)
        except OSError as exc:
            listen = LISTEN_SETTINGS[self.scheme]
            raise cannot_listen(str(self), exc, f"the {listen.setting} setting, {listen.flag}") from None
        sock.setblocking(False)
        return replace(self, port=sock.getsockname()[1], sock=sock)

    async def start(
        self, accept: Accept, max_packet_size: int, admission: Admission, *, shared: bool = False
    ) -> Server:
        """Listen (binding now, unless :meth:`bind` did); every connection accepted, as
        ``admission`` allows, is served by ``accept``."""
        sock = (self if self.sock is not None else self.bind(shared=shared)).sock
        assert sock is not None
        if self.scheme in ("ws", "wss"):
            from broker.service.mqtt.websocket import serve  # the websockets library: only if used

            return await serve(accept, sock, self.context, max_packet_size, admission)
        reads = memoryview(bytearray(READ_SIZE))  # the server's connections' (see SocketStream)
        acceptor = Acceptor(
            sock, lambda address: SocketStream(accept, reads, address), self.context, admission, self.proxies
        )
        return acceptor.start()


def bind(endpoints: Sequence[Endpoint], *, shared: bool = False) -> list[Endpoint]:
    """Every endpoint bound (:meth:`Endpoint.bind`); none left open if one cannot be."""
    bound: list[Endpoint] = []
    try:
        for endpoint in endpoints:
            bound.append(endpoint.bind(shared=shared))
    except BaseException:
        close(bound)
        raise
    return bound


def close(endpoints: Sequence[Endpoint]) -> None:
    """Close the sockets of bound endpoints that will not be served."""
    for endpoint in endpoints:
        if endpoint.sock is not None:
            endpoint.sock.close()


class Acceptor:
    """A listening socket whose connections are taken as the listener's :class:`Admission`
    allows (asyncio's own server accepts whatever comes, as fast as it comes); the others wait
    in the kernel's backlog. A TLS handshake that fails, or takes longer than
    ``HANDSHAKE_SECONDS``, ends that connection alone; so does a connection from one of the
    ``proxies`` that does not begin with a PROXY header (read before any TLS, as HAProxy sends
    it), whose client is then known by the address the header names."""

    def __init__(
        self,
        sock: socket.socket,
        protocol: Callable[[str | None], asyncio.BaseProtocol],
        context: ssl.SSLContext | None,
        admission: Admission,
        proxies: tuple[Network, ...] = (),
    ) -> None:
        self.sock = sock
        self.protocol = protocol
        self.context = context
        self.admission = admission
        self.proxies = proxies
        self._task: asyncio.Task[None] | None = None
        self._handshakes: set[asyncio.Task[None]] = set()

    def start(self) -> Acceptor:
        self._task = asyncio.get_running_loop().create_task(self._accept())
        return self

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for handshake in self._handshakes:
            handshake.cancel()
        self.sock.close()

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self.admission.room()
            try:
                connection, _ = await loop.sock_accept(self.sock)
            except OSError as exc:  # out of file descriptors, say: the backlog holds the rest
                self.admission.settled()
                log.warning("mqtt connection not accepted", extra={"error": str(exc)})
                await asyncio.sleep(ACCEPT_RETRY_SECONDS)
                continue
            handshake = loop.create_task(self._serve(connection))
            self._handshakes.add(handshake)
            handshake.add_done_callback(self._handshakes.discard)

    async def _serve(self, connection: socket.socket) -> None:
        """Hand the connection to its protocol (after the TLS handshake, with TLS); if it
        never gets there, it is no longer half-open."""
        loop = asyncio.get_running_loop()
        timeout = HANDSHAKE_SECONDS if self.context is not None else None
        try:
            address = await self._proxied(connection)
            await loop.connect_accepted_socket(
                lambda: self.protocol(address), connection, ssl=self.context, ssl_handshake_timeout=timeout
            )
        except (OSError, ssl.SSLError, TimeoutError):  # the client's doing: the handshake failed
            connection.close()
            self.admission.settled()
        except BaseException as exc:
            connection.close()
            self.admission.settled()
            if not isinstance(exc, Exception):
                raise
            log.exception("mqtt connection not served")

    async def _proxied(self, connection: socket.socket) -> str | None:
        """The client's address, as the PROXY header of a connection from one of the proxies
        names it (None: the connection's own). A connection from a proxy without a valid
        header within ``HANDSHAKE_SECONDS`` raises ConnectionError, logged."""
        if not self.proxies:
            return None
        peer = peer_address(connection.getpeername())
        if not trusted(peer, self.proxies):
            return None
        try:
            return await asyncio.wait_for(read_proxy_header(connection), HANDSHAKE_SECONDS)
        except (proxy.ProxyProtocolError, OSError, TimeoutError) as exc:
            log.warning(
                "mqtt connection refused: no valid PROXY protocol header",
                extra={"address": peer, "error": str(exc) or type(exc).__name__},
            )
            raise ConnectionError(str(exc)) from None


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def proxy_networks(settings: Settings) -> tuple[Network, ...]:
    """The load balancers ``mqtt_proxy_from`` names (a ConfigError for one that is not an
    address or a network)."""
    networks: list[Network] = []
    for text in settings.mqtt_proxy_from:
        try:
            networks.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            raise ConfigError(
                f"setting mqtt_proxy_from={text!r} is not valid: use addresses or networks (10.0.0.0/24)"
            ) from None
    return tuple(networks)


def trusted(address: str, networks: Sequence[Network]) -> bool:
    """Whether the ``host:port`` ``address`` is in one of ``networks``."""
    host = address.rpartition(":")[0].strip("[]") or address
    try:
        ip = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in network for network in networks)


async def read_proxy_header(sock: socket.socket) -> str | None:
    """Read the PROXY header at the start of ``sock`` and nothing after it (what follows is the
    client's, for TLS or MQTT): each look peeks at what has come, and once a whole header is
    there exactly its bytes are taken. Returns the client's ``host:port`` (None: LOCAL)."""
    loop = asyncio.get_running_loop()
    while True:
        await _readable(loop, sock)
        data = sock.recv(proxy.V2_MAX, socket.MSG_PEEK)
        if not data:
            raise ConnectionError("closed before its PROXY protocol header")
        header = proxy.parse(data)
        if header is not None:
            sock.recv(header.length)
            return header.address
        await asyncio.sleep(PROXY_PEEK_SECONDS)  # the rest of the header is on its way


async def _readable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(sock.fileno(), wake)
    try:
        await ready
    finally:
        loop.remove_reader(sock.fileno())


class Listen(NamedTuple):
    """What names a listener's address (the setting, the flag) and what the log calls it."""

    setting: str
    flag: str
    kind: str


# By scheme; the TLS ones share one context.
LISTEN_SETTINGS = {
    "mqtt": Listen("mqtt_listen", "--mqtt", "MQTT"),
    "mqtts": Listen("mqtt_tls_listen", "--mqtt-tls", "MQTT over TLS"),
    "ws": Listen("mqtt_ws_listen", "--mqtt-ws", "MQTT over WebSockets"),
    "wss": Listen("mqtt_wss_listen", "--mqtt-wss", "MQTT over WebSockets and TLS"),
}
SECURE = ("mqtts", "wss")
PROXIED = ("mqtt", "mqtts")  # read by the Acceptor; the WebSocket library reads its own sockets


def endpoints(settings: Settings) -> list[Endpoint]:
    """The MQTT listeners the settings ask for (none: no listener). Every address and the TLS
    files are checked here, at start-up: a ConfigError before anything listens."""
    wanted = {
        scheme: mqtt_address(getattr(settings, name), name)
        for scheme, (name, _, _) in LISTEN_SETTINGS.items()
        if getattr(settings, name)
    }
    context = server_context(settings) if wanted.keys() & set(SECURE) else None
    proxies = proxy_networks(settings)
    return [
        Endpoint(
            scheme,
            host,
            port,
            context if scheme in SECURE else None,
            proxies=proxies if scheme in PROXIED else (),
        )
        for scheme, (host, port) in wanted.items()
    ]
