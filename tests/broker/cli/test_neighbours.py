"""``broker neighbour add`` takes the link's secret from a file or standard input, so that it
need not appear on a command line (the process list, a shell history, a compose file)."""

from __future__ import annotations

import io
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
