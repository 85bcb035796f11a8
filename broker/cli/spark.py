"""``broker spark route``: drain a stream queue's backlog on Apache Spark.

The same routing core as ``broker serve``, run in Spark tasks over partitions
of the backlog that commit in order, with results identical to the service's (see
``broker.spark``). Locally it runs on ``local[*]``; on a cluster, pass the
master URL. PySpark is imported only by this command.
"""

from __future__ import annotations

import argparse
import sys

from broker.bench.options import positive
from broker.cli.context import EXIT_MQ_ERROR, Context
from queues.errors import MQError
from queues.reasons import Reason

DEFAULT_LEASE_SECONDS = 60  # broker.store.leases.DEFAULT_LEASE_MS, without loading the store


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    spark = commands.add_parser("spark", help="route large backlogs on Apache Spark")
    sub = spark.add_subparsers(dest="spark_command", required=True, metavar="COMMAND")
    route = sub.add_parser(
        "route",
        help="route a stream queue's backlog on Spark, with the service's exact results",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # Also accepted after the subcommand, as the documentation writes it; SUPPRESS keeps a
    # --db given before it.
    route.add_argument("--db", metavar="URL", default=argparse.SUPPRESS, help="database URL")
    route.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
    route.add_argument(
        "--partitions",
        type=positive,
        help="partitions, each whole service batches in get order (default about 10,000 messages each)",
    )
    route.add_argument(
        "--batch-size",
        type=positive,
        help="the routing service's batch size (default the batch_size setting): dead letters "
        "are ordered as the service orders them within a batch of this size",
    )
    route.add_argument(
        "--stream", metavar="QUEUE", help="the stream queue to drain (default SYSTEM.BROKER.DEFAULT.STREAM)"
    )
    route.add_argument(
        "--lease-seconds",
        type=positive,
        default=DEFAULT_LEASE_SECONDS,
        help="how long the stream stays leased to a job that stops renewing it, e.g. killed "
        "(default 60): routing services leave the stream alone until then",
    )
    route.add_argument("--json", action="store_true", help="print the summary as JSON")
    route.set_defaults(handler=run)


def run(ctx: Context) -> None:
    # Imported here: PySpark takes seconds to import and no other command needs it.
    try:
        from py4j.protocol import Py4JError
        from pyspark.errors import PySparkException
    except ImportError as exc:
        print(
            f"broker spark route needs PySpark ({exc.name} is missing): pip install 'wmq-psc-broker[spark]', "
            "with Java 17 and the JDBC drivers (README, Spark pipeline)",
            file=sys.stderr,
        )
        raise SystemExit(EXIT_MQ_ERROR) from None

    import migrations
    from broker.core.system import DEFAULT_STREAM
    from broker.spark import job

    args = ctx.args
    stream = args.stream or DEFAULT_STREAM
    qm = ctx.qm
    if not migrations.is_at_head(qm.engine):
        raise MQError(
            Reason.MQRC_Q_MGR_NOT_AVAILABLE,
            f"the database is at schema revision {migrations.current(qm.engine)}, "
            f"this release needs {migrations.head()}: run 'broker db upgrade'",
        )
    job.check_stream(qm, ctx.settings, stream)
    spark = job.spark_session(args.master)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        options = job.JobOptions(stream, args.partitions, lease_ms=args.lease_seconds * 1000)
        summary = job.run(spark, qm, ctx.settings, options)
    except (PySparkException, Py4JError) as exc:
        print(f"the Spark job failed: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_MQ_ERROR) from None
    finally:
        spark.stop()
    ctx.emit(summary.as_dict(), summary.text())
