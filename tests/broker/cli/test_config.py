"""``broker config export`` and ``broker config import`` as whole processes, on both dialects: a
broker set up with the CLI, exported, imported into a new database (a dry run first), imported
again (no changes); a file with problems lists them all and changes nothing; the link token only
with ``--secrets``; the import in the audit log."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.admin import accounts
from queues import QueueManager, make_engine
from tests.conftest import PostgresDatabases
from tests.e2e.processes import BROKER, child_environment

TOKEN = "link-secret-0123456789abcdef"


def broker(url: str, *argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BROKER), "--db", url, "--log-format", "text", *argv],
        input=stdin,
        capture_output=True,
        text=True,
        env=child_environment(),
        timeout=120,
    )


def ok(url: str, *argv: str, stdin: str | None = None) -> str:
    done = broker(url, *argv, stdin=stdin)
    assert done.returncode == 0, (argv, done.stderr)
    return done.stdout


@pytest.fixture
def second(database_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """Another new database of the same kind, made ready by ``broker db upgrade``."""
    if database_url.startswith("sqlite"):
        url = f"sqlite:///{tmp_path / 'second.db'}"
    else:
        postgres: PostgresDatabases = request.getfixturevalue("postgres")
        url = postgres.create()
    ok(url, "db", "upgrade")
    yield url
    if not database_url.startswith("sqlite"):
        postgres.drop(url)


@pytest.fixture
def first(database_url: str) -> str:
    """A broker set up through the CLI: queues, rules, a group, an MQTT principal, a neighbour."""
    url = database_url
    ok(url, "db", "upgrade")
    ok(url, "queue", "define", "APP.IN", "--max-depth", "100", "--description", "orders in")
    ok(url, "queue", "define", "APP.OUT", "--put-inhibited")
    ok(url, "acl", "add", "--principal", "alice", "--topic", "Sport/#", "--permission", "publish", "--deny")
    ok(url, "group", "add", "traders", "alice")
    ok(url, "mqtt", "passwd", "sensor1", "--password-stdin", stdin="s3cret\n")
    ok(
        url,
        "neighbour",
        "add",
        "QMB",
        "--url",
        "http://qmb.example:8080",
        "--token",
        TOKEN,
        "--no-topology-check",
    )
    return url


def body(text: str) -> str:
    """The file without its first line, the date of the export."""
    return text.split("\n", 1)[1]


def test_an_export_imported_into_a_new_broker_is_the_same_broker(
    first: str, second: str, tmp_path: Path
) -> None:
    saved = tmp_path / "qm1.toml"
    assert (
        ok(first, "config", "export", "--secrets", "-o", str(saved)) == f"configuration written to {saved}\n"
    )
    text = saved.read_text(encoding="utf-8")
    assert text.startswith("# Configuration of queue manager QM1, exported ")
    expected = [
        "create queue APP.IN",
        "create queue APP.OUT",
        "create acl rule user alice publish Sport/#",
        "create group traders",
        "create neighbour QMB",
        "create mqtt principal sensor1",
    ]
    before = ok(second, "config", "export", "--secrets")
    assert ok(second, "config", "import", str(saved), "--dry-run").splitlines() == expected
    assert body(ok(second, "config", "export", "--secrets")) == body(before)  # the dry run changed nothing
    assert ok(second, "config", "import", str(saved)).splitlines() == expected
    assert body(ok(second, "config", "export", "--secrets")) == body(
        ok(first, "config", "export", "--secrets")
    )
    assert ok(second, "config", "import", "-", stdin=text) == "no changes\n"
    report = json.loads(ok(second, "config", "import", str(saved), "--json"))
    assert report == {"dry_run": False, "changes": [], "left": []}
    engine = make_engine(second)
    try:
        with QueueManager(engine) as qm, qm.reading() as conn:
            (entry,) = [e for e in accounts.list_audit(conn) if e.path == "broker config import"]
        assert (entry.method, entry.summary["changes"]) == ("CLI", expected)
    finally:
        engine.dispose()


def test_the_link_token_is_exported_only_with_secrets(first: str) -> None:
    plain, secret = ok(first, "config", "export"), ok(first, "config", "export", "--secrets")
    assert TOKEN not in plain and f'token = "{TOKEN}"' in secret
    assert 'password_hash = "scrypt$' in plain and "s3cret" not in secret
    as_json = json.loads(ok(first, "config", "export", "--json"))["configuration"]
    assert body(as_json) == body(plain)


def test_a_file_with_problems_lists_every_one_and_changes_nothing(first: str, tmp_path: Path) -> None:
    saved = tmp_path / "bad.toml"
    good = ok(first, "config", "export")
    saved.write_text(
        good.replace("max_depth = 100\n", "max_depth = -1\n")
        + '\n[[queue]]\nname = "NEW QUEUE"\n\n[[acl_rule]]\nprincipal = "bob"\ntopic = "Sport"\nallow = 1\n',
        encoding="utf-8",
    )
    failed = broker(first, "config", "import", str(saved))
    assert failed.returncode == 1 and failed.stdout == ""
    lines = failed.stderr.splitlines()
    assert lines[0] == f"{saved}: 4 problem(s), nothing changed:"
    assert [line.removeprefix(f"{saved}: ").split(": ", 3)[2] for line in lines[1:]] == [
        "max_depth",
        "name",
        "permission",
        "allow",
    ]
    assert all(line.startswith(f"{saved}: line ") for line in lines[1:])
    assert "Traceback" not in failed.stderr
    assert body(ok(first, "config", "export")) == body(good)
    as_json = broker(first, "config", "import", str(saved), "--json")
    assert as_json.returncode == 1 and len(json.loads(as_json.stderr)["problems"]) == 4
    missing = broker(first, "config", "import", str(tmp_path / "nowhere.toml"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr


def test_prune_deletes_what_the_file_leaves_out(first: str, tmp_path: Path) -> None:
    saved = tmp_path / "less.toml"
    text = ok(first, "config", "export", "--secrets")
    saved.write_text(
        text.replace('[[queue]]\nname = "APP.OUT"', '[[queue]]\nname = "APP.OUT2"'), encoding="utf-8"
    )
    assert ok(first, "config", "import", str(saved)).splitlines() == [
        "create queue APP.OUT2",
        "leave queue APP.OUT: not in the file",
    ]
    assert ok(first, "config", "import", str(saved), "--prune").splitlines() == ["delete queue APP.OUT"]
    assert "APP.OUT\n" not in ok(first, "queue", "list", "APP.*").replace(" ", "\n")
