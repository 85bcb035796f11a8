"""MQTT sessions: when each went offline (session expiry) and how many messages were
dropped for it (queued-message limit) (``broker.store.mqtt``).

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("psb_mqtt_sessions") as batch:
        batch.add_column(sa.Column("offline_since", sa.BigInteger(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("dropped", sa.BigInteger(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("psb_mqtt_sessions") as batch:
        batch.drop_column("dropped")
        batch.drop_column("offline_since")
