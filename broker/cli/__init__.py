"""The ``broker`` command: administration, messaging and the broker service.

Global options (``--db``, ``--qmgr``, ``--config``) override the environment
and the configuration file; see ``broker.config``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from broker import logs
from broker.cli import admin, api, bench, db, messages, network, pubsub, queues, serve, spark, tokens
from broker.cli.context import EXIT_OK, EXIT_USAGE, Context, mq_errors
from broker.config import ConfigError

MODULES = (db, queues, messages, serve, api, pubsub, admin, network, spark, bench, tokens)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="broker",
        description="WebSphere MQ-compatible publish/subscribe broker over SQL queues.",
    )
    parser.add_argument("--db", metavar="URL", help="database URL (default sqlite:///broker.db)")
    parser.add_argument("--qmgr", metavar="NAME", help="queue manager name (default QM1)")
    parser.add_argument("--config", metavar="FILE", help="TOML settings file (default ./broker.toml)")
    parser.add_argument("--log-level", metavar="LEVEL", help="DEBUG, INFO, WARNING or ERROR")
    parser.add_argument("--log-format", choices=("json", "text"), help="log line format")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in MODULES:
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    ctx = Context(args)
    try:
        settings = ctx.settings
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    logs.configure(settings.log_level, settings.log_format)
    try:
        with mq_errors(ctx):
            args.handler(ctx)
    except ConfigError as exc:  # a setting only the command itself can check
        print(f"configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        ctx.close()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
