"""Spark pipeline: the stream lease and the job's staging tables.

The staging tables are UNLOGGED on PostgreSQL: they hold nothing a crash must
keep (a job merges only when every partition is staged, and a rerun recomputes).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
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
)


def _staging(name: str, *columns: sa.Column, key: tuple[str, ...]) -> None:
    unlogged = ["UNLOGGED"] if op.get_bind().dialect.name == "postgresql" else []
    op.create_table(name, *columns, sa.PrimaryKeyConstraint(*key, name=f"pk_{name}"), prefixes=unlogged)


def upgrade() -> None:
    op.create_table(
        "psb_leases",
        sa.Column("resource", sa.String(96), nullable=False),
        sa.Column("owner", sa.String(96), nullable=False),
        sa.Column("until", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("resource", name="pk_psb_leases"),
    )
    _staging(
        "psb_spark_runs",
        sa.Column("job", sa.String(32), nullable=False),
        sa.Column("stream", sa.String(48), nullable=False),
        sa.Column("watermark", sa.BigInteger(), nullable=False),
        sa.Column("partitions", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        key=("job",),
    )
    _staging(
        "psb_spark_parts",
        sa.Column("job", sa.String(32), nullable=False),
        sa.Column("part", sa.Integer(), nullable=False),
        *(
            sa.Column(name, sa.BigInteger(), nullable=False)
            for name in (
                "rows_read",
                "messages",
                "deliveries",
                "replies",
                "forwards",
                "dead_letters",
                "staged",
                "route_us",
                "stage_us",
            )
        ),
        key=("job", "part"),
    )
    _staging(
        "psb_spark_puts",
        sa.Column("job", sa.String(32), nullable=False),
        sa.Column("seq", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("idx", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("phase", sa.SmallInteger(), nullable=False),
        sa.Column("asked_priority", sa.SmallInteger(), nullable=False),
        sa.Column("asked_persistence", sa.SmallInteger(), nullable=False),
        *(sa.Column(name, kind, nullable=nullable) for name, kind, nullable in _MESSAGE_COLUMNS),
        key=("job", "seq", "idx"),
    )
    _staging(
        "psb_spark_retained",
        sa.Column("job", sa.String(32), nullable=False),
        sa.Column("seq", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("idx", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("sub_point", sa.Text(), nullable=False),
        sa.Column("topic", sa.Text(), nullable=False),
        key=("job", "seq", "idx"),
    )
    _staging(
        "psb_spark_deferred",
        sa.Column("job", sa.String(32), nullable=False),
        sa.Column("seq", sa.BigInteger(), autoincrement=False, nullable=False),
        key=("job", "seq"),
    )


def downgrade() -> None:
    for name in (
        "psb_spark_deferred",
        "psb_spark_retained",
        "psb_spark_puts",
        "psb_spark_parts",
        "psb_spark_runs",
        "psb_leases",
    ):
        op.drop_table(name)
