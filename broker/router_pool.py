"""More routing processes beside ``broker serve``'s own router (``routers`` setting).

One router uses one core for its Python; several routers share every input queue
without double delivery and, through claim turns, keep each stream's order
(``docs/operations.md``, scaling out). On PostgreSQL they claim with row locks; on
SQLite they route outside its one write lock through claims (``queues.claims``), so
that one routes while another writes. Threads would share one interpreter
lock, so the extra routers are processes, started fresh (``spawn``: no engine or
connection crosses a fork), each a plain :class:`broker.service.RoutingService`
without channel agents (the serving process runs those).

The pool restarts a router that dies, after a pause, and on stop asks every router
to finish its batch in hand (SIGTERM) before it waits for them.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
from multiprocessing.process import BaseProcess

from broker import logs
from broker.config import ConfigError, Settings
from broker.service import RoutingService
from queues import QueueManager, make_engine

log = logging.getLogger("broker.routers")

RESTART_SECONDS = 2.0
STOP_SECONDS = 60.0


def check(settings: Settings) -> None:
    if settings.routers < 1:
        raise ConfigError(f"routers must be at least 1, not {settings.routers}")


def route(settings: Settings) -> None:
    """The body of an extra routing process."""
    logs.configure(settings.log_level, settings.log_format)
    engine = make_engine(settings.database_url, sqlite_synchronous=settings.sqlite_synchronous)
    qm = QueueManager(engine, appl_name="broker")
    try:
        service = RoutingService(qm, settings)
        service.install_signal_handlers()
        service.run(channels=False)
    finally:
        qm.close()


class RouterPool:
    """``settings.routers - 1`` routing processes, kept running until :meth:`stop`."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._context = multiprocessing.get_context("spawn")
        self._processes: list[BaseProcess] = []
        self._stopping = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="router-pool", daemon=True)

    def start(self) -> None:
        self._processes = [self._spawn(n) for n in range(1, self._settings.routers)]
        if self._processes:
            self._watcher.start()

    def _spawn(self, number: int) -> BaseProcess:
        process = self._context.Process(
            target=route, args=(self._settings,), name=f"router-{number}", daemon=False
        )
        process.start()
        log.info("router process started", extra={"router": number, "pid": process.pid})
        return process

    def _watch(self) -> None:
        while not self._stopping.wait(RESTART_SECONDS):
            self.restart_dead()

    def restart_dead(self) -> None:
        """Start again every router that died; one that exited with 0 was asked to stop
        (a SIGINT typed in a terminal reaches every process of the group) and stays so."""
        for index, process in enumerate(self._processes):
            if process.is_alive() or process.exitcode == 0 or self._stopping.is_set():
                continue
            log.error(
                "router process ended; starting it again",
                extra={"router": index + 1, "pid": process.pid, "exit_code": process.exitcode},
            )
            self._processes[index] = self._spawn(index + 1)

    def stop(self) -> None:
        """Ask every router to finish its batch, then wait for them (kill after a minute)."""
        self._stopping.set()
        if self._watcher.is_alive():
            self._watcher.join()
        for process in self._processes:
            if process.is_alive():
                process.terminate()  # SIGTERM: RoutingService finishes the batch in hand
        for process in self._processes:
            process.join(STOP_SECONDS)
            if process.is_alive():
                log.error("router process did not stop; killing it", extra={"pid": process.pid})
                process.kill()
                process.join()
