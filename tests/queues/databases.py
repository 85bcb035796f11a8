"""A migrated database per dialect shared by a whole test module, emptied before each test.

Creating and migrating a PostgreSQL database costs about 0.2 s; test modules with many
small scenarios would spend most of their time doing it, so they share one database per
dialect (the ``database_url`` idea of ``tests/conftest.py``, at module scope) and start
each test from an empty queue manager QM1 instead.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text

import migrations
from queues import QueueManager, make_engine


def shared_engine(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engine]:
    """Body of a module-scoped fixture parametrised over ``tests.conftest.DIALECTS``."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('shared') / 'broker.db'}"
    else:
        url = request.getfixturevalue("postgres").create()
    engine = make_engine(url)
    migrations.upgrade(engine)
    yield engine
    engine.dispose()
    if request.param == "postgresql":
        request.getfixturevalue("postgres").drop(url)


def emptied(engine: Engine) -> Engine:
    """``engine`` with no messages and no queues but the dead-letter queue of QM1."""
    with engine.begin() as conn:
        for table in ("mq_messages", "mq_queues", "mq_qmgr"):
            conn.execute(text(f"DELETE FROM {table}"))
    QueueManager.create(engine, "QM1")
    return engine
