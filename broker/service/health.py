"""The health of one broker process's background work: what ``/ready`` reports and the log says.

Every thread and asyncio task a serving process runs beside its connections (the routing
loop, the MQTT gateway, the session-queue watcher, housekeeping, bridges...) is supervised
(``broker.service.supervision``) and tells this registry how each attempt went. Two kinds of
failure are told apart, because an operator does different things about them:

- **The database is unavailable** (``queues.database.unavailable``: a restart, a network cut,
  SQLite's write lock held too long, a full disk, a read-only file). Nothing is wrong with the
  broker: its work waits and resumes. The process logs one warning when the first task finds
  the database gone and one line when every task that waited for it has worked again, with how
  long it took; no traceback. ``/ready`` says ``degraded``, naming the database, meanwhile.
- **Any other failure** is a defect or a misconfiguration. The first failure of a task (and
  each new kind of failure) is logged at error level with its traceback; a task that has
  failed :data:`FAILING_AFTER` times in a row makes the process not ready until it works.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from prometheus_client import CollectorRegistry, Gauge

from queues.database import unavailable
from queues.errors import MQError
from queues.reasons import Reason

log = logging.getLogger("broker.health")

FAILING_AFTER = 3  # consecutive failures (not the database's) that make the process not ready


def database_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database cannot be used now, rather than that the work is wrong."""
    if isinstance(exc, MQError):
        return exc.reason == Reason.MQRC_CONNECTION_BROKEN
    return unavailable(exc)


class State(Enum):
    RUNNING = "running"
    WAITING = "waiting for the database"
    FAILING = "failing"


@dataclass(slots=True)
class Task:
    """What the registry knows of one supervised task."""

    name: str
    alive: Callable[[], bool]
    state: State = State.RUNNING
    failures: int = 0  # in a row, other than the database's
    error: str = ""  # the last failure, as logged

    @property
    def ready(self) -> bool:
        return self.state is not State.FAILING or self.failures < FAILING_AFTER


@dataclass(frozen=True, slots=True)
class TaskReport:
    name: str
    state: str
    alive: bool
    failures: int
    error: str


@dataclass(frozen=True, slots=True)
class Outage:
    """The database has been unavailable to ``tasks`` since ``since`` (seconds since the epoch)."""

    since: float
    tasks: tuple[str, ...]
    error: str


@dataclass(frozen=True, slots=True)
class Report:
    outage: Outage | None
    tasks: tuple[TaskReport, ...]

    @property
    def failing(self) -> tuple[TaskReport, ...]:
        """Tasks that are dead, or keep failing for a reason other than the database."""
        return tuple(
            t
            for t in self.tasks
            if not t.alive or (t.state == State.FAILING.value and t.failures >= FAILING_AFTER)
        )

    @property
    def ready(self) -> bool:
        return not self.failing


class Health:
    """The supervised tasks of one process and the database outage they see, if any."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self._lock = threading.Lock()
        self._tasks: dict[str, Task] = {}
        self._outage_since: float | None = None  # time.time()
        self._outage_started: float = 0.0  # time.monotonic(), for the duration logged
        self._outage_error = ""
        self._affected: set[str] = set()  # every task that waited during this outage
        registry = registry if registry is not None else CollectorRegistry()
        self._available = Gauge(
            "broker_database_available",
            "1 while this process's background work reaches the database, 0 during an outage",
            registry=registry,
        )
        self._available.set(1)
        self._failing = Gauge(
            "broker_tasks_failing",
            "Background tasks of this process failing for a reason other than the database",
            registry=registry,
        )

    def watch(self, name: str, alive: Callable[[], bool]) -> None:
        """Report on the task ``name``; ``alive`` says whether its thread or task still runs."""
        with self._lock:
            self._tasks[name] = Task(name, alive)

    def forget(self, name: str) -> None:
        """The task ended on purpose (a bridge removed, the process stopping)."""
        with self._lock:
            self._tasks.pop(name, None)
            self._settle_outage()

    def failed(self, name: str, exc: BaseException) -> bool:
        """An attempt of ``name`` failed with ``exc``; it will be retried. Returns whether this
        is news (an outage begins, or the task fails anew), logged as such."""
        with self._lock:
            task = self._tasks.setdefault(name, Task(name, lambda: True))
            if database_unavailable(exc):
                news = self._database_lost(task, exc)
            else:
                news = self._task_failed(task, exc)
            self._failing.set(sum(1 for t in self._tasks.values() if t.state is State.FAILING))
        return news

    def succeeded(self, name: str) -> None:
        """An attempt of ``name`` worked: it runs, and has the database if it needs one."""
        with self._lock:
            task = self._tasks.get(name)
            if task is None or task.state is State.RUNNING:
                return
            if task.state is State.FAILING:
                log.info("background task running again", extra={"task": name})
            task.state, task.failures, task.error = State.RUNNING, 0, ""
            self._settle_outage()
            self._failing.set(sum(1 for t in self._tasks.values() if t.state is State.FAILING))

    def report(self) -> Report:
        with self._lock:
            outage = None
            if self._outage_since is not None:
                waiting = tuple(sorted(t.name for t in self._tasks.values() if t.state is State.WAITING))
                outage = Outage(self._outage_since, waiting, self._outage_error)
            tasks = tuple(
                TaskReport(t.name, t.state.value, t.alive(), t.failures, t.error)
                for t in sorted(self._tasks.values(), key=lambda t: t.name)
            )
        return Report(outage, tasks)

    def _database_lost(self, task: Task, exc: BaseException) -> bool:
        task.state = State.WAITING
        self._affected.add(task.name)
        self._outage_error = _describe(exc)
        if self._outage_since is not None:
            return False
        self._outage_since = time.time()
        self._outage_started = time.monotonic()
        self._available.set(0)
        log.warning(
            "database unavailable; background work waits for it",
            extra={"task": task.name, "error": self._outage_error},
        )
        return True

    def _task_failed(self, task: Task, exc: BaseException) -> bool:
        error = _describe(exc)
        news = task.state is not State.FAILING or error != task.error
        if news:
            log.error(
                "background task failed; retrying",
                extra={"task": task.name, "error": error},
                exc_info=(type(exc), exc, exc.__traceback__),
            )
        elif task.failures + 1 == FAILING_AFTER:
            log.error(
                "background task keeps failing; the process is not ready",
                extra={"task": task.name, "error": error, "failures": FAILING_AFTER},
            )
        task.state, task.error = State.FAILING, error
        task.failures += 1
        self._settle_outage()
        return news

    def _settle_outage(self) -> None:
        """End the outage once no task waits for the database any more."""
        if self._outage_since is None or any(t.state is State.WAITING for t in self._tasks.values()):
            return
        log.info(
            "database available again",
            extra={
                "seconds": round(time.monotonic() - self._outage_started, 1),
                "tasks": ",".join(sorted(self._affected)),
            },
        )
        self._outage_since = None
        self._affected.clear()
        self._available.set(1)


def _describe(exc: BaseException) -> str:
    return exc.detail if isinstance(exc, MQError) else f"{type(exc).__name__}: {exc}"
