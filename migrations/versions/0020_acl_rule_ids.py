"""ACL rules: an id is never given again after its rule is removed (SQLite ``AUTOINCREMENT``).

The audit log names rules by id; an id given to a new rule after the old one was removed
would make every earlier entry about it ambiguous. PostgreSQL's identity never goes back;
SQLite's plain rowid reuses the largest id once it is deleted, so the table is rebuilt with
``AUTOINCREMENT`` (its rows and ids kept).

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-27
"""

from __future__ import annotations

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def _rebuild(autoincrement: bool) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    with op.batch_alter_table(
        "psb_acl_rules", recreate="always", table_kwargs={"sqlite_autoincrement": autoincrement}
    ):
        pass


def upgrade() -> None:
    _rebuild(True)


def downgrade() -> None:
    _rebuild(False)
