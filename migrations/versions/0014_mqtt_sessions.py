"""MQTT sessions: clients, their QoS per subscription, QoS 2 ids in flight, unacknowledged
outbound messages, and the principals' password hashes (``broker.store.mqtt``).

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "psb_mqtt_sessions",
        sa.Column("session_key", sa.LargeBinary(16), nullable=False),
        sa.Column("client_id", sa.Text(), nullable=False),
        sa.Column("queue", sa.String(48), nullable=False),
        sa.Column("user_id", sa.String(64), nullable=False),
        sa.Column("clean", sa.SmallInteger(), nullable=False),
        sa.Column("protocol_level", sa.SmallInteger(), nullable=False),
        sa.Column("address", sa.String(64), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("connected_at", sa.BigInteger(), nullable=False),
        sa.Column("next_seq", sa.BigInteger(), nullable=False),
        sa.Column("online", sa.SmallInteger(), nullable=False),
        sa.PrimaryKeyConstraint("session_key", name="pk_psb_mqtt_sessions"),
        sa.UniqueConstraint("queue", name="uq_psb_mqtt_sessions_queue"),
    )
    op.create_table(
        "psb_mqtt_subscriptions",
        sa.Column("session_key", sa.LargeBinary(16), nullable=False),
        sa.Column("filter_key", sa.LargeBinary(16), nullable=False),
        sa.Column("filter", sa.Text(), nullable=False),
        sa.Column("qos", sa.SmallInteger(), nullable=False),
        sa.PrimaryKeyConstraint("session_key", "filter_key", name="pk_psb_mqtt_subscriptions"),
    )
    op.create_table(
        "psb_mqtt_inbound",
        sa.Column("session_key", sa.LargeBinary(16), nullable=False),
        sa.Column("packet_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.PrimaryKeyConstraint("session_key", "packet_id", name="pk_psb_mqtt_inbound"),
    )
    op.create_table(
        "psb_mqtt_outbound",
        sa.Column("session_key", sa.LargeBinary(16), nullable=False),
        sa.Column("packet_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("qos", sa.SmallInteger(), nullable=False),
        sa.Column("retain", sa.SmallInteger(), nullable=False),
        sa.Column("released", sa.SmallInteger(), nullable=False),
        sa.PrimaryKeyConstraint("session_key", "packet_id", name="pk_psb_mqtt_outbound"),
    )
    op.create_table(
        "psb_mqtt_principals",
        sa.Column("user_id", sa.String(64), nullable=False),
        sa.Column("password_hash", sa.Text(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", name="pk_psb_mqtt_principals"),
    )


def downgrade() -> None:
    for table in (
        "psb_mqtt_principals",
        "psb_mqtt_outbound",
        "psb_mqtt_inbound",
        "psb_mqtt_subscriptions",
        "psb_mqtt_sessions",
    ):
        op.drop_table(table)
