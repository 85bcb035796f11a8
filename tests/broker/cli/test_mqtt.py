"""``broker mqtt``: principals' passwords (stored hashed), the stored sessions, and disconnect and
delete-session carried out by a real ``broker serve --mqtt``, on both dialects."""

from __future__ import annotations

import io
import json

import pytest

from broker.store import mqtt
from queues import QueueManager, make_engine
from tests.broker.cli.test_tokens import run
from tests.broker.service.mqtt.clients import MqttBroker, Paho, eventually, stays_down
from tests.e2e.conftest import brokers  # noqa: F401 (the fixture of real broker processes)
from tests.e2e.processes import Brokers


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


def test_disconnect_and_delete_session_reach_a_running_listener(
    brokers: Brokers,  # noqa: F811
    database_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    broker = MqttBroker(brokers)
    watcher = Paho(broker.port, "watcher")
    watcher.connect()
    watcher.subscribe(("wills/#", 1))
    device = Paho(broker.port, "meter", clean=False, will=("wills/meter", b"cut", 0, False))
    gone = stays_down(device)
    assert device.connect() == (0, False)
    device.subscribe(("tariff/#", 1))

    code, out, _ = run(database_url, capsys, "mqtt", "disconnect", "meter", "--json")
    assert code == 0 and json.loads(out) == {"client_id": "meter", "user": "alice", "requested": True}
    assert gone.wait(5) and watcher.receive(1)[0].payload == b"cut"
    assert eventually(lambda: not sessions(database_url)["meter"].online)
    code, _, err = run(database_url, capsys, "mqtt", "disconnect", "meter")
    assert code == 1 and "MQRC_UNKNOWN_OBJECT_NAME" in err and "no connected MQTT client" in err

    code, out, _ = run(database_url, capsys, "mqtt", "delete-session", "meter", "--json")
    assert code == 0 and json.loads(out)["deleted"] is True
    assert "meter" not in sessions(database_url)
    assert Paho(broker.port, "meter", clean=False).connect() == (0, False)
    code, _, err = run(database_url, capsys, "mqtt", "delete-session", "nobody")
    assert code == 1 and "no MQTT session with client id 'nobody'" in err


def sessions(url: str) -> dict[str, mqtt.StoredSession]:
    qm = QueueManager(make_engine(url))
    try:
        with qm.reading() as conn:
            return {s.client_id: s for s in mqtt.list_sessions(conn)}
    finally:
        qm.close()
