"""``broker spark route`` in a process a test kills: ``python -m tests.broker.spark.killable URL``.

Run with ``tests/broker/spark/hold`` on PYTHONPATH and ``BROKER_TEST_HOLD_AT`` /
``BROKER_TEST_HOLD_FILE`` set (see its ``sitecustomize``): the job then stops inside the
transaction of that partition and waits to be killed; it never finishes on its own.
"""

from __future__ import annotations

import sys

from broker import cli


def main(url: str) -> int:
    args = ["--db", url, "--log-level", "WARNING", "spark", "route", "--master", "local[1]"]
    return cli.main([*args, "--partitions", "6", "--batch-size", "50", "--lease-seconds", "3"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
