"""Each MQTT 5.0 session's Session Expiry Interval: how long it outlives its client's connection
(``broker.service.mqtt.housekeeping``), and the Receive Maximum and Topic Alias Maximum its
client's CONNECT gave, for the console and ``broker mqtt sessions``. NULL for 3.1 and 3.1.1
sessions, whose expiry the broker-wide ``mqtt_session_expiry`` governs.

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("psb_mqtt_sessions") as batch:
        batch.add_column(sa.Column("expiry", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("receive_maximum", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("topic_alias_maximum", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("psb_mqtt_sessions") as batch:
        for name in ("topic_alias_maximum", "receive_maximum", "expiry"):
            batch.drop_column(name)
