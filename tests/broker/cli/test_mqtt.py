"""``broker mqtt``: principals' passwords (stored hashed) and the stored sessions, on both dialects."""

from __future__ import annotations

import io
import json

import pytest

from broker.store import mqtt
from queues import QueueManager, make_engine
from tests.broker.cli.test_tokens import run


def test_passwords_are_set_hashed_listed_and_removed(
    database_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("first secret\n"))
    assert run(database_url, capsys, "mqtt", "passwd", "sensor1", "--password-stdin")[0] == 0
    monkeypatch.setattr("sys.stdin", io.StringIO("second secret\n"))
    assert run(database_url, capsys, "mqtt", "passwd", "sensor1", "--password-stdin")[0] == 0
    qm = QueueManager(make_engine(database_url))
    try:
        with qm.reading() as conn:
            stored = mqtt.password_hash(conn, "sensor1")
    finally:
        qm.close()
    assert stored is not None and "secret" not in stored and stored.startswith("scrypt$")
    assert mqtt.verify_password(b"second secret", stored)
    assert not mqtt.verify_password(b"first secret", stored)
    code, out, _ = run(database_url, capsys, "mqtt", "users", "--json")
    assert code == 0 and [u["user"] for u in json.loads(out)] == ["sensor1"]
    assert run(database_url, capsys, "mqtt", "remove-user", "sensor1")[0] == 0
    assert run(database_url, capsys, "mqtt", "remove-user", "sensor1")[0] != 0
    code, out, _ = run(database_url, capsys, "mqtt", "sessions", "--json")
    assert code == 0 and json.loads(out) == []


def test_principals_are_mq_user_identifiers(database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(database_url, capsys, "mqtt", "passwd", "a-very-long-user", "--password-stdin")
    assert code == 2 and "1 to 12 characters" in err
