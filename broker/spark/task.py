"""The executor side of ``broker spark route``: one task routes one partition and
commits it in its turn.

Spark runs :func:`route_partition` through ``mapInArrow`` on each partition of
the backlog. A Python worker rebuilds the job's routing state once from the
broadcast :class:`TaskSpec` (Spark reuses workers across tasks) and keeps one
database engine per URL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

from broker.core.state import BrokerState
from broker.service.collector import tune_collector
from broker.spark import commit, runs
from broker.spark.partition import TaskSpec, route_rows
from queues import make_engine

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark import Broadcast

SUMMARY_SCHEMA = "part LONG, " + ", ".join(f"{name} LONG" for name in runs.SUMMARY_FIELDS)


# Per Python worker process (Spark reuses them across tasks): the job being run, rebuilt
# once from its broadcast, and one engine per database.
_PREPARED: dict[str, tuple[TaskSpec, BrokerState]] = {}
_ENGINES: dict[str, Engine] = {}


def prepared(job: str, payload: Callable[[], bytes]) -> tuple[TaskSpec, BrokerState]:
    """The job's spec and state; ``payload`` (the broadcast) is read only the first time."""
    found = _PREPARED.get(job)
    if found is None:
        _PREPARED.clear()  # a worker outliving its job must not keep the old state
        spec = TaskSpec.decode(payload())
        found = _PREPARED[job] = (spec, spec.snapshot.state())
        tune_collector()  # this worker routes from now on, as a service's router does
    return found


def _engine(url: str) -> Engine:
    db = _ENGINES.get(url)
    if db is None:
        db = _ENGINES[url] = make_engine(url)
    return db


def _rows(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[Any, ...]]:
    for batch in batches:
        yield from zip(*(column.to_pylist() for column in batch.columns), strict=True)


def route_partition(
    batches: Iterator[pa.RecordBatch], *, job: str, url: str, spec: Broadcast[bytes]
) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function: route one partition, commit it in its turn, yield its
    summary."""
    import pyarrow as pa
    from pyspark import TaskContext

    context = TaskContext.get()
    assert context is not None
    task, state = prepared(job, lambda: spec.value)
    part = task.plan.parts[context.partitionId()]
    routed = route_rows(_rows(batches), task.snapshot, state, part, task.batch_size)
    summary = commit.commit_partition(_engine(url), task, part, routed)
    yield pa.RecordBatch.from_pylist([{"part": part.index, **asdict(summary)}])
