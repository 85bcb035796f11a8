"""The MQTT status counters of each cluster member, written with its heartbeat, from which every
node publishes its own ``$SYS/broker/nodes/NODE/...`` and one node the cluster's totals
(``broker.core.sys_status``).

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("psb_mqtt_nodes") as batch:
        batch.add_column(sa.Column("counters", sa.Text(), nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("psb_mqtt_nodes") as batch:
        batch.drop_column("counters")
