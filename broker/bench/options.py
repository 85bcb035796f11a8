"""What every benchmark's command line shares: checked numbers and lists, and the output."""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from broker.service.logs import TextFormatter

DATABASES = ("sqlite", "postgresql")


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: at least 1")
    return value


def numbers(text: str) -> tuple[int, ...]:
    """A comma-separated list of positive numbers (batch sizes, rates)."""
    return tuple(positive(part) for part in text.split(","))


def database_list(text: str) -> tuple[str, ...]:
    kinds = tuple(text.split(","))
    unknown = set(kinds) - set(DATABASES)
    if unknown:
        raise argparse.ArgumentTypeError(f"{', '.join(sorted(unknown))}: use sqlite and/or postgresql")
    return kinds


def emit(args: argparse.Namespace, value: Any, text: str) -> None:
    """The figures as a table, or as JSON with ``--json``."""
    print(json.dumps(value, indent=2, default=str) if getattr(args, "json", False) else text)


def log_file() -> Path:
    """Where this run's broker log lines go, its own routers' and the broker processes' it
    starts alike: a file, so that they never interleave with the figures on the terminal."""
    return Path(tempfile.gettempdir()) / f"broker-bench-{os.getpid()}.log"


def capture_logs() -> Path:
    """Send this process's log records to :func:`log_file` (the benchmark's own routers log
    every batch at INFO)."""
    path = log_file()
    handler = logging.FileHandler(path)
    handler.setFormatter(TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    return path
