"""Fixtures shared by the whole suite.

Everything that touches SQL runs on both SQLite and PostgreSQL: the
``database_url`` fixture is parametrised over the two. PostgreSQL tests use
throw-away databases named ``brokertest_<worker>_<n>``, created from the server
in ``BROKER_TEST_PG_URL`` (default: the local server, user postgres) and
dropped afterwards; they never touch the ``test`` or ``postgres`` databases'
contents.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from sqlalchemy import Engine
from sqlalchemy.engine import make_url

import migrations
from queues import QueueManager, make_engine
from tests.certificates import Certificates, make_certificates

# Timing is the benchmarks' business: an example that runs slowly because broker processes share
# the two cores with it is not a failure.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

PG_ADMIN_URL = os.environ.get("BROKER_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
DIALECTS = ("sqlite", "postgresql")
_counter = itertools.count()


def _worker() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


class PostgresDatabases:
    """Creates and drops throw-away databases on the test server."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self.created: list[str] = []

    def _admin(self) -> psycopg.Connection:
        return psycopg.connect(self.admin_url, autocommit=True)

    def create(self) -> str:
        name = f"brokertest_{_worker()}_{os.getpid()}_{next(_counter)}"
        with self._admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        self.created.append(name)
        return make_url(self.admin_url).set(database=name).render_as_string(hide_password=False)

    def drop(self, url: str) -> None:
        name = make_url(url).database
        with self._admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if name in self.created:
            self.created.remove(name)

    def drop_all(self) -> None:
        for name in list(self.created):
            self.drop(make_url(self.admin_url).set(database=name).render_as_string(hide_password=False))


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresDatabases]:
    databases = PostgresDatabases(PG_ADMIN_URL)
    try:
        with databases._admin() as conn:
            conn.execute("SELECT 1")
    except psycopg.OperationalError as exc:  # pragma: no cover - environment problem, fail loudly
        pytest.fail(f"PostgreSQL is not reachable at {PG_ADMIN_URL}: {exc}. Run .ci/run, which starts it.")
    yield databases
    databases.drop_all()


@pytest.fixture(params=DIALECTS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database of each dialect."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'broker.db'}"
        return
    postgres: PostgresDatabases = request.getfixturevalue("postgres")
    url = postgres.create()
    yield url
    postgres.drop(url)


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    """A migrated database with queue manager QM1."""
    eng = make_engine(database_url)
    migrations.upgrade(eng)
    QueueManager.create(eng, "QM1")
    yield eng
    eng.dispose()


@pytest.fixture
def qm(engine: Engine) -> Iterator[QueueManager]:
    manager = QueueManager(engine, appl_name="pytest", user_id="tester")
    yield manager
    manager.notifier.close()


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    """A throw-away CA, the server's certificate and client certificates (tests/certificates.py)."""
    return make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture(autouse=True)
def _root_logging() -> Iterator[None]:
    """Every test leaves the root logger as it found it: a test that runs ``broker.cli.main``
    in-process points it at that test's captured stderr, which is closed afterwards, and any
    thread or finaliser logging later (py4j's at exit, say) would print a logging error."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
