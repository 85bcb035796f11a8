"""``broker mqtt``: principals' passwords (stored hashed), the stored sessions, and disconnect and
delete-session carried out by a real ``broker serve --mqtt``, on both dialects."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest

from broker import store
from broker.store import mqtt
from queues import Message, QueueManager, make_engine
from tests.broker.cli.test_tokens import run
from tests.broker.service.mqtt.clients import MqttBroker, Paho, eventually, stays_down
from tests.e2e.conftest import brokers  # noqa: F401 (the fixture of real broker processes)
from tests.e2e.processes import BROKER, Brokers, child_environment


def test_passwords_are_set_hashed_listed_and_removed(
    database_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run(database_url, capsys, "db", "upgrade")[0] == 0
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


LONG = "averyveryverylongprincipal"


@pytest.mark.parametrize(
    "argv",
    [
        ("mqtt", "passwd", LONG, "--password-stdin"),
        ("token", "create", "--role", "admin", "--principal", LONG),
        ("acl", "add", "--principal", LONG, "--topic", "Sport", "--permission", "publish", "--deny"),
        (
            "acl",
            "add",
            "--group",
            "--principal",
            LONG,
            "--topic",
            "Sport",
            "--permission",
            "publish",
            "--deny",
        ),
        ("group", "add", LONG, "alice"),
        ("group", "add", "traders", LONG),
    ],
    ids=["passwd", "token", "rule", "group-rule", "group", "member"],
)
def test_principals_are_mq_user_identifiers_in_every_command(
    database_url: str, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    """A principal that can never be a UserIdentifier is refused alike by every command that
    names one: a rule for someone who cannot exist is false assurance."""
    run(database_url, capsys, "db", "upgrade")
    code, _, err = run(database_url, capsys, *argv)
    assert code == 1
    assert err.splitlines()[-1] == (
        f"MQRCCF_ATTR_VALUE_ERROR (4005): principal {LONG!r} must be 1 to 12 printable ASCII characters"
        " without blanks: it is sent as the MQMD UserIdentifier"
    )
    qm = QueueManager(make_engine(database_url))
    try:
        with qm.reading() as conn:
            assert (store.list_acl_rules(conn), store.list_groups(conn), mqtt.list_principals(conn)) == (
                [],
                {},
                [],
            )
    finally:
        qm.close()


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


def test_a_password_piped_without_the_option_is_read_from_standard_input(
    database_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``echo secret | broker mqtt passwd sensor1``, with no terminal to ask on."""
    assert run(database_url, capsys, "db", "upgrade")[0] == 0
    done = subprocess.run(
        [str(BROKER), "--db", database_url, "mqtt", "passwd", "sensor1"],
        input="secret\n",
        capture_output=True,
        text=True,
        env=child_environment(),
        cwd=tmp_path,
        timeout=60,
        start_new_session=True,  # no controlling terminal: getpass would read standard input
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "password of MQTT principal sensor1 set\n", "")
    qm = QueueManager(make_engine(database_url))
    try:
        with qm.reading() as conn:
            stored = mqtt.password_hash(conn, "sensor1")
    finally:
        qm.close()
    assert stored is not None and mqtt.verify_password(b"secret", stored)


def test_sessions_keep_their_columns_whatever_the_length_of_a_client_id(
    database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(database_url, capsys, "db", "upgrade")[0] == 0
    long = "meter-" + "0123456789" * 6
    qm = QueueManager(make_engine(database_url))
    try:
        qm.define_queue(mqtt.queue_for("phone"))
        qm.put(mqtt.queue_for("phone"), Message(body=b"waiting"))
        with qm.unit_of_work() as uow:
            for client_id in (long, "phone"):
                stored = mqtt.StoredSession(
                    client_id,
                    mqtt.queue_for(client_id),
                    "alice",
                    False,
                    4,
                    "a:1",
                    1,
                    2,
                    owner="m1",
                    keepalive=45,
                )
                mqtt.save_session(uow.connection, stored)
            mqtt.record_traffic(uow.connection, "m1", {long: (1066, 13, 0), "phone": (1066, 13, 0)})
    finally:
        qm.close()
    code, out, _ = run(database_url, capsys, "mqtt", "sessions")
    header, *rows = out.splitlines()
    assert code == 0 and [row.split()[0] for row in rows] == [long, "phone"]
    for title, value in (("USER", "alice"), ("VERSION", "3.1.1"), ("ADDRESS", "a:1")):  # each under its title
        assert {row[header.index(title) :].split()[0] for row in rows} == {value}
    for title, values in (
        ("KEEPALIVE", ["45", "45"]),
        ("IN FLIGHT", ["0", "0"]),
        ("QUEUED", ["0", "1"]),
        ("BYTES IN", ["1066", "1066"]),
        ("BYTES OUT", ["13", "13"]),
    ):  # counts are aligned to the right: each ends where its title does
        assert [row[: header.index(title) + len(title)].split()[-1] for row in rows] == values, title
    code, out, _ = run(database_url, capsys, "mqtt", "sessions", "--json")
    phone = json.loads(out)[1]
    assert code == 0 and (phone["keepalive"], phone["queued"], phone["bytes_in"], phone["bytes_out"]) == (
        45,
        1,
        1066,
        13,
    )
