"""A real ``broker serve --mqtt`` per test, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from tests.broker.service.mqtt.clients import MqttBroker
from tests.e2e.conftest import brokers  # noqa: F401 (the fixture the ones here build on)
from tests.e2e.processes import Brokers


@pytest.fixture
def broker(brokers: Brokers) -> MqttBroker:  # noqa: F811
    return MqttBroker(brokers)
