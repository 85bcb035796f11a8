"""The listener process an MQTT session's client is connected to (``queues.owners`` names it),
so that the sessions of a listener process that died are known to be offline
(``broker.store.mqtt.release_dead``).

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("psb_mqtt_sessions") as batch:
        batch.add_column(sa.Column("owner", sa.String(96), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("psb_mqtt_sessions") as batch:
        batch.drop_column("owner")
