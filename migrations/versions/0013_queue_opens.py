"""Queue opens: which process reads or writes a queue for its whole life, as MQ's open handles.

A running broker records the queues it routes from, its dead-letter queue and its
channels' transmission queues in ``mq_opens`` (``queues.opens``), so that an operator
cannot delete them, or alter them into something it cannot use, while it runs.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "mq_opens",
        sa.Column("queue", sa.String(48), nullable=False),
        sa.Column("owner", sa.String(96), nullable=False),
        sa.Column("purpose", sa.String(128), nullable=False),
        sa.Column("reads", sa.SmallInteger(), nullable=False),
        sa.Column("writes", sa.SmallInteger(), nullable=False),
        sa.Column("min_msg_length", sa.Integer(), nullable=False),
        sa.Column("until", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("queue", "owner", name="pk_mq_opens"),
    )
    # The links defined already hold their transmission queues, as new ones do.
    op.execute(
        "INSERT INTO mq_opens (queue, owner, purpose, reads, writes, min_msg_length, until) "
        "SELECT name, 'neighbour:' || name, "
        "'the channel to neighbour ' || name || ' sends from it (remove the neighbour instead)', "
        f"1, 0, 0, {2**62} FROM psb_neighbours"
    )


def downgrade() -> None:
    op.drop_table("mq_opens")
