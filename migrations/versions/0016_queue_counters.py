"""Queue put and get counters: every message put to a queue and gotten from it since the
queue was defined, kept on its row beside the depth, in the statement that changes the depth
(``queues.sql.apply_depth``), so that the console can show per-queue rates.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("mq_queues") as batch:
        batch.add_column(sa.Column("put_count", sa.BigInteger(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("get_count", sa.BigInteger(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("mq_queues") as batch:
        batch.drop_column("get_count")
        batch.drop_column("put_count")
