"""``broker config export`` and ``broker config import``: the broker's configuration as a TOML
file, as IBM MQ's ``dmpmqcfg`` and RabbitMQ's definitions export do (``docs/configuration.md``).

An import checks the whole file first: a file with problems changes nothing, and every problem
is printed on a line of its own with its place in the file (exit code 1). Otherwise it prints
one line per change (``create queue APP.IN``), or ``no changes``; ``--dry-run`` prints the same
and changes nothing. An import is written to the API's audit log, as the token commands are.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from broker.cli.context import EXIT_MQ_ERROR, EXIT_USAGE, Context

if TYPE_CHECKING:
    from broker.admin.config_file import InvalidConfiguration


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    config = commands.add_parser("config", help="export and import the broker's configuration (a TOML file)")
    sub = config.add_subparsers(dest="config_command", required=True, metavar="COMMAND")
    export = sub.add_parser(
        "export",
        help="write the configuration: queues, subscriptions, ACLs, neighbours, MQTT principals",
        description="Writes the configuration as TOML (docs/configuration.md). Link tokens and retained "
        "publications are left out unless asked for; MQTT principals' password hashes are always in.",
    )
    export.add_argument("--retained", action="store_true", help="include the retained publications")
    export.add_argument("--secrets", action="store_true", help="include the neighbours' link tokens")
    export.add_argument("--output", "-o", metavar="FILE", help="write to FILE (default: standard output)")
    export.set_defaults(handler=export_configuration)
    apply = sub.add_parser(
        "import",
        help="apply a configuration file: create and alter what it says",
        description="Checks the whole file, then creates and alters objects to match it. Objects the "
        "file leaves out are left as they are unless --prune, which deletes them (system queues "
        "never). Importing the same file twice changes nothing the second time.",
    )
    apply.add_argument("file", metavar="FILE", help="the file ('-': standard input)")
    apply.add_argument("--dry-run", action="store_true", help="report what would change, change nothing")
    apply.add_argument("--prune", action="store_true", help="delete what the file leaves out")
    apply.set_defaults(handler=import_configuration)


def export_configuration(ctx: Context) -> None:
    from broker.admin import config_backup

    text = config_backup.export_text(ctx.qm, retained=ctx.args.retained, secrets=ctx.args.secrets)
    if ctx.args.output is None:
        ctx.emit({"configuration": text}, text.rstrip("\n"))
        return
    Path(ctx.args.output).write_text(text, encoding="utf-8")
    ctx.emit({"file": ctx.args.output}, f"configuration written to {ctx.args.output}")


def import_configuration(ctx: Context) -> None:
    from broker.admin import config_backup
    from broker.admin.config_file import InvalidConfiguration

    args = ctx.args
    text = _read(args.file)
    try:
        report = config_backup.import_text(ctx.qm, text, dry_run=args.dry_run, prune=args.prune)
    except InvalidConfiguration as exc:
        _print_problems(ctx, args.file, exc)
        raise SystemExit(EXIT_MQ_ERROR) from None
    if report.changes and not args.dry_run:
        _audit(ctx, args.file, report.lines())
    ctx.emit(
        {
            "dry_run": args.dry_run,
            "changes": [change.line() for change in report.changes],
            "left": [change.line() for change in report.left],
        },
        "\n".join(report.lines()),
    )


def _read(path: str) -> str:
    try:
        return sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        print(f"cannot read {path}: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None


def _print_problems(ctx: Context, path: str, exc: InvalidConfiguration) -> None:
    problems = exc.problems
    if ctx.json:
        found = [{"place": p.place, "message": p.message, "line": p.line} for p in problems]
        json.dump({"file": path, "problems": found}, sys.stderr)
        sys.stderr.write("\n")
        return
    print(f"{path}: {len(problems)} problem(s), nothing changed:", file=sys.stderr)
    for problem in problems:
        print(f"{path}: {problem}", file=sys.stderr)


def _audit(ctx: Context, path: str, lines: list[str]) -> None:
    ctx.audit("config import", {"file": path, "prune": ctx.args.prune, "changes": lines})
