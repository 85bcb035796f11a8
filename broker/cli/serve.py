"""``broker serve``: make the database ready and run the routing service (and, with
``--api``, the admin REST API in the same process)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from broker.cli.context import Context

if TYPE_CHECKING:
    import socket
    import ssl

    from broker.service.mqtt import Endpoint, MqttThread
    from broker.service.router import RoutingService
    from broker.service.router_pool import ProcessPool


def add_listen_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", help="address the API listens on (default api_host, 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port the API listens on (default api_port, 8080)")
    parser.add_argument(
        "--api-tls",
        action="store_const",
        const=True,
        help="serve the API over HTTPS with the TLS certificate (default api_tls)",
    )
    parser.add_argument("--tls-cert", metavar="FILE", help="the server's PEM certificate chain (tls_cert)")
    parser.add_argument("--tls-key", metavar="FILE", help="its unencrypted PEM private key (tls_key)")
    parser.add_argument(
        "--tls-client-ca",
        metavar="FILE",
        help="PEM CA certificates that client certificates are verified against (tls_client_ca)",
    )


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = commands.add_parser(
        "serve",
        help="run the broker: routes command messages until SIGTERM/SIGINT",
        description="Migrates the database if needed, defines the system queues and routes "
        "publications and subscriptions until stopped; with --api also serves the admin REST API.",
    )
    serve.add_argument("--batch-size", type=int, help="messages per unit of work (default 500)")
    serve.add_argument(
        "--stream",
        action="append",
        dest="streams",
        metavar="QUEUE[=SUBPOINT]",
        help="a stream queue to serve (repeatable; default SYSTEM.BROKER.DEFAULT.STREAM)",
    )
    serve.add_argument("--routers", type=int, help="routing processes sharing the work (default 1)")
    serve.add_argument(
        "--mqtt",
        dest="mqtt_listen",
        metavar="[HOST:]PORT",
        help="also serve MQTT 3.1/3.1.1 clients there (default mqtt_listen; host 127.0.0.1)",
    )
    for flag, setting, what in (
        ("--mqtt-tls", "mqtt_tls_listen", "MQTT over TLS (8883 by convention)"),
        ("--mqtt-ws", "mqtt_ws_listen", "MQTT over WebSockets at /mqtt"),
        ("--mqtt-wss", "mqtt_wss_listen", "MQTT over WebSockets and TLS at /mqtt"),
    ):
        serve.add_argument(flag, dest=setting, metavar="[HOST:]PORT", help=f"also serve {what} ({setting})")
    serve.add_argument(
        "--mqtt-processes",
        dest="mqtt_processes",
        type=int,
        help="MQTT listener processes sharing the MQTT ports and sessions (default mqtt_processes, 1)",
    )
    serve.add_argument("--api", action="store_true", help="also serve the admin REST API (see 'broker api')")
    add_listen_flags(serve)
    serve.set_defaults(handler=run, creates_database=True)


def run(ctx: Context) -> None:
    from broker.cli import allocator
    from broker.service import router_pool
    from broker.service.mqtt import transports

    if ctx.process:  # a caller's main(argv) is not replaced
        allocator.adopt(ctx.settings.allocator)  # may start this process again, on jemalloc
    router_pool.check(ctx.settings)
    # Addresses and TLS files are checked, and every port bound, before anything starts: one
    # line if one is wrong or taken.
    endpoints = transports.endpoints(ctx.settings)
    tls = api_tls(ctx) if ctx.args.api else None
    endpoints = transports.bind(endpoints, shared=ctx.settings.mqtt_processes > 1)
    api: socket.socket | None = None
    try:
        api = api_socket(ctx) if ctx.args.api else None
        _run(ctx, endpoints, api, tls)
    finally:  # those that were served are closed already
        transports.close(endpoints)
        if api is not None:
            api.close()


def api_socket(ctx: Context) -> socket.socket:
    """The admin API's listening socket, bound (``--host``/``--port``, else the settings)."""
    from admin_api.server import listening_socket  # uvicorn: only for the API

    return listening_socket(ctx.args.host or ctx.settings.api_host, ctx.args.port or ctx.settings.api_port)


def _run(
    ctx: Context, endpoints: list[Endpoint], api: socket.socket | None, tls: ssl.SSLContext | None
) -> None:
    """Make the database ready, then route (and serve MQTT and the API) until stopped."""
    from broker.service import router_pool
    from broker.service.router import RoutingService

    ctx.prepare_database()
    service = RoutingService(ctx.qm, ctx.settings)
    pool = router_pool.RouterPool(ctx.settings)
    pool.start()
    listener = listeners = None
    try:
        listener = _mqtt(ctx, service, endpoints)
        listeners = _mqtt_processes(ctx, endpoints)
        _serve(ctx, service, api, tls)
    finally:
        if listeners is not None:
            listeners.stop()
        if listener is not None:
            listener.stop()
        pool.stop()


def _mqtt(ctx: Context, service: RoutingService, endpoints: list[Endpoint]) -> MqttThread | None:
    """The MQTT listener on its own thread beside the routing loop, when configured (the
    primary one, started before any other listener process: it releases its node's earlier
    run's sessions)."""
    if not endpoints:
        return None
    from broker.service.mqtt import MqttThread

    shared = ctx.settings.mqtt_processes > 1
    listener = MqttThread(
        ctx.qm, ctx.settings, endpoints, service.metrics, failed=service.stop, shared=shared
    )
    listener.start()
    return listener


def _mqtt_processes(ctx: Context, endpoints: list[Endpoint]) -> ProcessPool | None:
    """``mqtt_processes - 1`` more listener processes on the same ports."""
    if not endpoints or ctx.settings.mqtt_processes < 2:
        return None
    from broker.service.mqtt.processes import listen
    from broker.service.router_pool import ProcessPool

    pool = ProcessPool(ctx.settings, ctx.settings.mqtt_processes, listen, "mqtt listener")
    pool.start()
    return pool


def api_tls(ctx: Context) -> ssl.SSLContext | None:
    """The admin API's TLS context when ``api_tls`` is set (the one MQTT over TLS uses)."""
    if not ctx.settings.api_tls:
        return None
    from broker.service.tls import server_context

    return server_context(ctx.settings)


def _serve(
    ctx: Context, service: RoutingService, api: socket.socket | None, tls: ssl.SSLContext | None
) -> None:
    if api is None:
        service.install_signal_handlers()
        service.run()
        return
    # Imported here: FastAPI and uvicorn would add half a second to every other command.
    from admin_api import create_app
    from admin_api.server import serve

    app = create_app(ctx.qm, ctx.settings, metrics=service.metrics, started_at=service.started_at)
    serve(app, api, router=service, tls=tls, event_loop=ctx.settings.event_loop)
