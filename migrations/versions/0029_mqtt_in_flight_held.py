"""MQTT sessions that end with their connection keep their deliveries in flight in memory
alone: the node holding one writes their count to its row with its connection's traffic, for
the operators' listings (``broker.service.mqtt.housekeeping``).

Revision ID: 0029
Revises: 0028
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("psb_mqtt_sessions") as batch:
        batch.add_column(sa.Column("in_flight_held", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("psb_mqtt_sessions") as batch:
        batch.drop_column("in_flight_held")
