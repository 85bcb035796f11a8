"""What the ``broker`` command answers when something is wrong, run as the real command in a
subprocess: one line, with the MQ reason where there is one, a non-zero exit code, never a
traceback, never a message lost; and the hints a newcomer needs to take the next step."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import Engine

from queues import MQError, QueueManager, Reason, make_engine
from tests.certificates import Certificates
from tests.e2e.processes import BROKER, Brokers, child_environment


@dataclass
class Command:
    url: str
    cwd: Path

    def __call__(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BROKER), "--db", self.url, *argv],
            cwd=self.cwd,
            env=child_environment(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if not line.startswith("{")]  # JSON log lines aside
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.fixture
def broker(database_url: str, tmp_path: Path) -> Command:
    command = Command(database_url, tmp_path)
    assert command("db", "upgrade").returncode == 0
    return command


@pytest.fixture
def served(broker: Command, tmp_path: Path) -> Iterator[Command]:
    brokers = Brokers(broker.url, tmp_path)
    brokers.start()
    yield broker
    brokers.close()


def test_a_get_whose_output_is_closed_leaves_the_message_on_its_queue(broker: Command) -> None:
    """``broker get Q | head``: the message goes only once it has been written out."""
    assert broker("queue", "define", "Q").returncode == 0
    assert broker("put", "Q", "kept").returncode == 0
    get = subprocess.Popen(
        [str(BROKER), "--db", broker.url, "get", "Q"],
        cwd=broker.cwd,
        env=child_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert get.stdout is not None and get.stderr is not None
    get.stdout.close()  # the reader is gone before the broker writes a byte
    assert get.wait(60) == 1
    assert "the output was closed" in get.stderr.read()
    browsed = json.loads(broker("browse", "Q", "--json").stdout)
    assert [(m["body_text"], m["backout_count"]) for m in browsed] == [("kept", 1)]  # backed out, as MQ does
    assert json.loads(broker("get", "Q", "--json").stdout)["body_text"] == "kept"


@pytest.mark.parametrize(
    "argv", [("retained", "list"), ("queue", "list"), ("browse", "SYSTEM.DEAD.LETTER.QUEUE")]
)
def test_a_listing_whose_reader_stops_early_is_no_failure(broker: Command, argv: tuple[str, ...]) -> None:
    """``broker retained list | head -2``: the reader had what it wanted, and nothing was got."""
    listing = subprocess.Popen(
        [str(BROKER), "--db", broker.url, *argv],
        cwd=broker.cwd,
        env=child_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert listing.stdout is not None and listing.stderr is not None
    listing.stdout.close()
    assert listing.wait(60) == 0
    assert listing.stderr.read() == ""


def test_an_unsupported_database_url_is_one_usage_error(tmp_path: Path) -> None:
    done = Command("mysql://root@localhost/broker", tmp_path)("queue", "list")
    assert done.returncode == 2
    assert one_line(done).startswith("configuration error: database_url 'mysql://...' is not supported")


def test_spark_route_without_the_spark_extra_says_which_extra_to_install(broker: Command) -> None:
    code = (
        "import sys; sys.modules['py4j'] = sys.modules['pyspark'] = None;"  # as if not installed
        "from broker.cli import main;"
        f"sys.exit(main(['--db', {broker.url!r}, 'spark', 'route']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=child_environment()
    )
    assert done.returncode == 1
    assert "pip install 'wmq-psc-broker[spark]'" in one_line(done)


def test_a_port_in_use_is_one_line_and_nothing_starts(broker: Command) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = broker("--log-format", "json", "serve", "--api", "--port", str(port), timeout=60)
    assert done.returncode == 2
    assert one_line(done).startswith(f"configuration error: cannot listen on 127.0.0.1:{port}: ")
    assert "broker started" not in done.stderr


@pytest.mark.parametrize(
    ("flag", "scheme", "setting"),
    [
        ("--mqtt", "mqtt", "mqtt_listen"),
        ("--mqtt-tls", "mqtts", "mqtt_tls_listen"),
        ("--mqtt-ws", "ws", "mqtt_ws_listen"),
        ("--mqtt-wss", "wss", "mqtt_wss_listen"),
    ],
)
def test_an_mqtt_port_in_use_is_one_line_and_nothing_starts(
    broker: Command, certificates: Certificates, flag: str, scheme: str, setting: str
) -> None:
    """As the API's (exit code 2, the setting and the flag named), whichever the listener; the
    API's port, free, is never listened on: every port is bound before anything starts."""
    files = ["--tls-cert", str(certificates.server_cert), "--tls-key", str(certificates.server_key)]
    with socket.socket() as taken, socket.socket() as free:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        free.bind(("127.0.0.1", 0))
        port, api = taken.getsockname()[1], free.getsockname()[1]
        free.close()
        argv = ["--log-format", "json", "serve", "--api", "--port", str(api), flag, str(port), *files]
        done = broker(*argv, timeout=60)
    assert done.returncode == 2
    path = "/mqtt" if scheme in ("ws", "wss") else ""
    assert one_line(done) == (
        f"configuration error: cannot listen on {scheme}://127.0.0.1:{port}{path}: Address already in use "
        f"(the {setting} setting, {flag})"
    )
    assert done.stderr.count("{") == 0  # nothing started, so nothing logged


def test_commands_on_a_database_no_broker_has_served(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    """``engine``: migrated and named, without the broker's queues."""
    broker = Command(database_url, tmp_path)
    done = broker("subscribe", "--topic", "a", "--queue", "Q")
    assert done.returncode == 1
    assert one_line(done) == (
        "MQRC_UNKNOWN_OBJECT_NAME (2085): SYSTEM.BROKER.CONTROL.QUEUE is not defined on this database: "
        "no broker has been started on it ('broker serve' defines its queues, as does 'broker db upgrade')"
    )


def test_a_publication_nobody_routes_yet_is_said_to_wait_on_the_stream(broker: Command) -> None:
    done = broker("publish", "--topic", "a", "--timeout", "0.5", "x")
    assert done.returncode == 1
    assert one_line(done) == (
        "MQRC_NO_MSG_AVAILABLE (2033): no response from the broker within 0.5 s: is 'broker serve' running "
        "on this database? The Publish stays on SYSTEM.BROKER.DEFAULT.STREAM and takes effect when a "
        "broker routes it"
    )


def test_refusals_come_with_the_next_step(served: Command) -> None:
    missing = served("subscribe", "--topic", "Sport/#", "--queue", "NOSUCHQ")
    assert missing.returncode == 1
    assert missing.stdout.splitlines() == [
        "error",
        "  MQRCCF_Q_NAME_ERROR (3076) [QName]: queue NOSUCHQ does not exist",
        "  hint: the queue NOSUCHQ is not defined on this broker: broker queue define NOSUCHQ",
    ]
    assert served("queue", "define", "SCORES").returncode == 0
    assert served("subscribe", "--topic", "Sport/#", "--queue", "SCORES").returncode == 0
    narrower = served("request-update", "--topic", "Sport/Soccer", "--queue", "SCORES")
    assert narrower.returncode == 1
    assert narrower.stdout.splitlines()[-1] == (
        "  hint: request-update names one of the subscriber's subscriptions exactly as it was registered "
        "(wildcards included): broker subscriptions list --queue SCORES"
    )
    exact = json.loads(served("request-update", "--topic", "Sport/#", "--queue", "SCORES", "--json").stdout)
    assert exact["hints"] == []  # the registered topic: whatever the answer, it needs no hint
    assert exact["responses"][0]["reason"] != 3073


def test_every_list_and_show_command_speaks_json(broker: Command) -> None:
    for argv in (
        ("queue", "list"),
        ("queue", "show", "SYSTEM.DEAD.LETTER.QUEUE"),
        ("subscriptions", "list"),
        ("retained", "list"),
        ("acl", "list"),
        ("neighbour", "list"),
        ("token", "list"),
        ("db", "current"),
    ):
        done = broker(*argv, "--json")
        assert done.returncode == 0, (argv, done.stderr)
        json.loads(done.stdout)


def test_browse_decodes_an_mqrfh2_message_beside_its_bytes(broker: Command) -> None:
    assert broker("publish", "--topic", "Sport/Soccer", "--no-wait", "1-0").returncode == 0
    text = broker("browse", "SYSTEM.BROKER.DEFAULT.STREAM").stdout
    assert "bytes, binary (hex)" in text and "00000000:" in text  # the raw body, labelled
    assert "    folder psc      <psc><Command>Publish</Command><Topic>Sport/Soccer</Topic></psc>" in text
    assert "    command Publish  topics Sport/Soccer" in text
    assert "    payload  3 bytes, format MQSTR: 1-0" in text
    (shown,) = json.loads(broker("browse", "SYSTEM.BROKER.DEFAULT.STREAM", "--json").stdout)
    assert shown["rfh2"]["command"]["command"] == "Publish" and shown["rfh2"]["payload_text"] == "1-0"


def test_the_reply_queue_of_a_killed_client_is_abandoned_and_deleted(broker: Command) -> None:
    code = (
        "import os; from queues import QueueManager, make_engine; from broker.client import BrokerClient;"
        f"client = BrokerClient(QueueManager(make_engine({broker.url!r})));"
        "print(client.reply_queue, flush=True); os._exit(0)"  # killed: never closed
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=child_environment()
    )
    reply_queue = done.stdout.strip()
    qm = QueueManager(make_engine(broker.url))
    try:
        assert qm.inquire_queue(reply_queue).definition_type == "tempdyn"
        assert qm.holders(reply_queue) == []  # its holder is a process that is gone
        assert qm.delete_abandoned_queues(grace_ms=60_000) == []  # just defined: spared for a while
        assert qm.delete_abandoned_queues(grace_ms=0) == [reply_queue]
        with pytest.raises(MQError) as gone:
            qm.inquire_queue(reply_queue)
        assert gone.value.reason == Reason.MQRC_UNKNOWN_OBJECT_NAME
    finally:
        qm.close()


def test_tls_settings_in_error_are_one_line_before_anything_starts(
    tmp_path: Path, certificates: Certificates
) -> None:
    """Checked before the database is even opened (no SQL: one dialect says it all)."""
    database = tmp_path / "untouched.db"
    broker = Command(f"sqlite:///{database}", tmp_path)
    other_key = certificates.client("other")[1]
    files = ["--tls-cert", str(certificates.server_cert), "--tls-key", str(certificates.server_key)]
    cases = {
        ("serve", "--mqtt-tls", "8883"): (
            "TLS needs both tls_cert and tls_key (PEM files; --tls-cert, --tls-key)"
        ),
        ("serve", "--mqtt-wss", "localhost:x", *files): (
            "setting mqtt_wss_listen='localhost:x' is not valid: use [HOST:]PORT"
        ),
        ("serve", "--mqtt-ws", "0", "--tls-key", str(other_key)): (
            "setting mqtt_ws_listen='0' is not valid: the port must be 1 to 65535"
        ),
        ("serve", "--api", "--api-tls", *files[:2], "--tls-key", str(other_key)): (
            f"tls_key {other_key} does not match the certificate in tls_cert {certificates.server_cert}"
        ),
        ("api", "--api-tls", *files, "--tls-client-ca", str(tmp_path / "none.pem")): (
            f"cannot read tls_client_ca {tmp_path / 'none.pem'}: No such file or directory"
        ),
    }
    for argv, error in cases.items():
        done = broker(*argv)
        assert (done.returncode, one_line(done)) == (2, f"configuration error: {error}"), argv
    assert not database.exists()
