"""broker.service.logs: JSON for collectors, text for people, and ``auto`` choosing by the terminal."""

from __future__ import annotations

import io
import json
import logging
import os
import pty
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime

import pytest

from broker.service import logs


@pytest.fixture
def restored() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _emit(monkeypatch: pytest.MonkeyPatch, stream: io.StringIO, fmt: str) -> str:
    monkeypatch.setattr(sys, "stderr", stream)
    logs.configure("INFO", fmt)
    logging.getLogger("broker.test").info("batch routed", extra={"queue": "Q", "messages": 3})
    return stream.getvalue()


def test_auto_writes_json_where_no_person_reads(monkeypatch, restored):
    entry = json.loads(_emit(monkeypatch, io.StringIO(), "auto"))
    assert (entry["msg"], entry["queue"], entry["messages"], entry["pid"]) == (
        "batch routed",
        "Q",
        3,
        os.getpid(),
    )
    assert entry["ts"].endswith("Z")


def test_auto_writes_text_on_a_terminal_with_local_iso_time_and_pid(monkeypatch, restored):
    line = _emit(monkeypatch, Terminal(), "auto").rstrip("\n")
    when, level, pid, rest = line.split(maxsplit=3)
    stamp = datetime.fromisoformat(when)
    assert stamp.utcoffset() == datetime.now().astimezone().utcoffset()  # local time, offset stated
    assert abs(stamp.timestamp() - datetime.now().timestamp()) < 60
    assert (level, pid) == ("INFO", f"[{os.getpid()}]")
    assert rest.strip() == "batch routed queue=Q messages=3"


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_an_explicit_format_wins_over_the_terminal(monkeypatch, restored, fmt):
    out = _emit(monkeypatch, Terminal(), fmt)
    assert out.startswith("{") == (fmt == "json")


def test_broker_serve_on_a_real_terminal_logs_text(tmp_path):
    """The whole command with its standard error on a pseudo-terminal, as an operator runs it."""
    controller, terminal = pty.openpty()
    url = f"sqlite:///{tmp_path / 'broker.db'}"
    serve = subprocess.Popen(
        [sys.executable, "-m", "broker.cli", "--db", url, "serve"], stderr=terminal, stdout=subprocess.DEVNULL
    )
    os.close(terminal)
    seen = ""
    try:
        deadline = time.monotonic() + 60
        while "broker started" not in seen and time.monotonic() < deadline:
            if select.select([controller], [], [], 1)[0]:
                seen += os.read(controller, 4096).decode()
    finally:
        serve.terminate()
        serve.wait(30)
        os.close(controller)
    line = next(line for line in seen.splitlines() if "broker started" in line)
    when, level, pid, rest = line.split(maxsplit=3)
    assert datetime.fromisoformat(when).utcoffset() is not None
    assert (level, pid) == ("INFO", f"[{serve.pid}]")
    assert rest.strip().startswith("broker started qmgr=QM1 ")
