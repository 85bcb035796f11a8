"""A real ``broker serve --mqtt`` per test, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker.service.mqtt.clients import MqttBroker
from tests.e2e.processes import Brokers


@pytest.fixture
def brokers(database_url: str, tmp_path: Path) -> Iterator[Brokers]:
    group = Brokers(database_url, tmp_path)
    try:
        yield group
    finally:
        group.close()


@pytest.fixture
def broker(brokers: Brokers) -> MqttBroker:
    return MqttBroker(brokers)
