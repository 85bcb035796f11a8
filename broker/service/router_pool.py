"""More routing processes beside ``broker serve``'s own router (``routers`` setting).

One router uses one core for its Python; several routers share every input queue
without double delivery and, through claim turns, keep each stream's order
(``docs/operations.md``, scaling out). On PostgreSQL they claim with row locks; on
SQLite they route outside its one write lock through claims (``queues.claims``), so
that one routes while another writes. Threads would share one interpreter
lock, so the extra routers are processes, started fresh (``spawn``: no engine or
connection crosses a fork), each a plain :class:`broker.service.router.RoutingService`
without channel agents (the serving process runs those).

The pool restarts a router that dies, after a pause, and on stop asks every router
to finish its batch in hand (SIGTERM) before it waits for them. A router never outlives
the process that started it, however that ends (SIGKILL included): the kernel sends it
SIGTERM when its parent dies (Linux's ``PR_SET_PDEATHSIG``), and it checks its parent
every second besides, so that no router keeps routing, unsupervised, beside the
``broker serve`` started in its place.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.process import BaseProcess

from broker.service import logs
from broker.service.config import ConfigError, Settings
from broker.service.router import RoutingService
from broker.service.signals import on_stop_signals
from queues import QueueManager, make_engine

log = logging.getLogger("broker.routers")

RESTART_SECONDS = 2.0
STOP_SECONDS = 60.0
PARENT_CHECK_SECONDS = 1.0
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def check(settings: Settings) -> None:
    if settings.routers < 1:
        raise ConfigError(f"routers must be at least 1, not {settings.routers}")
    if settings.mqtt_processes < 1:
        raise ConfigError(f"mqtt_processes must be at least 1, not {settings.mqtt_processes}")
    if settings.turn_timeout < 1:
        raise ConfigError(f"turn_timeout must be at least 1 second, not {settings.turn_timeout}")


def route(settings: Settings, parent: int) -> None:
    """The body of an extra routing process, started by process ``parent``."""
    with child_of(parent, settings) as qm:
        service = RoutingService(qm, settings)
        stop_with(parent, service.stop, lambda: service.stopping)
        service.run(channels=False)


@contextmanager
def child_of(parent: int, settings: Settings) -> Iterator[QueueManager]:
    """What every process of a pool starts with: it ends with ``parent``, logs as the settings
    say, and has a queue manager of its own, closed when it is done."""
    end_with_parent(parent)
    logs.configure(settings.log_level, settings.log_format)
    engine = make_engine(
        settings.database_url,
        sqlite_synchronous=settings.sqlite_synchronous,
        busy_timeout_ms=settings.sqlite_busy_timeout_ms,
    )
    qm = QueueManager(engine, appl_name="broker", turn_timeout=settings.turn_timeout)
    try:
        yield qm
    finally:
        qm.close()


def stop_with(parent: int, stop: Callable[[], None], stopping: Callable[[], bool]) -> None:
    """``stop`` on SIGTERM or SIGINT, and once the serving process is gone: the check behind
    the parent-death signal (another platform, a signal lost), which finishes the work in hand."""
    on_stop_signals(stop)
    threading.Thread(
        target=watch_parent, args=(parent, stop, stopping), name="parent-check", daemon=True
    ).start()


def end_with_parent(parent: int) -> None:
    """Have the kernel send this process SIGTERM when ``parent`` dies (Linux), and exit at once
    if it already has: started a moment before a SIGKILL, a router would outlive it."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            log.warning("no parent-death signal", extra={"error": os.strerror(ctypes.get_errno())})
    if os.getppid() != parent:
        raise SystemExit(0)


def watch_parent(parent: int, stop: Callable[[], None], stopping: Callable[[], bool]) -> None:
    """Call ``stop`` once process ``parent`` is gone (until ``stopping`` says it is done)."""
    while not stopping():
        if os.getppid() != parent:
            log.warning("serving process gone; stopping", extra={"parent": parent})
            stop()
            return
        time.sleep(PARENT_CHECK_SECONDS)


class ProcessPool:
    """``count - 1`` processes beside the serving one, each running
    ``target(settings, parent)``, kept running until :meth:`stop`: the extra routers, and the
    extra MQTT listener processes (``mqtt_processes``, ``broker.service.mqtt.processes``)."""

    def __init__(
        self, settings: Settings, count: int, target: Callable[[Settings, int], None], kind: str
    ) -> None:
        self._settings = settings
        self._count = count
        self._target = target
        self._kind = kind
        self._context = multiprocessing.get_context("spawn")
        self._processes: list[BaseProcess] = []
        self._stopping = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name=f"{kind}-pool", daemon=True)

    def start(self) -> None:
        self._processes = [self._spawn(n) for n in range(1, self._count)]
        if self._processes:
            self._watcher.start()

    def _spawn(self, number: int) -> BaseProcess:
        # The parent-death signal follows the thread that starts the process: the main thread,
        # or the watcher for a restarted one; both last as long as the pool.
        process = self._context.Process(
            target=self._target,
            args=(self._settings, os.getpid()),
            name=f"{self._kind.replace(' ', '-')}-{number}",
            daemon=False,
        )
        process.start()
        log.info(f"{self._kind} process started", extra={self._key: number, "pid": process.pid})
        return process

    @property
    def _key(self) -> str:
        return self._kind.split()[-1]

    def _watch(self) -> None:
        while not self._stopping.wait(RESTART_SECONDS):
            self.restart_dead()

    def restart_dead(self) -> None:
        """Start again every process that died; one that exited with 0 was asked to stop
        (a SIGINT typed in a terminal reaches every process of the group) and stays so."""
        for index, process in enumerate(self._processes):
            if process.is_alive() or process.exitcode == 0 or self._stopping.is_set():
                continue
            log.error(
                f"{self._kind} process ended; starting it again",
                extra={self._key: index + 1, "pid": process.pid, "exit_code": process.exitcode},
            )
            self._processes[index] = self._spawn(index + 1)

    def stop(self) -> None:
        """Ask every process to finish its work in hand, then wait for them (kill after a
        minute)."""
        self._stopping.set()
        if self._watcher.is_alive():
            self._watcher.join()
        for process in self._processes:
            if process.is_alive():
                process.terminate()  # SIGTERM: a router finishes the batch in hand
        for process in self._processes:
            process.join(STOP_SECONDS)
            if process.is_alive():
                log.error(f"{self._kind} process did not stop; killing it", extra={"pid": process.pid})
                process.kill()
                process.join()


class RouterPool(ProcessPool):
    """``settings.routers - 1`` routing processes."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings, settings.routers, route, "router")
