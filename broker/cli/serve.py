"""``broker serve``: make the database ready and run the routing service (and, with
``--api``, the admin REST API in the same process)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from broker.cli.context import Context

if TYPE_CHECKING:
    from broker.service.mqtt import MqttThread
    from broker.service.router import RoutingService


def add_listen_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", help="address the API listens on (default api_host, 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port the API listens on (default api_port, 8080)")


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
    serve.add_argument("--api", action="store_true", help="also serve the admin REST API (see 'broker api')")
    add_listen_flags(serve)
    serve.set_defaults(handler=run)


def run(ctx: Context) -> None:
    from broker.service import router_pool
    from broker.service.provision import prepare_database
    from broker.service.router import RoutingService

    router_pool.check(ctx.settings)
    prepare_database(ctx.engine(), ctx.settings.qmgr_name)
    service = RoutingService(ctx.qm, ctx.settings)
    pool = router_pool.RouterPool(ctx.settings)
    pool.start()
    listener = None
    try:
        listener = _mqtt(ctx, service)
        _serve(ctx, service)
    finally:
        if listener is not None:
            listener.stop()
        pool.stop()


def _mqtt(ctx: Context, service: RoutingService) -> MqttThread | None:
    """The MQTT listener on its own thread beside the routing loop, when configured."""
    if not ctx.settings.mqtt_listen:
        return None
    from broker.service.config import mqtt_address
    from broker.service.mqtt import MqttThread

    host, port = mqtt_address(ctx.settings.mqtt_listen)
    listener = MqttThread(ctx.qm, ctx.settings, host, port, service.metrics, failed=service.stop)
    listener.start()
    return listener


def _serve(ctx: Context, service: RoutingService) -> None:
    if not ctx.args.api:
        service.install_signal_handlers()
        service.run()
        return
    # Imported here: FastAPI and uvicorn would add half a second to every other command.
    from admin_api import create_app
    from admin_api.server import serve

    app = create_app(ctx.qm, ctx.settings, metrics=service.metrics, started_at=service.started_at)
    settings = ctx.settings
    serve(app, ctx.args.host or settings.api_host, ctx.args.port or settings.api_port, router=service)
