"""``broker api``: the admin REST API alone, beside routers running elsewhere.

Several API processes may serve one PostgreSQL database; none of them routes.
The database must already be migrated (``broker serve`` or ``broker db upgrade``
does it): an API process never changes the schema under running routers.
"""

from __future__ import annotations

import argparse

from broker.cli.context import Context
from broker.cli.serve import add_listen_flags, api_socket, api_tls


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    api = commands.add_parser(
        "api",
        help="serve the admin REST API (without routing) until SIGTERM/SIGINT",
        description="Serves the admin REST API (OpenAPI at /docs) for the database of --db; "
        "routing needs a 'broker serve' somewhere.",
    )
    add_listen_flags(api)
    api.set_defaults(handler=run)


def run(ctx: Context) -> None:
    # Imported here: FastAPI and uvicorn would add half a second to every other command.
    from admin_api import create_app
    from admin_api.server import serve

    tls = api_tls(ctx)
    app = create_app(ctx.qm, ctx.settings)
    serve(app, api_socket(ctx), tls=tls, event_loop=ctx.settings.event_loop)
