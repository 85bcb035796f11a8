"""Tables of the Spark pipeline: the stream lease, the runs and their partitions.

``psb_leases`` keeps one routing service and one Spark job from both routing a
stream queue (see ``broker.store.leases``). ``psb_spark_runs`` records the job
running on a stream; ``psb_spark_parts`` has a row for every partition it has
committed, written in the partition's own transaction (``broker.spark.commit``),
so that a second attempt of a partition writes nothing and partition ``k + 1``
knows when its turn has come. Nothing outside the pipeline reads them.

On PostgreSQL ``psb_spark_runs`` is UNLOGGED (migration 0006): a crash ends the
run anyway. The markers are logged (migration 0012): they stand beside the
deliveries their transaction made.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Integer, MetaData, String, Table

from queues.schema import NAMING

metadata = MetaData(naming_convention=NAMING)

runs = Table(
    "psb_spark_runs",
    metadata,
    Column("job", String(32), primary_key=True),
    Column("stream", String(48), nullable=False),
    Column("watermark", BigInteger, nullable=False),  # the backlog is the stream's rows with id <= it
    Column("partitions", Integer, nullable=False),
    Column("started_at", BigInteger, nullable=False),
)

# One row per committed partition, inserted first in the partition's transaction.
parts = Table(
    "psb_spark_parts",
    metadata,
    Column("job", String(32), primary_key=True),
    Column("part", Integer, primary_key=True),
    *(
        Column(name, BigInteger, nullable=False)
        for name in (
            "rows_read",  # backlog messages it consumed, expired ones included
            "messages",  # of which routed
            "deliveries",
            "replies",
            "forwards",
            "dead_letters",
            "queue_full",
            "written",  # messages put on all queues
            "route_us",
            "wait_us",
            "write_us",
        )
    ),
)

RUN_TABLES = (parts, runs)
