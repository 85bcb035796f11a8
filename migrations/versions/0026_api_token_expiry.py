"""When each API token expires (epoch ms; NULL: never). An expired token is refused as a revoked
one is (``broker.admin.accounts.authenticate``).

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("psb_api_tokens") as batch:
        batch.add_column(sa.Column("expires_at", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("psb_api_tokens") as batch:
        batch.drop_column("expires_at")
