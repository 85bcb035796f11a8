"""Claims on SQLite: routing outside the one write lock.

A SQLite router marks the batch it takes (``claimed_by``, ``claim_turn``) in a short
transaction of its own, routes it with no lock held, and removes it together with
every effect in a second transaction (``queues.claims``). Other getters skip claimed
messages, as PostgreSQL's ``SKIP LOCKED`` skips a router's locked rows. Only claimed
rows enter the partial index, so puts and ordinary gets never touch it. PostgreSQL
leaves both columns empty.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

CLAIMED = sa.text("claimed_by IS NOT NULL")


def upgrade() -> None:
    op.add_column("mq_messages", sa.Column("claimed_by", sa.String(40), nullable=True))
    op.add_column("mq_messages", sa.Column("claim_turn", sa.BigInteger, nullable=True))
    op.create_index(
        "ix_mq_messages_claimed_by",
        "mq_messages",
        ["queue", "claimed_by"],
        postgresql_where=CLAIMED,
        sqlite_where=CLAIMED,
    )


def downgrade() -> None:
    op.drop_index("ix_mq_messages_claimed_by", table_name="mq_messages")
    with op.batch_alter_table("mq_messages") as batch:
        batch.drop_column("claim_turn")
        batch.drop_column("claimed_by")
