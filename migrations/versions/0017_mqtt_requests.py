"""MQTT operator requests and refusals: a table through which the admin API and the CLI ask
the MQTT listener to disconnect a client or delete a session (the listener may run in
another process), and a count per session of what its client was refused
(``broker.store.mqtt_requests``, ``broker.store.mqtt``).

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "psb_mqtt_requests",
        sa.Column("id", Id, autoincrement=True, nullable=False),
        sa.Column("client_id", sa.Text(), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(128), nullable=False),
        sa.Column("requested_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_psb_mqtt_requests"),
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table("psb_mqtt_sessions") as batch:
        batch.add_column(sa.Column("refused", sa.BigInteger(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("psb_mqtt_sessions") as batch:
        batch.drop_column("refused")
    op.drop_table("psb_mqtt_requests")
