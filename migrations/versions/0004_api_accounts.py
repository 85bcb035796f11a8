"""Admin API accounts: bearer tokens (hashed) and the audit log; subscription indexes for keyset pages.

The listing indexes of ``psb_subscriptions`` become ``(queue, id)`` and
``(user_id, id)``: a page of one queue's (or one user's) subscriptions after an id
is then one index range read, instead of fetching and sorting every subscription
of that queue.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "psb_api_tokens",
        sa.Column("id", Id, autoincrement=True, nullable=False),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("secret_hash", sa.LargeBinary(32), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("principal", sa.String(12), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("revoked_at", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_psb_api_tokens"),
        sa.UniqueConstraint("secret_hash", name="uq_psb_api_tokens_secret_hash"),
    )
    op.create_table(
        "psb_api_audit",
        sa.Column("id", Id, autoincrement=True, nullable=False),
        sa.Column("at", sa.BigInteger(), nullable=False),
        sa.Column("token_id", sa.BigInteger(), nullable=True),
        sa.Column("principal", sa.String(64), nullable=False),
        sa.Column("method", sa.String(8), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("resource", sa.String(128), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("status", sa.SmallInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_psb_api_audit"),
    )
    op.drop_index("ix_psb_subscriptions_queue", table_name="psb_subscriptions")
    op.drop_index("ix_psb_subscriptions_user_id", table_name="psb_subscriptions")
    op.create_index("ix_psb_subscriptions_queue_id", "psb_subscriptions", ["queue", "id"])
    op.create_index("ix_psb_subscriptions_user_id_id", "psb_subscriptions", ["user_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_psb_subscriptions_user_id_id", table_name="psb_subscriptions")
    op.drop_index("ix_psb_subscriptions_queue_id", table_name="psb_subscriptions")
    op.create_index("ix_psb_subscriptions_queue", "psb_subscriptions", ["queue", "q_mgr"])
    op.create_index("ix_psb_subscriptions_user_id", "psb_subscriptions", ["user_id"])
    op.drop_table("psb_api_audit")
    op.drop_table("psb_api_tokens")
