"""``broker neighbour``: ``add`` and ``alter`` take the link's secret from a file or standard
input, so that it need not appear on a command line (the process list, a shell history, a
compose file); ``stop`` and ``start`` change the channel, and ``list`` shows its state."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from broker.cli import main
from broker.network import links
from queues import QueueManager

SECRET = "link-secret-0123456789abcdef"


def add(qm: QueueManager, *argv: str) -> int:
    url = qm.engine.url.render_as_string(hide_password=False)
    try:
        return main(["--db", url, "neighbour", "add", "QMB", "--url", "http://127.0.0.1:9", *argv])
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1


def stored(qm: QueueManager) -> str | None:
    with qm.reading() as conn:
        link = links.get_link(conn, "QMB")
    return link.token if link is not None else None


def test_the_secret_comes_from_a_file(qm: QueueManager, tmp_path: Path) -> None:
    secret = tmp_path / "link_ab"
    secret.write_text(SECRET + "\n")  # as `echo` or a container secret leaves it
    assert add(qm, "--token-file", str(secret), "--no-topology-check") == 0
    assert stored(qm) == SECRET


def test_the_secret_comes_from_standard_input(qm: QueueManager, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(SECRET + "\n"))
    assert add(qm, "--token-file", "-", "--no-topology-check") == 0
    assert stored(qm) == SECRET


@pytest.mark.parametrize(
    "argv",
    [
        (),  # no secret at all
        ("--token", SECRET, "--token-file", "-"),  # two
        ("--token-file", "/nonexistent/link_ab"),
    ],
)
def test_one_readable_secret_or_a_usage_error(
    qm: QueueManager, argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    assert add(qm, *argv, "--no-topology-check") == 2
    assert "Traceback" not in capsys.readouterr().err
    assert stored(qm) is None


def run(qm: QueueManager, *argv: str) -> int:
    url = qm.engine.url.render_as_string(hide_password=False)
    try:
        return main(["--db", url, "neighbour", *argv])
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1


def test_alter_changes_the_url_and_the_token_from_a_file(
    qm: QueueManager, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert add(qm, "--token", SECRET, "--no-topology-check") == 0
    capsys.readouterr()
    secret = tmp_path / "new_secret"
    secret.write_text("another-link-secret-0123\n")
    assert run(qm, "alter", "QMB", "--url", "http://moved:8080", "--token-file", str(secret), "--json") == 0
    assert json.loads(capsys.readouterr().out) == {
        "name": "QMB",
        "url": "http://moved:8080",
        "token_changed": True,
    }
    with qm.reading() as conn:
        link = links.get_link(conn, "QMB")
    assert link is not None and (link.url, link.token) == ("http://moved:8080", "another-link-secret-0123")


def test_alter_needs_something_to_change(qm: QueueManager, capsys: pytest.CaptureFixture[str]) -> None:
    assert add(qm, "--token", SECRET, "--no-topology-check") == 0
    capsys.readouterr()
    assert run(qm, "alter", "QMB") == 2
    assert "give --url, --token or --token-file" in capsys.readouterr().err
    assert stored(qm) == SECRET


def test_stop_and_start_the_channel_and_list_shows_it(
    qm: QueueManager, capsys: pytest.CaptureFixture[str]
) -> None:
    assert add(qm, "--token", SECRET, "--no-topology-check") == 0
    capsys.readouterr()
    assert run(qm, "stop", "QMB") == 0
    assert run(qm, "stop", "QMB") == 0
    assert capsys.readouterr().out.splitlines() == [
        "channel to QMB stopped",
        "channel to QMB was already stopped",
    ]
    assert run(qm, "list", "--json") == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert listed["state"] == "stopped" and listed["stopped_at"] is not None
    assert run(qm, "list") == 0
    assert capsys.readouterr().out.splitlines()[1].split()[:2] == ["QMB", "stopped"]
    assert run(qm, "start", "QMB", "--json") == 0
    assert json.loads(capsys.readouterr().out) == {"name": "QMB", "stopped": False, "changed": True}
    assert run(qm, "start", "QMB") == 0
    assert capsys.readouterr().out == "channel to QMB was already running\n"
    with qm.reading() as conn:
        assert not links.get_link(conn, "QMB").stopped  # type: ignore[union-attr]


@pytest.mark.parametrize("verb", ["stop", "start"])
def test_the_channel_of_no_neighbour_is_an_mq_error(
    qm: QueueManager, verb: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(qm, verb, "QMX") == 1
    assert "3085" in capsys.readouterr().err
