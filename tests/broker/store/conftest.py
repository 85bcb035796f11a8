"""Fixtures of the state store's tests: one database per dialect for each test module, emptied
before each test (see tests.e2e.harness), and two ``StateStore`` instances on it standing for two
processes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from tests.broker.store.records import Process
from tests.conftest import DIALECTS
from tests.e2e.harness import emptied_database, shared_database
from tests.statements import recorded

shared = pytest.fixture(scope="module", params=DIALECTS)(shared_database)
engine = pytest.fixture(emptied_database)


@pytest.fixture
def a(engine: Engine) -> Process:
    return Process(engine)


@pytest.fixture
def b(engine: Engine) -> Process:
    return Process(engine)


@pytest.fixture
def statements(engine: Engine) -> Iterator[list[str]]:
    """Every statement on a broker-state table, as sent to the database."""
    with recorded(engine, containing="psb_") as seen:
        yield seen
