"""Queues: INDXTYPE. Only messages on queues indexed by CorrelId enter that index.

Queues defined before this revision keep an index by CorrelId (INDXTYPE CORRELID, their
messages get their key); new queues default to NONE, as MQ's do.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

KEYED = sa.text("correl_key IS NOT NULL")


def upgrade() -> None:
    with op.batch_alter_table("mq_queues") as batch:
        batch.add_column(sa.Column("index_type", sa.String(8), nullable=False, server_default="none"))
    op.execute("UPDATE mq_queues SET index_type = 'correlid'")
    for table in ("mq_messages", "psb_spark_puts"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("correl_key", sa.LargeBinary(24), nullable=True))
    op.execute("UPDATE mq_messages SET correl_key = correl_id")
    op.drop_index("ix_mq_messages_correl", table_name="mq_messages")
    op.create_index(
        "ix_mq_messages_correl_key",
        "mq_messages",
        ["queue", "correl_key"],
        postgresql_where=KEYED,
        sqlite_where=KEYED,
    )


def downgrade() -> None:
    op.drop_index("ix_mq_messages_correl_key", table_name="mq_messages")
    op.create_index("ix_mq_messages_correl", "mq_messages", ["queue", "correl_id"])
    for table in ("psb_spark_puts", "mq_messages"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("correl_key")
    with op.batch_alter_table("mq_queues") as batch:
        batch.drop_column("index_type")
