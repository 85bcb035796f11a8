"""The ``broker`` command: administration, messaging and the broker service.

Global options (``--db``, ``--qmgr``, ``--config``) override the environment
and the configuration file; see ``broker.service.config``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from broker.cli import (
    admin,
    api,
    bench,
    config,
    db,
    messages,
    mqtt,
    network,
    pubsub,
    queues,
    serve,
    spark,
    tokens,
)
from broker.cli.context import EXIT_MQ_ERROR, EXIT_OK, EXIT_USAGE, Context, mq_errors
from broker.service import logs
from broker.service.config import ConfigError

EXIT_INTERRUPTED = 130  # as a shell reports SIGINT

MODULES = (db, queues, messages, serve, api, pubsub, admin, network, mqtt, config, spark, bench, tokens)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="broker",
        description="WebSphere MQ-compatible publish/subscribe broker over SQL queues.",
    )
    parser.add_argument("--db", metavar="URL", help="database URL (default sqlite:///broker.db)")
    parser.add_argument("--qmgr", metavar="NAME", help="queue manager name (default QM1)")
    parser.add_argument("--config", metavar="FILE", help="TOML settings file (default ./broker.toml)")
    parser.add_argument("--log-level", metavar="LEVEL", help="DEBUG, INFO, WARNING or ERROR")
    parser.add_argument(
        "--log-format",
        choices=("auto", "json", "text"),
        help="log lines: auto (text on a terminal), json, text",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in MODULES:
        module.register(commands)
    _json_everywhere(commands)
    return parser


def _json_everywhere(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Every command that answers takes ``--json``, so scripts never parse the text."""
    for name, parser in commands.choices.items():
        nested = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if name in ("bench", "serve", "api"):  # they print figures or logs, or take their own options
            continue
        if nested:
            _json_everywhere(nested[0])
        elif "--json" not in parser._option_string_actions:
            parser.add_argument("--json", action="store_true", help="print JSON")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    ctx = Context(args, process=argv is None)
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
    except BrokenPipeError:
        # The reader went away (``broker queue list | head -2``): nothing more can be written.
        # It had what it wanted, unless a message was being got (``broker get Q | head``),
        # which went back to its queue with the unit of work.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        if not getattr(args, "gets", False):
            return EXIT_OK
        print(
            "the output was closed before all of it was written (a message being got stays on its queue)",
            file=sys.stderr,
        )
        return EXIT_MQ_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:  # one line, never a traceback; the traceback goes to the log at DEBUG
        logging.getLogger("broker.cli").debug("command failed", exc_info=exc)
        print(f"{type(exc).__name__}: {exc} (--log-level DEBUG shows where)", file=sys.stderr)
        return EXIT_MQ_ERROR
    finally:
        ctx.close()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
