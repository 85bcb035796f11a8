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
from tests.e2e.processes import free_port


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


def test_text_quotes_a_value_that_is_not_one_word(monkeypatch, restored):
    """A value with a blank, a quote, a backslash or ``=``, or an empty one, is written in double
    quotes with JSON's escapes, so that every field reads back whole."""
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    logs.configure("INFO", "text")
    fields = {
        "queue": "Q1",
        "reason": "broker shutting down",
        "said": 'a "b"',
        "expr": "a=b",
        "empty": "",
    }
    logging.getLogger("broker.test").info("mqtt connection closed", extra=fields)
    line = sys.stderr.getvalue().rstrip("\n")
    assert line.split(maxsplit=3)[3] == (
        'mqtt connection closed queue=Q1 reason="broker shutting down" said="a \\"b\\"" expr="a=b" empty=""'
    )


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_uvicorns_coloured_copy_of_a_message_is_not_logged(monkeypatch, restored, fmt):
    out = io.StringIO()
    monkeypatch.setattr(sys, "stderr", out)
    logs.configure("INFO", fmt)
    coloured = "Started server process [\x1b[36m%d\x1b[0m]"
    logging.getLogger("uvicorn.error").info(
        "Started server process [%d]", 7, extra={"color_message": coloured}
    )
    logged = out.getvalue()
    assert "Started server process [7]" in logged
    assert "color_message" not in logged and "\x1b" not in logged and "\\u001b" not in logged


def test_broker_serve_on_a_real_terminal_logs_text(tmp_path):
    """The whole command with its standard error on a pseudo-terminal, as an operator runs it:
    where each of its listeners listens, and no terminal colour codes from uvicorn."""
    controller, terminal = pty.openpty()
    url = f"sqlite:///{tmp_path / 'broker.db'}"
    api, mqtt, ws = free_port(), free_port(), free_port()
    listen = ["--api", "--port", str(api), "--mqtt", str(mqtt), "--mqtt-ws", str(ws)]
    serve = subprocess.Popen(
        [sys.executable, "-m", "broker.cli", "--db", url, "serve", *listen],
        stderr=terminal,
        stdout=subprocess.DEVNULL,
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
    lines = [line.split(maxsplit=3) for line in seen.splitlines()]
    when, level, pid, rest = next(line for line in lines if line[3].startswith("broker started"))
    assert datetime.fromisoformat(when).utcoffset() is not None
    assert (level, pid) == ("INFO", f"[{serve.pid}]")
    assert rest.strip().startswith("broker started qmgr=QM1 ")
    assert {line[3].strip() for line in lines if line[3].startswith("listening ")} == {
        f'listening listener="MQTT over WebSockets" url=ws://127.0.0.1:{ws}/mqtt',
        f"listening listener=MQTT url=mqtt://127.0.0.1:{mqtt}",
        f'listening listener="admin API" url=http://127.0.0.1:{api}/api/v1',
        f'listening listener="web console" url=http://127.0.0.1:{api}/',
    }
    assert "\x1b" not in seen and "color_message" not in seen
