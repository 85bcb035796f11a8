"""``broker spark route`` in a process a test kills: ``python -m tests.spark.killable URL POINT``.

POINT ``staging``: the merge never starts, so a kill at any moment lands before it.
POINT ``merge``: the merge stops inside its transaction, after the messages are inserted and
before the backlog is deleted, and says so on stdout (``MERGING``).
Either way the process then waits to be killed; it never finishes on its own.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from broker import cli
from broker.spark import merge, staging


def hold(*_args: Any, **_kwargs: Any) -> Any:
    print("MERGING", flush=True)
    time.sleep(3600)


def main(url: str, point: str) -> int:
    if point == "staging":
        merge.merge = hold  # type: ignore[assignment]
    else:
        staging.delete_backlog = hold  # type: ignore[assignment]
    args = ["--db", url, "--log-level", "WARNING", "spark", "route", "--master", "local[1]"]
    return cli.main([*args, "--partitions", "6", "--batch-size", "50", "--lease-seconds", "3"])


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
