"""Schema migrations (Alembic) for the queue manager and the broker state.

The package carries its own Alembic environment so that an installed wheel can
migrate a database with no ``alembic.ini`` in the working directory:
``broker db upgrade`` calls :func:`upgrade`.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

HERE = Path(__file__).resolve().parent


def config(engine: Engine) -> Config:
    """An Alembic config bound to ``engine`` (env.py runs on its connection)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(HERE))
    cfg.attributes["engine"] = engine
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    command.upgrade(config(engine), revision)


def downgrade(engine: Engine, revision: str) -> None:
    command.downgrade(config(engine), revision)


def head() -> str:
    """The newest revision this release knows."""
    head_rev = ScriptDirectory.from_config(config_without_engine()).get_current_head()
    assert head_rev is not None
    return head_rev


def current(engine: Engine) -> str | None:
    """The revision the database is at (None for an empty database)."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def is_at_head(engine: Engine) -> bool:
    return current(engine) == head()


def config_without_engine() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(HERE))
    return cfg
