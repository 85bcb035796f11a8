"""The cycle collector, paced for a process that routes.

A router allocates some ten objects per delivery (the MQMD tuple, the row, the
effect), nearly all freed by reference counting as soon as their batch is
written. CPython's collector counts allocations, not garbage: with its default
thresholds (700, 10, 10) it ran 1,100 times while a 20,000-publication backlog
drained and took 11-12% of the router's time, each full collection walking the
loaded state too; with these, 39 times and 1.5% (docs/performance.md). The
service and the Spark job's Python workers both route, so both call it.
"""

from __future__ import annotations

import gc

COLLECTOR_THRESHOLDS = (10_000, 10, 100)


def tune_collector() -> None:
    """Leave what is loaded by now (modules, configuration, state) out of every collection,
    and collect young objects less often."""
    gc.collect()  # what is garbage now is not frozen with the rest
    gc.freeze()
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
