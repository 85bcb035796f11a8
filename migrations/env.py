"""Alembic environment: runs migrations on the engine handed in by ``migrations.config``."""

from __future__ import annotations

from alembic import context

from migrations.models import target_metadata

engine = context.config.attributes["engine"]

with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()
