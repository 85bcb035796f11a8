"""Structured logging: one JSON object per line, with every ``extra`` field, or the same
fields as readable text.

Operators grep and ship these lines; the routing loop logs what it routed,
what it refused and why as fields (``reason``, ``reason_name``, ``topic``...)
rather than prose, so they can be counted without parsing sentences. The format
``auto`` (the default) writes text when standard error is a terminal, where a
person reads it, and JSON otherwise, where a collector does.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from datetime import datetime
from typing import Any

# Record attributes that are not fields: logging's own, and uvicorn's copy of each message
# with terminal colour codes (``color_message``), which no log should carry.
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName", "color_message"}
# A text field's value is written bare when it is one word without quotes, else quoted.
_BARE = re.compile(r'[^\s"\\=\x00-\x1f\x7f]+')


class JsonFormatter(logging.Formatter):
    """One JSON object a line. The time's second is formatted once a second, not once a line:
    a connect storm logs thousands of lines a second."""

    def __init__(self) -> None:
        super().__init__()
        self._second: tuple[int, str] = (-1, "")

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": f"{self._stamp(int(record.created))}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            "pid": record.process,  # routers sharing a log (``routers`` > 1) told apart
        }
        for key, value in _fields(record):
            entry[key] = value if isinstance(value, str | int | float | bool | None) else str(value)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)

    def _stamp(self, second: int) -> str:
        cached, stamp = self._second
        if cached != second:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = (second, stamp)
        return stamp


class TextFormatter(logging.Formatter):
    """Human-readable lines: local ISO-8601 time, level, pid, the message, then the
    structured fields as key=value, a value with blanks, quotes or ``=`` in double quotes with
    JSON's escapes (``reason="broker shutting down"``), so that every field reads back whole."""

    def format(self, record: logging.LogRecord) -> str:
        extras = " ".join(f"{k}={_text(v)}" for k, v in _fields(record))
        when = datetime.fromtimestamp(record.created).astimezone().isoformat(timespec="milliseconds")
        base = f"{when} {record.levelname:<7} [{record.process}] {record.getMessage()}"
        text = f"{base} {extras}" if extras else base
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def _fields(record: logging.LogRecord) -> list[tuple[str, Any]]:
    """The structured fields of ``record``: what its ``extra`` added."""
    return [(k, v) for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")]


def _text(value: Any) -> str:
    text = str(value)
    return text if _BARE.fullmatch(text) else json.dumps(text, ensure_ascii=False)


def configure(level: str = "INFO", fmt: str = "auto") -> None:
    """Log to standard error in ``fmt``: ``json``, ``text``, or ``auto`` (text on a terminal)."""
    if fmt == "auto":
        fmt = "text" if sys.stderr.isatty() else "json"
    # No record carries its thread or process name: neither format writes them, and every
    # line would look them up (the logging HOWTO's "Optimization").
    logging.logThreads = logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Alembic narrates every migration step, and httpx every request (the channels and the
    # topology check), at INFO: operators only need their warnings.
    for chatty in ("alembic", "httpx", "httpcore"):
        logging.getLogger(chatty).setLevel(max(logging.WARNING, root.level))
