"""Subscription and retained-publication changes go through the broker, as command messages.

The API never writes subscriptions or retained publications itself: it sends the
RegSub, DeregSub or DeletePub an application would send, with the caller's
principal as MQMD UserIdentifier, and reports the broker's ``<pscr>`` answer.
The options, the identity rules and the authority checks are therefore the
broker's own, whichever way a change arrives.

One :class:`~broker.client.BrokerClient` (one temporary reply queue) serves
every request of an API process; replies are told apart by CorrelId. Before a
command is put, the broker must have a live router (a heartbeat in
``psb_instances`` within :data:`ROUTER_ALIVE_MS`): without one the command would
wait on the input queue and take effect whenever a router next starts, long
after the caller was told it failed. A router that goes away while a command
waits still leaves it queued; the 503 says so.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from admin_api.problems import ApiProblem
from broker import store
from broker.client import DEFAULT_TIMEOUT, BrokerClient, BrokerResponse
from broker.core.system import CONTROL_QUEUE
from queues import QueueManager
from queues.errors import MQError
from queues.reasons import Reason

ROUTER_ALIVE_MS = 30_000
ROUTER_ROLE = "router"


class BrokerRefusal(MQError):
    """The broker answered ``error``: its one ``<Response>``, with the topic and element it names."""

    def __init__(self, response: BrokerResponse) -> None:
        item = response.items[0] if response.items else None
        reason = item.reason if item is not None else Reason.MQRCCF_COMMAND_FAILED
        super().__init__(
            reason,
            "the broker answered: " + "; ".join(line.strip() for line in response.describe().splitlines()),
        )
        self.topic = item.topic if item is not None else None
        self.parameter = item.parameter if item is not None else None


def no_broker(detail: str) -> ApiProblem:
    return ApiProblem(503, "no-broker", "No broker is routing commands", detail)


class BrokerCommands:
    """Sends commands for API callers and waits for the broker's answers."""

    def __init__(self, qm: QueueManager, timeout: float = DEFAULT_TIMEOUT) -> None:
        self._qm = qm
        self.timeout = timeout
        self._client: BrokerClient | None = None
        self._lock = threading.Lock()

    def _shared_client(self) -> BrokerClient:
        with self._lock:
            if self._client is None:
                self._client = BrokerClient(self._qm, timeout=self.timeout)
            return self._client

    def close(self) -> None:
        """Delete the reply queue (at API shutdown)."""
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def router_alive(self) -> bool:
        with self._qm.reading() as conn:
            live = store.list_instances(conn, alive_within_ms=ROUTER_ALIVE_MS)
        return any(instance["role"] == ROUTER_ROLE for instance in live)

    def send(self, command: Callable[[BrokerClient], BrokerResponse | None]) -> BrokerResponse:
        """Run ``command`` on the shared client; ``ok``/``warning`` answers are returned,
        ``error`` raises :class:`BrokerRefusal`, no answer a 503 problem."""
        if not self.router_alive():
            raise no_broker(
                f"no router has reported within {ROUTER_ALIVE_MS // 1000} s: start 'broker serve';"
                " nothing was sent"
            )
        try:
            response = command(self._shared_client())
        except MQError as exc:
            if exc.reason != Reason.MQRC_NO_MSG_AVAILABLE:
                raise
            raise no_broker(
                f"no answer from the broker within {self.timeout:g} s; the command is still queued"
                f" (on {CONTROL_QUEUE} or a stream queue) and takes effect when a router reaches it"
            ) from None
        assert response is not None  # every command here waits for its answer
        if response.completion == "error":
            raise BrokerRefusal(response)
        return response
