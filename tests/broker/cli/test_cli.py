"""The ``broker`` command, driven in-process on both dialects, plus one run of the installed script."""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine
from sqlalchemy.engine import make_url

import migrations
from broker.cli import main
from queues import Message, MQError, QueueManager, make_engine
from tests.conftest import DIALECTS
from tests.queues import databases

SYSTEM_QUEUES = ["SYSTEM.BROKER.CONTROL.QUEUE", "SYSTEM.BROKER.DEFAULT.STREAM", "SYSTEM.DEAD.LETTER.QUEUE"]


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    def fields(self) -> dict[str, str]:
        """``key   value`` lines (queue show/define) as a dict."""
        pairs = (line.partition(" ") for line in self.out.splitlines())
        return {key: value.strip() for key, _, value in pairs}


class Broker:
    """``broker --db URL ...`` in this process, with what it printed and its exit code (no
    ``--db`` for an empty URL: the default database)."""

    def __init__(self, url: str, capsys: pytest.CaptureFixture[str]) -> None:
        self.url = url
        self._capsys = capsys

    def __call__(self, *argv: str) -> Result:
        self._capsys.readouterr()
        try:
            code = main([*(["--db", self.url] if self.url else []), *argv])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        captured = self._capsys.readouterr()
        return Result(code, captured.out, captured.err)

    def ok(self, *argv: str) -> Result:
        result = self(*argv)
        assert result.code == 0, result.err
        return result


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No developer broker.toml or BROKER_* variables; the logging set-up of each run undone."""
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith("BROKER_") and name != "BROKER_TEST_PG_URL":
            monkeypatch.delenv(name)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def fresh(database_url: str, capsys: pytest.CaptureFixture[str]) -> Broker:
    """The command on an empty database."""
    return Broker(database_url, capsys)


@pytest.fixture(scope="module", params=DIALECTS)
def shared(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    yield from databases.shared_engine(request, tmp_path_factory)


@pytest.fixture
def broker(shared: Engine, capsys: pytest.CaptureFixture[str]) -> Broker:
    """The command on a migrated database of queue manager QM1 holding an empty queue Q1."""
    with QueueManager(databases.emptied(shared)) as qm:
        qm.define_queue("Q1")
    return Broker(shared.url.render_as_string(hide_password=False), capsys)


@pytest.fixture
def nowhere(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Iterator[Broker]:
    """The command on a database that is never opened (for errors found before that)."""
    yield Broker(f"sqlite:///{tmp_path / 'never.db'}", capsys)
    assert not (tmp_path / "never.db").exists()


def error_line(result: Result) -> str:
    """The ``MQRC_NAME (n): detail`` line (logging may add JSON lines around it)."""
    return next(line for line in result.err.splitlines() if line.startswith("MQRC"))


# -- db ----------------------------------------------------------------------------------------


def test_db_upgrade_and_current(fresh):
    head = migrations.head()
    assert fresh.ok("db", "upgrade").out == f"database at revision {head} ({fresh.url})\n"
    assert fresh.ok("db", "current").out == f"current {head}, head {head}\n"
    assert fresh.ok("db", "upgrade").out == f"database at revision {head} ({fresh.url})\n"


def test_db_upgrade_does_not_print_the_password(postgres, capsys):
    url = make_url(postgres.create()).set(password="s3cret").render_as_string(hide_password=False)
    try:
        result = Broker(url, capsys).ok("db", "upgrade")
    finally:
        postgres.drop(url)
    assert "s3cret" not in result.out
    assert result.out.endswith(f"({url.replace(':s3cret@', ':***@')})\n")


def test_db_upgrade_names_the_queue_manager_and_defines_the_brokers_queues(fresh):
    fresh.ok("--qmgr", "QMX", "db", "upgrade")
    with QueueManager(make_engine(fresh.url)) as qm:
        assert qm.name == "QMX"
        assert [q.name for q in qm.list_queues()] == [
            "SYSTEM.BROKER.CONTROL.QUEUE",
            "SYSTEM.BROKER.DEFAULT.STREAM",
            "SYSTEM.BROKER.INTER.BROKER.COMMUNICATIONS",
            "SYSTEM.DEAD.LETTER.QUEUE",
        ]
    result = fresh("--qmgr", "QMY", "db", "upgrade")
    assert result.code == 1
    assert error_line(result).startswith("MQRC_Q_MGR_NAME_ERROR (2058): ")


def test_db_downgrade_to_base_empties_the_database(fresh):
    fresh.ok("db", "upgrade")
    assert fresh.ok("db", "downgrade", "base").out == "database at revision None\n"
    assert fresh.ok("db", "current").out == f"current (empty), head {migrations.head()}\n"


def test_commands_on_a_database_never_upgraded_are_2059(fresh):
    result = fresh("queue", "list")
    assert result.code == 1
    assert error_line(result).startswith("MQRC_Q_MGR_NOT_AVAILABLE (2059): ")


# -- serve -------------------------------------------------------------------------------------


def _terminate_once_serving(sentinel: Any, deadline: float) -> None:
    """SIGTERM this process as soon as the service has put its own handler in place."""
    while time.monotonic() < deadline:
        if signal.getsignal(signal.SIGTERM) is not sentinel:
            os.kill(os.getpid(), signal.SIGTERM)
            return
        time.sleep(0.01)


def test_serve_prepares_the_database_and_stops_on_sigterm(fresh):
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def sentinel(*_: object) -> None:
        """Swallows a SIGTERM that would come too early (it never does: see the loop above)."""

    signal.signal(signal.SIGTERM, sentinel)
    stopper = threading.Thread(target=_terminate_once_serving, args=(sentinel, time.monotonic() + 30))
    stopper.start()
    try:
        started = time.monotonic()
        result = fresh("serve")
        stopper.join(5)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    assert result.code == 0, result.err
    assert time.monotonic() - started < 10
    listing = fresh.ok("queue", "list", "SYSTEM.*").out.splitlines()
    rows = {line.split()[0]: line.split()[1:3] for line in listing[1:]}
    for name in SYSTEM_QUEUES:
        assert rows[name][0] == "0"
    assert rows["SYSTEM.BROKER.DEFAULT.STREAM"][1] == "999999999"
    assert rows["SYSTEM.BROKER.CONTROL.QUEUE"][1] == "999999999"
    assert fresh.ok("db", "current").out == f"current {migrations.head()}, head {migrations.head()}\n"


# -- queue -------------------------------------------------------------------------------------


def test_queue_define_shows_every_attribute(broker):
    shown = broker.ok(
        "queue", "define", "APP.Q", "--max-depth", "10", "--max-msg-length", "1000", "--description",
        "orders", "--priority", "4", "--persistent", "--backout-threshold", "3", "--backout-queue",
        "APP.BO", "--put-inhibited", "--usage", "xmitq",
    ).fields()  # fmt: skip
    assert {k: v for k, v in shown.items() if k not in ("created_at", "altered_at")} == {
        "name": "APP.Q",
        "description": "orders",
        "max_depth": "10",
        "max_msg_length": "1000",
        "backout_threshold": "3",
        "backout_requeue_q": "APP.BO",
        "def_priority": "4",
        "def_persistence": "1",
        "put_enabled": "False",
        "get_enabled": "True",
        "usage": "xmitq",
        "definition_type": "predefined",
        "index_type": "none",
        "depth": "0",
        "put_count": "0",
        "get_count": "0",
    }
    assert broker.ok("queue", "show", "APP.Q").fields() == shown


def test_queue_define_defaults(broker):
    shown = broker.ok("queue", "show", "Q1").fields()
    assert (shown["max_depth"], shown["max_msg_length"], shown["def_priority"]) == ("5000", "4194304", "0")


def test_queue_define_twice_is_4001_unless_replace(broker):
    result = broker("queue", "define", "Q1", "--max-depth", "7")
    assert result.code == 1
    assert error_line(result) == "MQRCCF_OBJECT_ALREADY_EXISTS (4001): queue Q1 already exists"
    assert broker.ok("queue", "define", "Q1", "--replace", "--max-depth", "7").fields()["max_depth"] == "7"


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["queue", "define", "BAD NAME"], "MQRC_OBJECT_NAME_ERROR (2152)"),
        (["queue", "define", ".."], "MQRC_OBJECT_NAME_ERROR (2152)"),
        (["queue", "define", "APP.Q", "--priority", "10"], "MQRCCF_ATTR_VALUE_ERROR (4005)"),
        (["queue", "define", "APP.Q", "--usage", "other"], "MQRCCF_ATTR_VALUE_ERROR (4005)"),
        (["queue", "alter", "Q1", "--max-depth", "-1"], "MQRCCF_ATTR_VALUE_ERROR (4005)"),
        (["queue", "alter", "NOPE", "--max-depth", "1"], "MQRC_UNKNOWN_OBJECT_NAME (2085)"),
        (["queue", "show", "NOPE"], "MQRC_UNKNOWN_OBJECT_NAME (2085)"),
        (["queue", "purge", "NOPE"], "MQRC_UNKNOWN_OBJECT_NAME (2085)"),
        (["queue", "delete", "NOPE"], "MQRC_UNKNOWN_OBJECT_NAME (2085)"),
        (["put", "NOPE", "x"], "MQRC_UNKNOWN_OBJECT_NAME (2085)"),
        (["get", "NOPE"], "MQRC_UNKNOWN_OBJECT_NAME (2085)"),
        (["browse", "NOPE"], "MQRC_UNKNOWN_OBJECT_NAME (2085)"),
        (["put", "Q1", "x", "--priority", "10"], "MQRC_PRIORITY_ERROR (2050)"),
        (["put", "Q1", "x", "--expiry", "0"], "MQRC_EXPIRY_ERROR (2013)"),
        (["put", "Q1", "x", "--correl-id", "0xZZ"], "MQRC_MD_ERROR (2026)"),
        (["put", "Q1", "x", "--format", "TOOLONGFMT"], "MQRC_MD_ERROR (2026)"),
        (["get", "Q1"], "MQRC_NO_MSG_AVAILABLE (2033)"),
    ],
)
def test_mq_errors_exit_1_with_the_reason_on_stderr(broker, argv, reason):
    result = broker(*argv)
    assert result.code == 1
    assert error_line(result).startswith(f"{reason}: ")
    assert result.out == ""


def test_queue_alter(broker):
    altered = broker.ok("queue", "alter", "Q1", "--get-inhibited", "--description", "paused").fields()
    assert (altered["get_enabled"], altered["description"], altered["max_depth"]) == (
        "False",
        "paused",
        "5000",
    )
    assert broker.ok("queue", "alter", "Q1", "--get-enabled").fields()["get_enabled"] == "True"


def test_queue_list_with_and_without_a_pattern(broker):
    broker.ok("queue", "define", "Q2", "--max-depth", "42", "--description", "second")
    broker.ok("put", "Q2", "one")
    lines = broker.ok("queue", "list").out.splitlines()
    assert lines[0].split() == ["QUEUE", "DEPTH", "MAXDEPTH", "USAGE", "DESCRIPTION"]
    assert [line.split()[0] for line in lines[1:]] == ["Q1", "Q2", "SYSTEM.DEAD.LETTER.QUEUE"]
    assert lines[2].split() == ["Q2", "1", "42", "normal", "second"]
    assert [line.split()[0] for line in broker.ok("queue", "list", "Q?").out.splitlines()[1:]] == ["Q1", "Q2"]
    assert broker.ok("queue", "list", "NONE*").out.splitlines()[1:] == []


def test_queue_purge_and_delete(broker):
    for text in ("a", "b", "c"):
        broker.ok("put", "Q1", text)
    assert broker.ok("queue", "purge", "Q1").out == "3 messages purged from Q1\n"
    assert broker.ok("queue", "show", "Q1").fields()["depth"] == "0"
    broker.ok("put", "Q1", "d")
    result = broker("queue", "delete", "Q1")
    assert result.code == 1
    assert error_line(result).startswith("MQRC_Q_NOT_EMPTY (2055): ")
    assert broker.ok("queue", "delete", "Q1", "--purge").out == "queue Q1 deleted\n"
    assert broker("queue", "show", "Q1").code == 1
    broker.ok("queue", "define", "Q2")
    assert broker.ok("queue", "delete", "Q2").out == "queue Q2 deleted\n"


# -- put, get, browse --------------------------------------------------------------------------


def _put_id(result: Result, queue: str = "Q1") -> str:
    prefix = f"put to {queue}: msg_id "
    assert result.out.startswith(prefix)
    msg_id = result.out[len(prefix) :].strip()
    assert len(msg_id) == 48 and bytes.fromhex(msg_id)[:7] == b"AMQ QM1"
    return msg_id


def test_put_text_and_get_it(broker):
    msg_id = _put_id(broker.ok("put", "Q1", "hello"))
    lines = broker.ok("get", "Q1").out.splitlines()
    assert lines[0] == f"  {'msg_id':<14} {msg_id!r}"
    assert f"  {'format':<14} 'MQSTR'" in lines
    assert f"  {'put_appl_name':<14} 'broker'" in lines
    assert lines[-2:] == [f"  {'body':<14} 5 bytes, text", "hello"]
    assert broker("get", "Q1").code == 1


def test_put_from_a_file_is_byte_exact(broker, tmp_path):
    body = b"\x00RFH \x00\x00\x00\x02\xff binary"
    (tmp_path / "body.bin").write_bytes(body)
    broker.ok("put", "Q1", "--file", str(tmp_path / "body.bin"))
    got = broker.ok("get", "Q1", "--json").json()
    assert base64.b64decode(got["body_base64"]) == body
    assert got["body_text"] is None
    assert got["body_length"] == len(body)


def test_put_from_a_missing_file_is_a_usage_error(nowhere, tmp_path):
    result = nowhere("put", "Q1", "--file", str(tmp_path / "missing.bin"))
    assert result.code == 2
    assert "cannot read --file" in result.err


def test_put_from_stdin(broker, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"from stdin\n\x00end")))
    broker.ok("put", "Q1")
    got = broker.ok("get", "Q1", "--json").json()
    assert base64.b64decode(got["body_base64"]) == b"from stdin\n\x00end"


def test_put_options_reach_the_descriptor(broker):
    broker.ok(
        "put", "Q1", "payload", "--msg-id", "MYID", "--correl-id", "0x0102", "--reply-to", "REPLY.Q",
        "--reply-to-qmgr", "QM2", "--priority", "7", "--persistent", "--expiry", "600",
        "--format", "MQHRF2", "--msg-type", "request", "--user-id", "alice",
    )  # fmt: skip
    got = broker.ok("get", "Q1", "--json").json()
    assert got["msg_id"] == (b"MYID" + b"\x00" * 20).hex()
    assert got["correl_id"] == (b"\x01\x02" + b"\x00" * 22).hex()
    assert (got["reply_to_q"], got["reply_to_qmgr"], got["user_id"]) == ("REPLY.Q", "QM2", "alice")
    assert (got["priority"], got["persistence"], got["format"], got["msg_type"]) == (7, 1, "MQHRF2", 1)
    assert 590 <= got["expiry"] <= 600
    assert got["body_text"] == "payload"


def test_put_defaults_come_from_the_queue(broker):
    broker.ok("queue", "define", "Q2", "--priority", "6", "--persistent")
    broker.ok("put", "Q2", "x", "--msg-type", "4")
    got = broker.ok("get", "Q2", "--json").json()
    assert (got["priority"], got["persistence"], got["msg_type"], got["expiry"]) == (6, 1, 4, -1)
    broker.ok("put", "Q2", "y", "--non-persistent")
    assert broker.ok("get", "Q2", "--json").json()["persistence"] == 0


def test_get_by_msg_id_and_by_correl_id(broker):
    first = _put_id(broker.ok("put", "Q1", "first", "--correl-id", "ORDER1"))
    second = _put_id(broker.ok("put", "Q1", "second", "--correl-id", "ORDER2"))
    broker.ok("put", "Q1", "third", "--correl-id", "ORDER1")
    assert broker.ok("get", "Q1", "--msg-id", second, "--json").json()["body_text"] == "second"
    assert broker.ok("get", "Q1", "--msg-id", f"0x{first}", "--json").json()["body_text"] == "first"
    assert broker.ok("get", "Q1", "--correl-id", "ORDER1", "--json").json()["body_text"] == "third"
    result = broker("get", "Q1", "--correl-id", "ORDER2")
    assert result.code == 1
    assert error_line(result).startswith("MQRC_NO_MSG_AVAILABLE (2033): ")


def test_get_waits(broker):
    started = time.monotonic()
    assert broker("get", "Q1", "--wait", "0.3").code == 1
    assert time.monotonic() - started >= 0.3
    with QueueManager(make_engine(broker.url)) as qm:
        putter = threading.Timer(0.3, qm.put, args=("Q1", Message(body=b"late")))
        putter.start()
        got = broker.ok("get", "Q1", "--wait", "5", "--json").json()
        putter.join()
    assert got["body_text"] == "late"


def test_json_errors_go_to_stderr_as_json(broker):
    result = broker("get", "NOPE", "--json")
    assert result.code == 1
    last = json.loads(result.err.strip().splitlines()[-1])
    assert last == {
        "reason": 2085,
        "reason_name": "MQRC_UNKNOWN_OBJECT_NAME",
        "detail": "queue 'NOPE' is not defined",
    }


def test_browse_with_limit_leaves_the_messages(broker):
    for i in range(3):
        broker.ok("put", "Q1", f"body {i}", "--priority", str(i))
    out = broker.ok("browse", "Q1", "--limit", "2").out
    assert "message 1:" in out and "message 2:" in out and "message 3:" not in out
    assert out.index("body 2") < out.index("body 1")
    assert "body 0" not in out
    listed = broker.ok("browse", "Q1", "--json").json()
    assert [m["body_text"] for m in listed] == ["body 2", "body 1", "body 0"]
    assert [m["priority"] for m in listed] == [2, 1, 0]
    assert len(broker.ok("browse", "Q1", "--json", "--limit", "1").json()) == 1
    assert broker.ok("queue", "show", "Q1").fields()["depth"] == "3"


def test_browse_an_empty_queue(broker):
    assert broker.ok("browse", "Q1").out == "no messages on Q1\n"
    assert broker.ok("browse", "Q1", "--json").json() == []


# -- usage errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["bogus"],
        ["queue"],
        ["queue", "define"],
        ["queue", "define", "Q1", "--max-depth", "many"],
        ["queue", "define", "Q1", "--persistent", "--non-persistent"],
        ["put"],
        ["put", "Q1", "x", "--priority", "high"],
        ["put", "Q1", "x", "--file", "f", "--persistent", "--non-persistent"],
        ["get", "Q1", "--wait", "soon"],
        ["browse", "Q1", "--limit", "all"],
        ["--log-format", "xml", "queue", "list"],
    ],
)
def test_usage_errors_exit_2(nowhere, argv):
    result = nowhere(*argv)
    assert result.code == 2
    assert "usage: broker" in result.err


def test_text_and_file_together_is_a_usage_error(nowhere, tmp_path):
    (tmp_path / "f").write_bytes(b"x")
    result = nowhere("put", "Q1", "text", "--file", str(tmp_path / "f"))
    assert result.code == 2
    assert result.err == "give the body as TEXT or --file, not both\n"


def test_an_unknown_msg_type_is_a_usage_error(nowhere):
    result = nowhere("put", "Q1", "x", "--msg-type", "bogus")
    assert result.code == 2
    assert result.err.startswith("--msg-type 'bogus': use datagram, request, reply, report or a number")


def test_a_bad_configuration_file_is_a_usage_error(nowhere, tmp_path):
    result = nowhere("--config", str(tmp_path / "missing.toml"), "queue", "list")
    assert result.code == 2
    assert result.err.startswith("configuration error: cannot read configuration file")


# -- the installed console script --------------------------------------------------------------


def test_the_installed_broker_script(tmp_path):
    script = Path(sys.executable).parent / "broker"
    url = f"sqlite:///{tmp_path / 'broker.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    serving = subprocess.Popen(
        [str(script), "--db", url, "serve"], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not _system_queues_defined(url):
            time.sleep(0.05)
        serving.send_signal(signal.SIGTERM)
        _, err = serving.communicate(timeout=15)
    finally:
        if serving.poll() is None:
            serving.kill()
            serving.wait()
    assert serving.returncode == 0, err
    listing = subprocess.run(
        [str(script), "--db", url, "queue", "list", "SYSTEM.*"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert listing.returncode == 0
    assert set(SYSTEM_QUEUES) <= {line.split()[0] for line in listing.stdout.splitlines()[1:]}
    missing = subprocess.run(
        [str(script), "--db", url, "queue", "show", "NOPE"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 1
    assert "MQRC_UNKNOWN_OBJECT_NAME (2085)" in missing.stderr


def _system_queues_defined(url: str) -> bool:
    """The service defines its queues after installing its signal handlers."""
    engine = make_engine(url)
    try:
        with QueueManager(engine) as qm:
            return bool(qm.list_queues("SYSTEM.BROKER.*"))
    except MQError:
        return False
    finally:
        engine.dispose()
