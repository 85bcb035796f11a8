"""Fixtures of the Spark pipeline's tests: one SparkSession for the whole run (starting
one costs seconds), and databases of both dialects ready for the scenario."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from broker.spark.job import spark_session
from tests.broker.spark.scenario import Broker, prepare
from tests.conftest import PostgresDatabases


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = spark_session("local[2]", app_name="broker tests")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    # py4j says at INFO that it closes its connections, from finalisers that run at exit,
    # after pytest has closed the streams the test's log handlers wrote to.
    logging.getLogger("py4j").setLevel(logging.WARNING)


@pytest.fixture(params=("sqlite", "postgresql"))
def brokers(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Broker]]:
    """Makes scenario brokers, each on a fresh database of the parameter's dialect."""
    made: list[Broker] = []
    urls: list[str] = []
    postgres: PostgresDatabases | None = (
        request.getfixturevalue("postgres") if request.param == "postgresql" else None
    )

    def make() -> Broker:
        if postgres is None:
            url = f"sqlite:///{tmp_path / f'broker{len(made)}.db'}"
        else:
            url = postgres.create()
            urls.append(url)
        made.append(prepare(url))
        return made[-1]

    yield make
    for broker in made:
        broker.close()
        broker.engine.dispose()
    for url in urls:
        assert postgres is not None
        postgres.drop(url)
