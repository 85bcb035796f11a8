"""The MQTT listener: MQTT 3.1 and 3.1.1 clients on the broker's topic tree, authority,
retained publications and network, beside the routing loop (``docs/decisions.md``, MQTT)."""

from __future__ import annotations

import threading

from broker.service.config import Settings
from broker.service.metrics import BrokerMetrics
from broker.service.mqtt.gateway import Gateway
from broker.service.mqtt.listener import Connection, MqttListener
from queues import QueueManager

__all__ = ["Connection", "Gateway", "MqttListener", "MqttThread"]


class MqttThread:
    """A listener on its own thread and event loop, as ``broker serve --mqtt`` runs it."""

    def __init__(
        self, qm: QueueManager, settings: Settings, host: str, port: int, metrics: BrokerMetrics
    ) -> None:
        self.listener = MqttListener(qm, settings, host, port, metrics)
        self._thread = threading.Thread(target=self.listener.run, name="mqtt", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Graceful: stop accepting, end the connections (wills sent), flush the durable work."""
        self.listener.stop()
        self._thread.join(timeout=30)
