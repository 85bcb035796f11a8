"""A pool of threads that serves its callers in turns: a caller's many jobs wait behind each other,
never in front of another caller's."""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

Job = tuple[Callable[[], Any], Future[Any]]


class Turns:
    """``threads`` threads running the jobs :meth:`submit` hands them, each caller's (``key``'s)
    in the order given. The next job is the first of the waiting caller with the fewest jobs
    running, the longest waiting among equals: a newcomer waits for the jobs running, not for
    those another caller has queued.

    Not bounded here: each job is a client's login awaiting its CONNACK, and the listener admits
    at most ``mqtt_max_half_open`` of those at a time (``broker.service.mqtt.admission``); the
    rest wait in the kernel's backlog."""

    def __init__(self, threads: int, name: str) -> None:
        self._waiting: OrderedDict[str, deque[Job]] = OrderedDict()
        self._running: Counter[str] = Counter()
        self._changed = threading.Condition()
        self._closed = False
        for number in range(threads):
            threading.Thread(target=self._work, name=f"{name}-{number}", daemon=True).start()

    def submit(self, key: str, job: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        with self._changed:
            self._waiting.setdefault(key, deque()).append((job, future))
            self._changed.notify()
        return future

    def close(self) -> None:
        """The threads end once the jobs submitted so far are done."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def _work(self) -> None:
        while (taken := self._next()) is not None:
            key, (job, future) = taken
            try:
                if future.set_running_or_notify_cancel():
                    self._run(job, future)
            finally:
                with self._changed:
                    self._running[key] -= 1
                    if not self._running[key]:
                        del self._running[key]

    @staticmethod
    def _run(job: Callable[[], Any], future: Future[Any]) -> None:
        try:
            future.set_result(job())
        except BaseException as exc:  # the caller awaiting the future gets it
            future.set_exception(exc)

    def _next(self) -> tuple[str, Job] | None:
        with self._changed:
            while not self._waiting:
                if self._closed:
                    return None
                self._changed.wait()
            key = min(self._waiting, key=self._running.__getitem__)  # the first of the fewest
            jobs = self._waiting[key]
            taken = jobs.popleft()
            if jobs:
                self._waiting.move_to_end(key)
            else:
                del self._waiting[key]
            self._running[key] += 1
            return key, taken
