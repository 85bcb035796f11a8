"""What the console and ``broker mqtt sessions`` show of each MQTT client's connection: the
keepalive it asked for, and the bytes it sent and received, which its listener counts and
writes every few seconds (``broker.service.mqtt.housekeeping``).

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

COLUMNS = ("keepalive", "bytes_in", "bytes_out")


def upgrade() -> None:
    with op.batch_alter_table("psb_mqtt_sessions") as batch:
        batch.add_column(sa.Column("keepalive", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("bytes_in", sa.BigInteger(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("bytes_out", sa.BigInteger(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("psb_mqtt_sessions") as batch:
        for name in COLUMNS:
            batch.drop_column(name)
