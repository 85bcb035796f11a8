"""Serving the admin API with uvicorn: alone (``broker api``) or beside a router (``broker serve --api``).

uvicorn runs in the main thread, where signals arrive; the router, when there
is one, runs its loop in a second thread. SIGTERM or SIGINT make uvicorn finish
the requests in hand and shut the app down; uvicorn then hands the signal back
to the handler installed here, which stops the router after its current batch.
A router that crashes stops uvicorn too, and its error is raised again here, so
the process never serves an API in front of a dead broker.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from collections.abc import Callable

import uvicorn
from fastapi import FastAPI

from broker.service.event_loop import uvicorn_loop
from broker.service.listening import cannot_listen
from broker.service.router import RoutingService
from broker.service.signals import on_stop_signals

log = logging.getLogger("admin_api")

ROUTER_JOIN_SECONDS = 60.0


class RouterThread:
    """``RoutingService.run`` in a thread, with its failure kept for the main thread."""

    def __init__(self, service: RoutingService, on_failure: Callable[[], None]) -> None:
        self.service = service
        self.error: BaseException | None = None
        self._on_failure = on_failure
        self._thread = threading.Thread(target=self._run, name="router", daemon=True)

    def _run(self) -> None:
        try:
            self.service.run()
        except BaseException as exc:  # re-raised by the main thread in serve()
            self.error = exc
            self._on_failure()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.service.stop()
        self.service.qm.notifier.announce_everything()  # end its idle wait now
        self._thread.join(ROUTER_JOIN_SECONDS)


def listening_socket(host: str, port: int) -> socket.socket:
    """The API's socket, bound before anything starts: a port in use is one clear error, and
    the broker never logs that it started behind an API that could not. It is made with
    IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets that say so (the connections a
    listening socket accepts inherit its protocol), and without it a small response waits
    for the client's delayed ACK, with or without TLS."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
        )[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen()
        except OSError:
            sock.close()
            raise
        return sock
    except OSError as exc:
        raise cannot_listen(
            f"{host}:{port}", exc, "the api_host and api_port settings, --host and --port"
        ) from None


def _base_url(sock: socket.socket, tls: ssl.SSLContext | None) -> str:
    """``http(s)://host:port`` of the listening ``sock`` (its port the one the kernel gave)."""
    host, port = sock.getsockname()[:2]
    return f"{'https' if tls is not None else 'http'}://{f'[{host}]' if ':' in host else host}:{port}"


def serve(
    app: FastAPI,
    sock: socket.socket,
    *,
    router: RoutingService | None = None,
    tls: ssl.SSLContext | None = None,
    event_loop: str = "uvloop",
) -> None:
    """Serve ``app`` on ``sock`` (:func:`listening_socket`) until SIGTERM/SIGINT (and run
    ``router`` meanwhile, if given); over HTTPS with ``tls`` (``broker.service.tls``: the
    context MQTT over TLS uses, TLS 1.2 and later), on the loop ``event_loop`` names
    (``broker.service.event_loop``). The API's and the console's addresses are logged first:
    uvicorn logs none for a socket it did not bind."""
    base = _base_url(sock, tls)
    log.info("listening", extra={"listener": "admin API", "url": f"{base}/api/v1"})
    log.info("listening", extra={"listener": "web console", "url": f"{base}/"})
    config = uvicorn.Config(
        app,
        log_config=None,
        lifespan="on",
        ssl_context_factory=None if tls is None else lambda *_: tls,
        loop=uvicorn_loop(event_loop),
    )
    server = uvicorn.Server(config)
    if router is None:
        on_stop_signals(lambda: None)  # uvicorn re-raises the signal after its shutdown: end normally
        server.run(sockets=[sock])
        return
    thread = RouterThread(router, on_failure=lambda: setattr(server, "should_exit", True))
    on_stop_signals(router.stop)
    thread.start()
    try:
        server.run(sockets=[sock])
    finally:
        thread.stop()
    if thread.error is not None:
        raise thread.error
