"""The MQTT listener as the parts it runs see it: cluster membership, bridges, housekeeping,
``$SYS`` and takeover are handed the listener and use only what these protocols name, so none
of them imports the listener (which imports them all)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from broker.protocol.mqtt.session import Action, Session
from broker.service.config import Settings
from broker.service.health import Health
from broker.service.metrics import BrokerMetrics
from broker.service.mqtt.gateway import Gateway
from queues import QueueManager


class Client(Protocol):
    """A client's connection."""

    @property
    def session(self) -> Session: ...

    @property
    def bytes_in(self) -> int: ...

    @property
    def bytes_out(self) -> int: ...

    @property
    def in_flight_held(self) -> int: ...

    def perform(self, actions: list[Action]) -> None: ...

    async def closed(self) -> None: ...


class Members(Protocol):
    """This node's membership of the cluster (``broker.service.mqtt.membership``)."""

    period: float

    @property
    def takeover_seconds(self) -> float: ...

    async def step(self) -> None: ...

    async def release_if_gone(self, owner: str) -> bool: ...

    def silent(self, owner: str) -> bool: ...

    async def released(self, timeout: float) -> None: ...


class Host(Protocol):
    """The listener."""

    qm: QueueManager
    settings: Settings
    metrics: BrokerMetrics
    health: Health
    gateway: Gateway
    primary: bool

    @property
    def membership(self) -> Members: ...

    @property
    def clients(self) -> Mapping[str, Client]: ...

    @property
    def stopping(self) -> bool: ...

    async def orphan_all(self, reason: str) -> None: ...

    def take_departed(self) -> Mapping[str, Client]: ...
