"""Spark staging: on SQLite, the staged puts are stored in key order (WITHOUT ROWID).

The final merge reads a job's staged puts in (job, seq, idx) order. Tasks write their
partitions interleaved, so in a rowid table that order is one primary-key lookup and
one random rowid read per row; stored in key order it is a sequential scan. Measured
on 3,000,000 staged rows: the merge's INSERT ... SELECT took 44.9 s before, 30.0 s
after. PostgreSQL has no such table kind (its merge reads the primary key after an
ANALYZE); nothing changes there.

SQLite cannot alter a table's kind, so the table is rebuilt from its own definition
and its rows copied (a job in flight keeps what it staged).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Callable

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

TABLE = "psb_spark_puts"
SUFFIX = " WITHOUT ROWID"


def upgrade() -> None:
    _rebuild(lambda ddl: ddl + SUFFIX)


def downgrade() -> None:
    _rebuild(lambda ddl: ddl.removesuffix(SUFFIX))


def _rebuild(change: Callable[[str], str]) -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        return
    (ddl,) = bind.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (TABLE,)
    ).one()
    rebuilt = change(ddl.rstrip())
    op.execute(f"ALTER TABLE {TABLE} RENAME TO {TABLE}_old")
    op.execute(rebuilt)
    op.execute(f"INSERT INTO {TABLE} SELECT * FROM {TABLE}_old")
    op.execute(f"DROP TABLE {TABLE}_old")
