"""Subscriptions: an indexed topic head, so topic-pattern listings use an index range.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

TopicHead = sa.String(200).with_variant(sa.String(200, collation="C"), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("psb_subscriptions") as batch:
        batch.add_column(sa.Column("topic_head", TopicHead, nullable=True))
    op.execute("UPDATE psb_subscriptions SET topic_head = substr(topic, 1, 200)")
    with op.batch_alter_table("psb_subscriptions") as batch:
        batch.alter_column("topic_head", existing_type=TopicHead, nullable=False)
    op.create_index("ix_psb_subscriptions_topic_head_id", "psb_subscriptions", ["topic_head", "id"])


def downgrade() -> None:
    op.drop_index("ix_psb_subscriptions_topic_head_id", table_name="psb_subscriptions")
    with op.batch_alter_table("psb_subscriptions") as batch:
        batch.drop_column("topic_head")
