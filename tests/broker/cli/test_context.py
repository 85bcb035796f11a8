"""Which database a command opens (``broker.cli.context``): only ``db upgrade`` and ``serve``
create one, and the database names its queue manager, so no command needs ``--qmgr``."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import inspect

from broker.cli import build_parser
from queues import QueueManager, make_engine
from tests.broker.cli.test_cli import Broker, error_line


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No developer broker.toml or BROKER_* variables; a password for ``mqtt passwd`` on stdin."""
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith("BROKER_") and name != "BROKER_TEST_PG_URL":
            monkeypatch.delenv(name)
    monkeypatch.setattr("sys.stdin", io.StringIO("secret\n"))
    yield


# Commands that read or change a queue manager's database but never make one.
USERS = [
    ("token", "create", "--role", "admin"),
    ("mqtt", "passwd", "dev1", "--password-stdin"),
    ("mqtt", "sessions"),
    ("queue", "define", "Q"),
    ("queue", "list"),
    ("acl", "list"),
]


@pytest.mark.parametrize("argv", [*USERS, ("db", "current")], ids=" ".join)
def test_a_command_run_elsewhere_refuses_the_missing_database_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    result = _default_database(capsys)(*argv)
    assert result.code == 1
    assert error_line(result) == (
        f"MQRC_Q_MGR_NOT_AVAILABLE (2059): no database at {elsewhere / 'broker.db'}: name the queue "
        "manager's database with --db URL or BROKER_DATABASE_URL ('broker db upgrade' or 'broker serve' "
        "creates a new one)"
    )
    assert list(elsewhere.iterdir()) == []  # no database, no writer lock beside it


@pytest.mark.parametrize("argv", USERS, ids=" ".join)
def test_a_command_leaves_a_database_it_did_not_find_as_it_was(
    database_url: str, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    """On SQLite no file appears; on PostgreSQL the empty database gets no tables."""
    result = Broker(database_url, capsys)(*argv)
    assert result.code == 1
    assert error_line(result).startswith("MQRC_Q_MGR_NOT_AVAILABLE (2059): ")
    if database_url.startswith("sqlite"):
        assert not Path(database_url.removeprefix("sqlite:///")).exists()
        return
    engine = make_engine(database_url)
    try:
        assert inspect(engine).get_table_names() == []
    finally:
        engine.dispose()


def test_db_upgrade_creates_the_default_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    here = _default_database(capsys)
    assert here("db", "upgrade").code == 0
    listed = here("queue", "list", "--json")
    assert listed.code == 0 and "SYSTEM.DEAD.LETTER.QUEUE" in listed.out
    assert (tmp_path / "broker.db").exists()


def test_no_command_needs_the_name_of_the_databases_queue_manager(
    database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    broker = Broker(database_url, capsys)
    broker.ok("--qmgr", "QM2", "db", "upgrade")
    broker.ok("token", "create", "--role", "admin")
    broker.ok("mqtt", "passwd", "dev1", "--password-stdin")
    broker.ok("queue", "define", "Q")
    assert json.loads(broker.ok("db", "upgrade", "--json").out)["qmgr"] == "QM2"
    with QueueManager(make_engine(database_url)) as qm:
        assert qm.name == "QM2"


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        (("--qmgr", "QM1"), "--qmgr"),
        (("--config", "broker.toml"), "qmgr_name in the file broker.toml"),
    ],
    ids=["flag", "file"],
)
def test_a_queue_manager_name_that_disagrees_is_refused_by_every_command(
    database_url: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    setting: tuple[str, str],
    named: str,
) -> None:
    (tmp_path / "broker.toml").write_text('qmgr_name = "QM1"\n')
    broker = Broker(database_url, capsys)
    broker.ok("--qmgr", "QM2", "db", "upgrade")
    for argv in [*USERS, ("db", "upgrade")]:
        result = broker(*setting, *argv)
        assert result.code == 1, argv
        assert error_line(result) == (
            f"MQRC_Q_MGR_NAME_ERROR (2058): this database belongs to queue manager 'QM2', not 'QM1' "
            f"({named}): leave the name out, the database knows it"
        )
    with QueueManager(make_engine(database_url)) as qm:
        assert [q.name for q in qm.list_queues("Q")] == []


def test_the_environment_names_the_queue_manager_too(
    database_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = Broker(database_url, capsys)
    broker.ok("--qmgr", "QM2", "db", "upgrade")
    monkeypatch.setenv("BROKER_QMGR_NAME", "QM2")
    broker.ok("queue", "define", "Q")
    monkeypatch.setenv("BROKER_QMGR_NAME", "QM9")
    assert "(BROKER_QMGR_NAME)" in error_line(broker("queue", "list"))


def test_a_subscribers_queue_manager_is_not_the_databases() -> None:
    """``subscribe --qmgr`` names where the subscriber's queue is (a neighbour's, say), which
    the global ``--qmgr`` before the command must not be mistaken for, nor overwritten by."""
    parser = build_parser()
    args = parser.parse_args(["--qmgr", "QM1", "subscribe", "--topic", "t", "--queue", "Q", "--qmgr", "QMB"])
    assert (args.qmgr, args.subscriber_qmgr) == ("QM1", "QMB")
    args = parser.parse_args(["subscriptions", "list", "--qmgr", "QMB"])
    assert (args.qmgr, args.subscriber_qmgr) == (None, "QMB")


def _default_database(capsys: pytest.CaptureFixture[str]) -> Broker:
    """The command without ``--db``: the default database, in the working directory."""
    return Broker("", capsys)
