"""docker-compose.yml, validated as ``docker-compose config`` reads it: secrets only from the
environment, the APIs published on this machine's loopback unless told otherwise."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SECRETS = {"POSTGRES_PASSWORD": "a1" * 16, "LINK_AB": "b2" * 16, "LINK_AC": "c3" * 16}
BROKERS = ("broker-a", "broker-b", "broker-c")


def config(**environment: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in SECRETS and k != "BROKER_PUBLISH_ADDRESS"}
    return subprocess.run(
        ["docker-compose", "-f", str(ROOT / "docker-compose.yml"), "config"],
        capture_output=True,
        text=True,
        env={**env, **environment},
        cwd=ROOT,
        timeout=60,
    )


def rendered(**environment: str) -> dict[str, Any]:
    result = config(**environment)
    assert result.returncode == 0, result.stderr
    services: dict[str, Any] = yaml.safe_load(result.stdout)["services"]
    return services


@pytest.mark.parametrize("missing", sorted(SECRETS))
def test_every_secret_must_come_from_the_environment(missing: str) -> None:
    result = config(**{name: value for name, value in SECRETS.items() if name != missing})
    assert result.returncode != 0
    assert f"set {missing} to " in result.stderr


def test_the_secrets_given_are_the_ones_used() -> None:
    services = rendered(**SECRETS)
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == SECRETS["POSTGRES_PASSWORD"]
    for broker in BROKERS:
        url = services[broker]["environment"]["BROKER_DATABASE_URL"]
        assert url.startswith(f"postgresql://postgres:{SECRETS['POSTGRES_PASSWORD']}@postgres:5432/")
    links = services["links"]["environment"]
    assert (links["LINK_AB"], links["LINK_AC"]) == (SECRETS["LINK_AB"], SECRETS["LINK_AC"])


def published(service: dict[str, Any]) -> list[str]:
    """The host address of each published port ("ADDRESS:HOST:CONTAINER/tcp")."""
    return [str(port).rsplit(":", 2)[0] for port in service["ports"]]


def test_the_apis_are_published_on_loopback_unless_told_otherwise() -> None:
    services = rendered(**SECRETS)
    assert [published(services[broker]) for broker in BROKERS] == [["127.0.0.1"]] * 3
    assert "ports" not in services["postgres"]

    everywhere = rendered(**SECRETS, BROKER_PUBLISH_ADDRESS="0.0.0.0")
    assert [published(everywhere[broker]) for broker in BROKERS] == [["0.0.0.0"]] * 3
