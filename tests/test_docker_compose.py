"""docker-compose.yml, validated as ``docker-compose config`` reads it: secrets only from the
environment and never on a command line, the brokers on a PostgreSQL role of their own, the APIs
published on this machine's loopback unless told otherwise; and docker/postgres-init.sql, run on
the local PostgreSQL server under names of the test's own."""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from sqlalchemy.engine import make_url

import migrations
from queues import Message, QueueManager, make_engine
from tests.conftest import PG_ADMIN_URL

ROOT = Path(__file__).resolve().parents[1]
SECRETS = {
    "POSTGRES_PASSWORD": "a1" * 16,
    "BROKER_DB_PASSWORD": "d4" * 16,
    "LINK_AB": "b2" * 16,
    "LINK_AC": "c3" * 16,
}
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
    database = services["postgres"]["environment"]
    assert database["POSTGRES_PASSWORD"] == SECRETS["POSTGRES_PASSWORD"]
    assert database["BROKER_DB_PASSWORD"] == SECRETS["BROKER_DB_PASSWORD"]
    for broker in BROKERS:
        url = services[broker]["environment"]["BROKER_DATABASE_URL"]
        assert url.startswith(f"postgresql://broker:{SECRETS['BROKER_DB_PASSWORD']}@postgres:5432/")
    links = services["links"]["environment"]
    assert (links["LINK_AB"], links["LINK_AC"]) == (SECRETS["LINK_AB"], SECRETS["LINK_AC"])
    assert links["PG"] == f"postgresql://broker:{SECRETS['BROKER_DB_PASSWORD']}@postgres:5432"


def command_lines(service: dict[str, Any]) -> str:
    """Everything of ``service`` that becomes a process's arguments."""
    parts = [service.get("entrypoint", []), service.get("command", []), service.get("healthcheck", {})]
    return " ".join(yaml.safe_dump(parts).split())


def test_no_secret_reaches_a_command_line_and_no_broker_is_the_superuser() -> None:
    services = rendered(**SECRETS)
    for name, service in services.items():
        argv = command_lines(service)
        assert not [secret for secret in SECRETS.values() if secret in argv], name
        assert "--token " not in argv and "--db " not in argv, name  # values that sh would expand
        url = str(service.get("environment", {}).get("BROKER_DATABASE_URL", ""))
        assert "//postgres:" not in url, name  # the superuser's name before the password
    script = command_lines(services["links"])
    assert script.count("--token-file -") == 4 and script.count("printenv LINK_A") == 4


def published(service: dict[str, Any]) -> list[str]:
    """The host address of each published port ("ADDRESS:HOST:CONTAINER/tcp")."""
    return [str(port).rsplit(":", 2)[0] for port in service["ports"]]


def test_the_apis_are_published_on_loopback_unless_told_otherwise() -> None:
    services = rendered(**SECRETS)
    assert [published(services[broker]) for broker in BROKERS] == [["127.0.0.1"]] * 3
    assert "ports" not in services["postgres"]

    everywhere = rendered(**SECRETS, BROKER_PUBLISH_ADDRESS="0.0.0.0")
    assert [published(everywhere[broker]) for broker in BROKERS] == [["0.0.0.0"]] * 3


def test_the_init_script_gives_the_brokers_a_role_of_their_own() -> None:
    """The script as the postgres image runs it (psql, as the superuser, the password in the
    environment), under names of this test's own; then a broker migrates and uses its database
    as that role, which is no superuser."""
    suffix = uuid.uuid4().hex[:8]
    role, databases = f"broker_{suffix}", [f"qm{q}_{suffix}" for q in "abc"]
    script = (ROOT / "docker" / "postgres-init.sql").read_text(encoding="utf-8")
    script = re.sub(r"\bqm([abc])\b", rf"qm\1_{suffix}", re.sub(r"\bbroker\b", role, script))
    admin = make_url(PG_ADMIN_URL)
    psql = ["psql", "-v", "ON_ERROR_STOP=1", "-h", str(admin.host), "-p", str(admin.port or 5432)]
    psql += ["-U", str(admin.username), "-d", str(admin.database), "-f", "-"]
    try:
        done = subprocess.run(
            psql,
            input=script,
            env={**os.environ, "BROKER_DB_PASSWORD": SECRETS["BROKER_DB_PASSWORD"]},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            flags = conn.execute(
                "SELECT rolsuper, rolcreatedb, rolcreaterole, rolpassword IS NOT NULL FROM pg_authid"
                " WHERE rolname = %s",
                (role,),
            ).fetchone()
            owners = conn.execute(
                "SELECT datname, pg_get_userbyid(datdba) FROM pg_database WHERE datname = ANY(%s) ORDER BY 1",
                (databases,),
            ).fetchall()
        assert flags == (False, False, False, True)
        assert owners == [(name, role) for name in databases]
        engine = make_engine(admin.set(username=role, database=databases[0]).render_as_string())
        try:
            migrations.upgrade(engine)
            QueueManager.create(engine, "QMA")
            with QueueManager(engine) as qm:
                qm.define_queue("SCORES")
                qm.put("SCORES", Message(body=b"1-0"))
                assert qm.get("SCORES").body == b"1-0"
        finally:
            engine.dispose()
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            for name in databases:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')
