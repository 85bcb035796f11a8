"""Imported at start-up by every Python process of a job the kill test runs (its directory
is put on PYTHONPATH), the Spark workers included: with ``BROKER_TEST_HOLD_AT`` set, the
transaction of partition ``BROKER_TEST_HOLD_AT`` (or a later one) stops once it has written
everything but its marker's summary, creates the file ``BROKER_TEST_HOLD_FILE`` to say so,
and waits to be killed."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

if os.environ.get("BROKER_TEST_HOLD_AT"):
    from broker.spark import runs

    _at = int(os.environ["BROKER_TEST_HOLD_AT"])
    _finish = runs.finish_part

    def _held(conn: Any, job: str, part: int, summary: Any) -> None:
        if part >= _at:
            Path(os.environ["BROKER_TEST_HOLD_FILE"]).write_text(str(part))
            time.sleep(3600)
        _finish(conn, job, part, summary)

    runs.finish_part = _held  # type: ignore[assignment]
