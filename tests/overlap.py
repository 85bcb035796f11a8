"""Two writers at once, made deterministic: the second starts while the first's transaction is
still open, so a check-then-insert race shows every time on PostgreSQL (on SQLite the second
waits for the write lock before it reads)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Engine

Writer = Callable[[Connection], Any]


def overlapping(engine: Engine, first: Writer, second: Writer, *, hold: float = 0.3) -> tuple[Any, Any]:
    """Run ``first`` and, before it commits, ``second`` in another transaction; return what each
    returned, or the exception the second raised."""
    results: dict[str, Any] = {}

    def run_second() -> None:
        try:
            with engine.begin() as conn:
                results["second"] = second(conn)
        except Exception as exc:
            results["second"] = exc

    with engine.begin() as conn:
        results["first"] = first(conn)
        thread = threading.Thread(target=run_second)
        thread.start()
        time.sleep(hold)
    thread.join(timeout=30)
    return results["first"], results["second"]
