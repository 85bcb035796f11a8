"""What every request handler works with, held by the app rather than by the module.

Several apps (tests run one per database) live in one process, so nothing here
is global: :func:`services` finds the request's own app's services.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import httpx
from fastapi import Depends, Request
from prometheus_client import CollectorRegistry

from admin_api.commands import BrokerCommands
from admin_api.signins import Signins
from broker.core.system import QueueProblem, input_queues, queue_problems
from broker.service.config import Settings, broker_config
from broker.service.health import Health
from queues import QueueManager
from queues.names import DEAD_LETTER_QUEUE


@dataclass(frozen=True, slots=True)
class Services:
    qm: QueueManager
    settings: Settings
    commands: BrokerCommands
    started_at: int  # milliseconds since the epoch
    schema_head: str  # the migration revision this release expects
    registry: CollectorRegistry  # what /metrics exposes
    health: Health  # of this process's background work (the router's and listener's, beside it)
    signins: Signins  # the token checks and their throttle

    def neighbours_http(self) -> httpx.Client:
        """How the API reaches neighbouring brokers (the topology check): one client per request."""
        return httpx.Client(timeout=self.settings.neighbour_timeout)

    @property
    def default_allow(self) -> bool:
        return self.settings.default_policy == "allow"

    def queue_problems(self) -> list[QueueProblem]:
        """What keeps the broker's own queues from working now (``broker.core.system``), read
        here rather than from the routers' reports: it holds whether or not any router runs."""
        inputs = input_queues(broker_config(self.qm.name, self.settings).streams)
        return queue_problems(self.qm.inquire_queues([*inputs, DEAD_LETTER_QUEUE]), inputs)


def services(request: Request) -> Services:
    found: Services = request.app.state.services
    return found


Svc = Annotated[Services, Depends(services)]
