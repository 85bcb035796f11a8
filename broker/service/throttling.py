"""A process's sign-in throttle: ``broker.core.throttle`` on the monotonic clock, under a lock.

The MQTT listener decides on its event loop and the admin API on its worker threads, and
Prometheus reads the gauges on yet another thread: each call holds the lock for a few
dictionary operations. A worker thread may wait while an attempt is busy (:meth:`Guard.admit_waiting`);
the event loop waits in its own way (``broker.service.mqtt.logins``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial

from prometheus_client import Gauge

from broker.core.throttle import ADDRESS, USER, Decision, Policy, Throttle
from broker.service.config import Settings

BUSY_TIMEOUT = 10.0  # seconds a worker thread waits for a busy key's checks, then is refused


def policy(settings: Settings) -> Policy:
    return Policy(
        free=settings.auth_throttle_free,
        delay=settings.auth_throttle_delay,
        max_delay=settings.auth_throttle_max_delay,
        forget=settings.auth_throttle_forget,
        keys=settings.auth_throttle_keys,
    )


class Guard:
    """One door's throttle (MQTT logins, or the admin API's tokens) in this process; ``gauge``
    (labelled ``key``) shows how many users and addresses are in a delay when scraped."""

    def __init__(self, settings: Settings, gauge: Gauge, clock: Callable[[], float] = time.monotonic) -> None:
        self._throttle = Throttle(policy(settings))
        self._lock = threading.Lock()
        self._ended = threading.Condition(self._lock)  # notified when a check ends
        self._clock = clock
        for kind in (USER, ADDRESS):
            gauge.labels(kind).set_function(partial(self._count, kind))

    def admit(self, user: str, address: str) -> Decision:
        with self._lock:
            return self._throttle.admit(user, address, self._clock())

    def admit_waiting(self, user: str, address: str, timeout: float = BUSY_TIMEOUT) -> Decision:
        """:meth:`admit`, waiting while the attempt is busy (for ``timeout`` seconds at most)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while (decision := self._throttle.admit(user, address, self._clock())).busy:
                if not self._ended.wait(deadline - time.monotonic()):
                    break
            return decision

    def failed(self, user: str, address: str) -> dict[str, float]:
        with self._lock:
            self._ended.notify_all()
            return self._throttle.failed(user, address, self._clock())

    def succeeded(self, user: str, address: str) -> None:
        with self._lock:
            self._ended.notify_all()
            self._throttle.succeeded(user, address)

    def abandoned(self, user: str, address: str) -> None:
        with self._lock:
            self._ended.notify_all()
            self._throttle.abandoned(user, address)

    def throttled(self) -> dict[str, int]:
        with self._lock:
            return self._throttle.throttled(self._clock())

    def _count(self, kind: str) -> int:
        return self.throttled()[kind]
