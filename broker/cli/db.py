"""``broker db``: bring a database to the schema this release needs."""

from __future__ import annotations

import argparse

from broker.cli.context import Context


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    db = commands.add_parser("db", help="database schema (Alembic migrations)")
    sub = db.add_subparsers(dest="db_command", required=True, metavar="COMMAND")
    up = sub.add_parser(
        "upgrade", help="migrate to the newest schema, name the queue manager and define the broker's queues"
    )
    up.add_argument("revision", nargs="?", default="head")
    up.set_defaults(handler=upgrade, creates_database=True)
    down = sub.add_parser("downgrade", help="migrate down to REVISION ('base' empties the database)")
    down.add_argument("revision")
    down.set_defaults(handler=downgrade)
    cur = sub.add_parser("current", help="show the schema revision and the newest one known")
    cur.set_defaults(handler=current)


def upgrade(ctx: Context) -> None:
    from sqlalchemy.engine import make_url

    import migrations
    from broker.service.config import broker_config
    from broker.service.provision import ensure_system_queues
    from queues import QueueManager

    engine = ctx.engine()
    if ctx.args.revision == "head":
        name = ctx.prepare_database()
        # the broker's own queues too, so that commands can be sent before it first starts
        ensure_system_queues(ctx.qm, broker_config(name, ctx.settings).streams)
    else:
        migrations.upgrade(engine, ctx.args.revision)
    # str() of a URL masks its password, which has no business on a terminal.
    ctx.emit(
        {"revision": migrations.current(engine), "qmgr": QueueManager.stored_name(engine)},
        f"database at revision {migrations.current(engine)} ({make_url(ctx.settings.database_url)})",
    )


def downgrade(ctx: Context) -> None:
    import migrations

    engine = ctx.engine()
    migrations.downgrade(engine, ctx.args.revision)
    ctx.emit({"revision": migrations.current(engine)}, f"database at revision {migrations.current(engine)}")


def current(ctx: Context) -> None:
    import migrations

    engine = ctx.engine()
    now, head = migrations.current(engine), migrations.head()
    ctx.emit({"current": now, "head": head}, f"current {now or '(empty)'}, head {head}")
