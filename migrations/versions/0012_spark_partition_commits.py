"""Spark pipeline: partitions commit their own results; the staging tables go.

Until now a job staged every partition's rows and one final transaction copied
them into the queues, a serial merge that set how fast a job could be on any
number of cores. Each partition now writes its deliveries into ``mq_messages``
itself, in partition order, in one transaction with its marker and the removal
of its backlog (``broker.spark.commit``). The marker table is logged now: it
stands beside deliveries that are.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_MESSAGE_COLUMNS = (
    ("queue", sa.String(48), False),
    ("priority", sa.SmallInteger(), False),
    ("expires_at", sa.BigInteger(), True),
    ("msg_id", sa.LargeBinary(24), False),
    ("correl_id", sa.LargeBinary(24), False),
    ("format", sa.String(8), False),
    ("encoding", sa.Integer(), False),
    ("ccsid", sa.Integer(), False),
    ("msg_type", sa.Integer(), False),
    ("report", sa.Integer(), False),
    ("reply_to_q", sa.String(48), False),
    ("reply_to_qmgr", sa.String(48), False),
    ("user_id", sa.String(12), False),
    ("persistence", sa.SmallInteger(), False),
    ("expiry", sa.Integer(), False),
    ("put_appl_type", sa.Integer(), False),
    ("put_appl_name", sa.String(28), False),
    ("put_date", sa.String(8), False),
    ("put_time", sa.String(8), False),
    ("backout_count", sa.Integer(), False),
    ("put_at", sa.BigInteger(), False),
    ("body", sa.LargeBinary(), False),
    ("correl_key", sa.LargeBinary(24), True),
)
_PARTS = ("rows_read", "messages", "deliveries", "replies", "forwards", "dead_letters")


def _parts(*counters: str, unlogged: bool) -> None:
    prefixes = ["UNLOGGED"] if unlogged and op.get_bind().dialect.name == "postgresql" else []
    op.create_table(
        "psb_spark_parts",
        sa.Column("job", sa.String(32), nullable=False),
        sa.Column("part", sa.Integer(), nullable=False),
        *(sa.Column(name, sa.BigInteger(), nullable=False) for name in counters),
        sa.PrimaryKeyConstraint("job", "part", name="pk_psb_spark_parts"),
        prefixes=prefixes,
    )


def upgrade() -> None:
    for name in ("psb_spark_deferred", "psb_spark_retained", "psb_spark_puts", "psb_spark_parts"):
        op.drop_table(name)
    op.execute("DELETE FROM psb_spark_runs")  # a run staged by the old release cannot be finished
    _parts(*_PARTS, "queue_full", "written", "route_us", "wait_us", "write_us", unlogged=False)


def downgrade() -> None:
    op.drop_table("psb_spark_parts")
    op.execute("DELETE FROM psb_spark_runs")
    _parts(*_PARTS, "staged", "route_us", "stage_us", unlogged=True)
    postgresql = op.get_bind().dialect.name == "postgresql"
    unlogged = ["UNLOGGED"] if postgresql else []
    # As 0009 left it: in key order on SQLite (a Table object, since op.create_table drops
    # the dialect option).
    puts = sa.Table(
        "psb_spark_puts",
        sa.MetaData(),
        sa.Column("job", sa.String(32), nullable=False),
        sa.Column("seq", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("idx", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("phase", sa.SmallInteger(), nullable=False),
        sa.Column("asked_priority", sa.SmallInteger(), nullable=False),
        sa.Column("asked_persistence", sa.SmallInteger(), nullable=False),
        *(sa.Column(name, kind, nullable=nullable) for name, kind, nullable in _MESSAGE_COLUMNS),
        sa.PrimaryKeyConstraint("job", "seq", "idx", name="pk_psb_spark_puts"),
        prefixes=unlogged,
        sqlite_with_rowid=False,
    )
    puts.create(op.get_bind())
    op.create_table(
        "psb_spark_retained",
        sa.Column("job", sa.String(32), nullable=False),
        sa.Column("seq", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("idx", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("sub_point", sa.Text(), nullable=False),
        sa.Column("topic", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("job", "seq", "idx", name="pk_psb_spark_retained"),
        prefixes=unlogged,
    )
    op.create_table(
        "psb_spark_deferred",
        sa.Column("job", sa.String(32), nullable=False),
        sa.Column("seq", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.PrimaryKeyConstraint("job", "seq", name="pk_psb_spark_deferred"),
        prefixes=unlogged,
    )
