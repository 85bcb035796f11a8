"""``broker bench``: the performance figures a release is judged by, one subcommand each.

Benchmarks bring their own throw-away databases, so they ignore ``--db``.
"""

from __future__ import annotations

import argparse

from broker.bench import api as api_bench
from broker.bench import matching as matching_bench
from broker.bench import network as network_bench
from broker.bench import queues as queue_bench
from broker.bench import route as route_bench
from broker.bench import spark as spark_bench
from broker.cli.context import Context


def _batches(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: batch sizes must be at least 1")
    return sizes


def _databases(text: str) -> tuple[str, ...]:
    kinds = tuple(text.split(","))
    unknown = set(kinds) - set(network_bench.DATABASES)
    if unknown:
        raise argparse.ArgumentTypeError(f"{', '.join(sorted(unknown))}: use sqlite and/or postgresql")
    return kinds


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: at least 1 message")
    return value


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = commands.add_parser("bench", help="benchmarks (not tests: they print figures)")
    sub = bench.add_subparsers(dest="bench_command", required=True, metavar="BENCHMARK")
    queues = sub.add_parser(
        "queues",
        help="put-many and batch get against the raw database ceiling, on SQLite and PostgreSQL",
        description=queue_bench.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    queues.add_argument(
        "--messages", type=_positive, help="messages per cell (default 2,000 at batch 1, else 50,000)"
    )
    queues.add_argument(
        "--batches",
        type=_batches,
        default=queue_bench.DEFAULT_BATCHES,
        metavar="N,N,...",
        help="batch sizes (default 1,100,1000)",
    )
    queues.add_argument(
        "--pg-url",
        default=queue_bench.DEFAULT_PG_URL,
        metavar="URL",
        help="PostgreSQL server on which a throw-away database is created (default the local one)",
    )
    queues.add_argument("--json", action="store_true", help="print JSON")
    queues.set_defaults(handler=run_queues)

    api = sub.add_parser(
        "api",
        help="admin API list/show latency over 1,000,000 subscriptions, and creates per second (PostgreSQL)",
        description=api_bench.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    api.add_argument("--subscriptions", type=_positive, default=api_bench.DEFAULT_SUBSCRIPTIONS)
    api.add_argument("--requests", type=_positive, default=api_bench.DEFAULT_REQUESTS, help="per case")
    api.add_argument("--seconds", type=float, default=api_bench.DEFAULT_SECONDS, help="of creates")
    api.add_argument("--pg-url", default=api_bench.DEFAULT_PG_URL, metavar="URL")
    api.add_argument("--json", action="store_true", help="print JSON")
    api.set_defaults(handler=run_api)

    network = sub.add_parser(
        "network",
        help="publications/s from QMB to subscribers at QMC through QMA, against one broker, and latency",
        description=network_bench.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    network.add_argument("--messages", type=_positive, default=20_000, help="publications in the backlog")
    network.add_argument(
        "--databases",
        type=_databases,
        default=network_bench.DATABASES,
        metavar="KIND,...",
        help="sqlite, postgresql or both (default both)",
    )
    network.add_argument("--pg-url", default=network_bench.DEFAULT_PG_URL, metavar="URL")
    network.add_argument("--batch-size", type=_positive, default=500, help="of every broker and channel")
    network.add_argument("--rate", type=_positive, default=500, help="publications/s of the streaming run")
    network.add_argument("--stream-seconds", type=float, default=10.0, help="of the streaming run")
    network.add_argument("--json", action="store_true", help="print JSON")
    network.set_defaults(handler=run_network)

    # These two keep their options in their modules (``python -m broker.bench.route`` works too).
    for name, module, summary in (
        ("route", route_bench, "routing throughput and latency on SQLite and PostgreSQL against RabbitMQ"),
        ("matching", matching_bench, "topic matching rate and memory at 1,000 and 1,000,000 subscriptions"),
    ):
        raw = argparse.RawDescriptionHelpFormatter
        parser = sub.add_parser(name, help=summary, description=module.__doc__, formatter_class=raw)
        module.add_arguments(parser)
        parser.set_defaults(handler=lambda ctx, command=module.command: command(ctx.args))

    spark = sub.add_parser(
        "spark",
        help="broker spark route on local[1] and local[2] against broker serve, same backlog",
        description=spark_bench.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    spark.add_argument("--messages", type=_positive, default=100_000, help="publications (default 100,000)")
    spark.add_argument("--databases", default=",".join(spark_bench.DATABASES), help="sqlite,postgresql")
    spark.add_argument("--masters", default=",".join(spark_bench.MASTERS), help="local[1],local[2]")
    spark.add_argument("--batch-size", type=_positive, default=500, help="the service's batch size")
    spark.add_argument("--partitions", type=_positive, help="the job's partitions (default per 10,000)")
    spark.add_argument("--pg-url", default=spark_bench.DEFAULT_PG_URL, metavar="URL")
    spark.add_argument("--json", action="store_true", help="print JSON")
    spark.set_defaults(handler=run_spark)


def run_queues(ctx: Context) -> None:
    args = ctx.args
    cells = queue_bench.run(args.batches, messages=args.messages, pg_url=args.pg_url)
    ctx.emit([cell.as_dict() for cell in cells], queue_bench.table(cells))


def run_spark(ctx: Context) -> None:
    args = ctx.args
    tables = spark_bench.run(
        args.messages,
        tuple(args.databases.split(",")),
        tuple(args.masters.split(",")),
        pg_url=args.pg_url,
        batch_size=args.batch_size,
        partitions=args.partitions,
    )
    ctx.emit(tables, spark_bench.report(tables))


def run_api(ctx: Context) -> None:
    args = ctx.args
    report = api_bench.run(
        count=args.subscriptions, requests=args.requests, seconds=args.seconds, pg_url=args.pg_url
    )
    ctx.emit(report.as_dict(), api_bench.table(report))


def run_network(ctx: Context) -> None:
    args = ctx.args
    results = network_bench.run(
        args.messages,
        args.databases,
        pg_url=args.pg_url,
        batch_size=args.batch_size,
        rate=args.rate,
        stream_seconds=args.stream_seconds,
    )
    ctx.emit(results, network_bench.report(results))
