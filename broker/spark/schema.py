"""Tables of the Spark pipeline: the stream lease and the job's staging area.

``psb_leases`` keeps one routing service and one Spark job from both routing a
stream queue (see ``broker.spark.lease``). The staging tables hold what a job's
tasks computed until the final merge makes it visible in one transaction; they
are keyed by job, so a task attempt that runs twice writes nothing twice and a
dead job's leftovers are told apart from a live one's. Nothing outside the
pipeline reads them.

On PostgreSQL the migration creates the staging tables UNLOGGED: they are
rewritten by every run, are worthless after a crash (the job checks that every
partition is staged before it merges, and a rerun recomputes), and skipping the
write-ahead log halves what staging costs the database. SQLAlchemy models have
no per-dialect prefix, so the models below say nothing of it (Alembic's
comparison does not look at it either).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Integer,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
)

from queues.schema import MESSAGE_COLUMNS, NAMING, messages

metadata = MetaData(naming_convention=NAMING)

leases = Table(
    "psb_leases",
    metadata,
    Column("resource", String(96), primary_key=True),  # e.g. stream:SYSTEM.BROKER.DEFAULT.STREAM
    Column("owner", String(96), nullable=False),  # "" when free
    Column("until", BigInteger, nullable=False),  # epoch ms; the lease lapses after it
)

runs = Table(
    "psb_spark_runs",
    metadata,
    Column("job", String(32), primary_key=True),
    Column("stream", String(48), nullable=False),
    Column("watermark", BigInteger, nullable=False),  # the backlog is the stream's rows with id <= it
    Column("partitions", Integer, nullable=False),
    Column("started_at", BigInteger, nullable=False),
)

# One row per staged partition: written in the same transaction as the partition's rows,
# first, so that a second attempt of the same partition finds it and writes nothing.
parts = Table(
    "psb_spark_parts",
    metadata,
    Column("job", String(32), primary_key=True),
    Column("part", Integer, primary_key=True),
    Column("rows_read", BigInteger, nullable=False),  # backlog rows the partition read, expired included
    Column("messages", BigInteger, nullable=False),  # of which routed
    Column("deliveries", BigInteger, nullable=False),
    Column("replies", BigInteger, nullable=False),
    Column("forwards", BigInteger, nullable=False),
    Column("dead_letters", BigInteger, nullable=False),
    Column("staged", BigInteger, nullable=False),  # message rows staged
    Column("route_us", BigInteger, nullable=False),  # time spent reading and routing
    Column("stage_us", BigInteger, nullable=False),  # time spent writing the staged rows
)

# A message row as the final merge inserts it into mq_messages, keyed by (job, the input's
# place in the service's get order, the effect's index in its outcome).
puts = Table(
    "psb_spark_puts",
    metadata,
    Column("job", String(32), primary_key=True),
    Column("seq", BigInteger, primary_key=True, autoincrement=False),
    Column("idx", Integer, primary_key=True, autoincrement=False),
    # 0: dead-lettered as the engine decided (the service writes these first in a batch),
    # 1: a put, or a put that failed and went to the dead-letter queue instead.
    Column("phase", SmallInteger, nullable=False),
    # Priority and persistence as the engine asked, before the queue's defaults resolved them:
    # a delivery that overflows its queue at the merge is dead-lettered from these.
    Column("asked_priority", SmallInteger, nullable=False),
    Column("asked_persistence", SmallInteger, nullable=False),
    *(Column(c.name, c.type, nullable=c.nullable) for c in messages.columns if c.name in MESSAGE_COLUMNS),
    # Rows in key order: the merge reads a job's puts in (job, seq, idx) order (migration 0009).
    sqlite_with_rowid=False,
)

# Retained publications set by the backlog: the publication is the input message itself.
retained = Table(
    "psb_spark_retained",
    metadata,
    Column("job", String(32), primary_key=True),
    Column("seq", BigInteger, primary_key=True, autoincrement=False),
    Column("idx", Integer, primary_key=True, autoincrement=False),
    Column("sub_point", Text, nullable=False),
    Column("topic", Text, nullable=False),
)

# DeletePub commands: their outcome depends on the retained store at their place in the
# sequence, so the merge routes them.
deferred = Table(
    "psb_spark_deferred",
    metadata,
    Column("job", String(32), primary_key=True),
    Column("seq", BigInteger, primary_key=True, autoincrement=False),
)

STAGING = (puts, retained, deferred, parts, runs)
