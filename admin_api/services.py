"""What every request handler works with, held by the app rather than by the module.

Several apps (tests run one per database) live in one process, so nothing here
is global: :func:`services` finds the request's own app's services.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from prometheus_client import CollectorRegistry

from admin_api.commands import BrokerCommands
from broker.config import Settings
from queues import QueueManager


@dataclass(frozen=True, slots=True)
class Services:
    qm: QueueManager
    settings: Settings
    commands: BrokerCommands
    started_at: int  # milliseconds since the epoch
    schema_head: str  # the migration revision this release expects
    registry: CollectorRegistry  # what /metrics exposes

    @property
    def default_allow(self) -> bool:
        return self.settings.default_policy == "allow"


def services(request: Request) -> Services:
    found: Services = request.app.state.services
    return found


Svc = Annotated[Services, Depends(services)]
