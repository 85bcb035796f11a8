"""Claim turns: the sequence that orders concurrent routers' batches on PostgreSQL.

Several routers on one PostgreSQL database claim batches of a stream concurrently
(``FOR UPDATE SKIP LOCKED``). Each claim that takes messages draws a turn from this
sequence while the claims are serialised, and the batch's writes wait until the batch
of the previous turn has ended, so batches commit in the order they were claimed
(``queues.sql.take_turn``). A sequence, because drawing from it is never rolled back
and never waits for another transaction. SQLite has one writer and needs nothing.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-22
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

SEQUENCE = "mq_claim_turns"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"CREATE SEQUENCE {SEQUENCE} AS integer MAXVALUE 2147483646 CYCLE")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP SEQUENCE {SEQUENCE}")
