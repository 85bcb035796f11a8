"""Queue manager: its name, local queue definitions and the message table.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "mq_qmgr",
        sa.Column("name", sa.String(48), nullable=False),
        sa.Column("description", sa.String(64), nullable=False, server_default=""),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_mq_qmgr"),
    )
    op.create_table(
        "mq_queues",
        sa.Column("name", sa.String(48), nullable=False),
        sa.Column("description", sa.String(64), nullable=False, server_default=""),
        sa.Column("max_depth", sa.Integer(), nullable=False),
        sa.Column("max_msg_length", sa.Integer(), nullable=False),
        sa.Column("backout_threshold", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("backout_requeue_q", sa.String(48), nullable=False, server_default=""),
        sa.Column("def_priority", sa.SmallInteger(), nullable=False, server_default="0"),
        sa.Column("def_persistence", sa.SmallInteger(), nullable=False, server_default="0"),
        sa.Column("put_enabled", sa.SmallInteger(), nullable=False, server_default="1"),
        sa.Column("get_enabled", sa.SmallInteger(), nullable=False, server_default="1"),
        sa.Column("usage", sa.String(8), nullable=False, server_default="normal"),
        sa.Column("definition_type", sa.String(12), nullable=False, server_default="predefined"),
        sa.Column("depth", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("altered_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_mq_queues"),
    )
    op.create_table(
        "mq_messages",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("queue", sa.String(48), nullable=False),
        sa.Column("priority", sa.SmallInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=True),
        sa.Column("msg_id", sa.LargeBinary(24), nullable=False),
        sa.Column("correl_id", sa.LargeBinary(24), nullable=False),
        sa.Column("format", sa.String(8), nullable=False),
        sa.Column("encoding", sa.Integer(), nullable=False),
        sa.Column("ccsid", sa.Integer(), nullable=False),
        sa.Column("msg_type", sa.Integer(), nullable=False),
        sa.Column("report", sa.Integer(), nullable=False),
        sa.Column("reply_to_q", sa.String(48), nullable=False),
        sa.Column("reply_to_qmgr", sa.String(48), nullable=False),
        sa.Column("user_id", sa.String(12), nullable=False),
        sa.Column("persistence", sa.SmallInteger(), nullable=False),
        sa.Column("expiry", sa.Integer(), nullable=False),
        sa.Column("put_appl_type", sa.Integer(), nullable=False),
        sa.Column("put_appl_name", sa.String(28), nullable=False),
        sa.Column("put_date", sa.String(8), nullable=False),
        sa.Column("put_time", sa.String(8), nullable=False),
        sa.Column("backout_count", sa.Integer(), nullable=False),
        sa.Column("put_at", sa.BigInteger(), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_mq_messages"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_mq_messages_claim", "mq_messages", ["queue", sa.text("priority DESC"), "id"])
    op.create_index("ix_mq_messages_correl", "mq_messages", ["queue", "correl_id"])
    op.create_index(
        "ix_mq_messages_expiry",
        "mq_messages",
        ["queue", "expires_at"],
        postgresql_where=sa.text("expires_at IS NOT NULL"),
        sqlite_where=sa.text("expires_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_table("mq_messages")
    op.drop_table("mq_queues")
    op.drop_table("mq_qmgr")
