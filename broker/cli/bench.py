"""``broker bench``: the performance figures a release is judged by, one subcommand each.

Benchmarks bring their own throw-away databases, so they ignore ``--db``. Each keeps its
options in its own module (``broker.bench``), read only when it runs: the parser here
passes everything after the benchmark's name on to it, ``--help`` included.
"""

from __future__ import annotations

import argparse

from broker.bench import BENCHMARKS
from broker.cli.context import Context


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = commands.add_parser("bench", help="benchmarks (not tests: they print figures)")
    sub = bench.add_subparsers(dest="bench_command", required=True, metavar="BENCHMARK")
    for name, summary in BENCHMARKS.items():
        # No option of its own (prefix_chars that no option uses): every word goes to the benchmark.
        parser = sub.add_parser(name, help=summary, add_help=False, prefix_chars="\x00")
        parser.add_argument("options", nargs=argparse.REMAINDER, help="see broker bench NAME --help")
        parser.set_defaults(handler=run)


def run(ctx: Context) -> None:
    from broker.bench import main

    main(ctx.args.bench_command, ctx.args.options)
