"""Broker network: neighbours (links) and the channel outbox.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "psb_neighbours",
        sa.Column("name", sa.String(48), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("token", sa.Text(), nullable=False),
        sa.Column("epoch", sa.String(32), nullable=False),
        sa.Column("next_batch", sa.BigInteger(), nullable=False),
        sa.Column("received_batch", sa.BigInteger(), nullable=False),
        sa.Column("received_epoch", sa.String(32), nullable=True),
        sa.Column("synced", sa.SmallInteger(), nullable=False),
        sa.Column("sender_owner", sa.String(96), nullable=True),
        sa.Column("sender_lease_until", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("last_sent_at", sa.BigInteger(), nullable=True),
        sa.Column("last_received_at", sa.BigInteger(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("name", name="pk_psb_neighbours"),
    )
    op.create_table(
        "psb_channel_outbox",
        sa.Column("link", sa.String(48), nullable=False),
        sa.Column("batch_no", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("messages", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("link", "batch_no", name="pk_psb_channel_outbox"),
    )


def downgrade() -> None:
    op.drop_table("psb_channel_outbox")
    op.drop_table("psb_neighbours")
