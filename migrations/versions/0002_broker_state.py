"""Broker state: subscriptions, retained publications, ACLs, change log, instances.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

_MQMD = (
    ("msg_id", sa.LargeBinary(24)),
    ("correl_id", sa.LargeBinary(24)),
    ("format", sa.String(8)),
    ("encoding", sa.Integer()),
    ("ccsid", sa.Integer()),
    ("msg_type", sa.Integer()),
    ("report", sa.Integer()),
    ("reply_to_q", sa.String(48)),
    ("reply_to_qmgr", sa.String(48)),
    ("user_id", sa.String(12)),
    ("persistence", sa.SmallInteger()),
    ("priority", sa.SmallInteger()),
    ("expiry", sa.Integer()),
    ("put_appl_type", sa.Integer()),
    ("put_appl_name", sa.String(28)),
    ("put_date", sa.String(8)),
    ("put_time", sa.String(8)),
)


def upgrade() -> None:
    op.create_table(
        "psb_meta",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_psb_meta"),
    )
    op.execute("INSERT INTO psb_meta (id, version) VALUES (1, 0)")
    op.create_table(
        "psb_changes",
        sa.Column("version", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("entity", sa.String(16), nullable=False),
        sa.Column("entity_key", sa.LargeBinary(24), nullable=False),
        sa.Column("changed_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("version", "entity", "entity_key", name="pk_psb_changes"),
    )
    op.create_table(
        "psb_subscriptions",
        sa.Column("id", Id, autoincrement=True, nullable=False),
        sa.Column("key_hash", sa.LargeBinary(24), nullable=False),
        sa.Column("q_mgr", sa.String(48), nullable=False),
        sa.Column("queue", sa.String(48), nullable=False),
        sa.Column("correl_id", sa.LargeBinary(24), nullable=True),
        sa.Column("sub_point", sa.Text(), nullable=False),
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("filter", sa.Text(), nullable=True),
        sa.Column("user_id", sa.String(12), nullable=False),
        sa.Column("options", sa.Integer(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("sub_name", sa.Text(), nullable=True),
        sa.Column("sub_user_data", sa.Text(), nullable=True),
        sa.Column("expires_at", sa.BigInteger(), nullable=True),
        sa.Column("temporary", sa.SmallInteger(), nullable=False),
        sa.Column("members", sa.Text(), nullable=False),
        sa.Column("exclusive", sa.Text(), nullable=True),
        sa.Column("origin", sa.String(48), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_psb_subscriptions"),
        sa.UniqueConstraint("key_hash", name="uq_psb_subscriptions_key_hash"),
    )
    op.create_index("ix_psb_subscriptions_queue", "psb_subscriptions", ["queue", "q_mgr"])
    op.create_index("ix_psb_subscriptions_user_id", "psb_subscriptions", ["user_id"])
    op.create_table(
        "psb_retained",
        sa.Column("id", Id, autoincrement=True, nullable=False),
        sa.Column("key_hash", sa.LargeBinary(24), nullable=False),
        sa.Column("sub_point", sa.Text(), nullable=False),
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("retained_at", sa.BigInteger(), nullable=False),
        *(sa.Column(name, kind, nullable=False) for name, kind in _MQMD),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_psb_retained"),
        sa.UniqueConstraint("key_hash", name="uq_psb_retained_key_hash"),
    )
    op.create_table(
        "psb_acl_rules",
        sa.Column("id", Id, autoincrement=True, nullable=False),
        sa.Column("principal", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("pattern", sa.Text(), nullable=False),
        sa.Column("permission", sa.String(16), nullable=False),
        sa.Column("allow", sa.SmallInteger(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_psb_acl_rules"),
    )
    op.create_table(
        "psb_group_members",
        sa.Column("group_name", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("group_name", "user_id", name="pk_psb_group_members"),
    )
    op.create_table(
        "psb_instances",
        sa.Column("instance", sa.String(96), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("heartbeat_at", sa.BigInteger(), nullable=False),
        sa.Column("stats", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("instance", name="pk_psb_instances"),
    )


def downgrade() -> None:
    for table in (
        "psb_instances",
        "psb_group_members",
        "psb_acl_rules",
        "psb_retained",
        "psb_subscriptions",
        "psb_changes",
        "psb_meta",
    ):
        op.drop_table(table)
