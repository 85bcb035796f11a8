"""PostgreSQL: vacuum the message table as a queue table, not as a history table.

Every message is inserted once and deleted once, so dead tuples pile up at the
head of the claim index; PostgreSQL's defaults vacuum a table only when a fifth
of it is dead, by which time claims have slowed to a third. These settings
vacuum after a few thousand deletions, without throttling.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-21
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_SETTINGS = {
    "autovacuum_vacuum_scale_factor": "0.0",
    "autovacuum_vacuum_threshold": "5000",
    "autovacuum_vacuum_cost_delay": "0",
    "autovacuum_analyze_scale_factor": "0.02",
}


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    options = ", ".join(f"{name} = {value}" for name, value in _SETTINGS.items())
    op.execute(f"ALTER TABLE mq_messages SET ({options})")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"ALTER TABLE mq_messages RESET ({', '.join(_SETTINGS)})")
