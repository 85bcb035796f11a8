"""Stopped channels: the links whose sender an operator stopped (``psb_stopped_channels``,
``broker.network.links``). No row: the channel runs, as every channel did before.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "psb_stopped_channels",
        sa.Column("link", sa.String(48), nullable=False),
        sa.Column("stopped_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("link", name="pk_psb_stopped_channels"),
    )


def downgrade() -> None:
    op.drop_table("psb_stopped_channels")
