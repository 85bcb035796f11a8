"""Each MQTT subscription's Subscription Identifier (MQTT 5.0, section 3.8.2.1.2), which the
publications it delivers carry; 0: none (every subscription stored before, and 3.1.1's).

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("psb_mqtt_subscriptions") as batch:
        batch.add_column(sa.Column("subscription_id", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("psb_mqtt_subscriptions") as batch:
        batch.drop_column("subscription_id")
