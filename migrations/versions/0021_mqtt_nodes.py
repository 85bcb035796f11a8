"""MQTT nodes: the listener processes of a cluster (``psb_mqtt_nodes``, a heartbeat each),
the will of each session's connected client (published by whoever releases the session if
its node dies), and the listener process each operator's request is for
(``broker.store.nodes``, ``broker.store.mqtt``, ``broker.store.mqtt_requests``).

Sessions marked online belonged to listeners that are stopped while the database is migrated
(and that recorded no will): they are marked offline, as every listener start used to do.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-28
"""

from __future__ import annotations

import time

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

WILL_COLUMNS = ("will_topic", "will_payload", "will_qos", "will_retain")


def upgrade() -> None:
    op.create_table(
        "psb_mqtt_nodes",
        sa.Column("owner", sa.String(96), nullable=False),
        sa.Column("node", sa.String(96), nullable=False),
        sa.Column("address", sa.String(256), nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("beat", sa.BigInteger(), nullable=False),
        sa.Column("heartbeat_at", sa.BigInteger(), nullable=False),
        sa.Column("clients", sa.Integer(), nullable=False),
        sa.Column("dead_at", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("released", sa.SmallInteger(), nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint("owner", name="pk_psb_mqtt_nodes"),
    )
    with op.batch_alter_table("psb_mqtt_sessions") as batch:
        batch.add_column(sa.Column("will_topic", sa.Text()))
        batch.add_column(sa.Column("will_payload", sa.LargeBinary()))
        batch.add_column(sa.Column("will_qos", sa.SmallInteger(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("will_retain", sa.SmallInteger(), nullable=False, server_default="0"))
    with op.batch_alter_table("psb_mqtt_requests") as batch:
        batch.add_column(sa.Column("owner", sa.String(96), nullable=False, server_default=""))
    sessions = sa.table("psb_mqtt_sessions", sa.column("online"), sa.column("offline_since"))
    now = int(time.time() * 1000)
    op.execute(sessions.update().where(sessions.c.online == 1).values(online=0, offline_since=now))


def downgrade() -> None:
    with op.batch_alter_table("psb_mqtt_requests") as batch:
        batch.drop_column("owner")
    with op.batch_alter_table("psb_mqtt_sessions") as batch:
        for name in reversed(WILL_COLUMNS):
            batch.drop_column(name)
    op.drop_table("psb_mqtt_nodes")
