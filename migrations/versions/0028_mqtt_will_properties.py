"""MQTT 5.0 wills: a will's properties stored with its session, so that whoever publishes it
(the listener, the node releasing a dead one's sessions, housekeeping) sends them, and the time
a will that waits (its Will Delay Interval) is due once its client has gone, indexed for the
pass that publishes those due (``broker.service.mqtt.housekeeping``).

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("psb_mqtt_sessions") as batch:
        batch.add_column(sa.Column("will_properties", sa.LargeBinary(), nullable=True))
        batch.add_column(sa.Column("will_due", sa.BigInteger(), nullable=True))
    op.create_index("ix_psb_mqtt_sessions_will_due", "psb_mqtt_sessions", ["will_due"])


def downgrade() -> None:
    op.drop_index("ix_psb_mqtt_sessions_will_due", table_name="psb_mqtt_sessions")
    with op.batch_alter_table("psb_mqtt_sessions") as batch:
        for name in ("will_due", "will_properties"):
            batch.drop_column(name)
