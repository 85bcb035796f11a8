"""The MQTT listener: MQTT 3.1 and 3.1.1 clients on the broker's topic tree, authority,
retained publications and network, beside the routing loop (``docs/decisions.md``, MQTT)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from broker.service.config import Settings
from broker.service.metrics import BrokerMetrics
from broker.service.mqtt.gateway import Gateway
from broker.service.mqtt.listener import Connection, MqttListener
from broker.service.mqtt.transports import Endpoint
from queues import QueueManager

__all__ = ["Connection", "Endpoint", "Gateway", "MqttListener", "MqttListenerFailed", "MqttThread"]

log = logging.getLogger("broker.mqtt")


class MqttListenerFailed(RuntimeError):
    """The MQTT listener could not start (the log says why)."""


class MqttThread:
    """A listener on its own thread and event loop, as ``broker serve --mqtt`` runs it; if
    it fails, ``failed`` is called (``broker serve`` stops: a broker that silently stopped
    serving MQTT would look healthy)."""

    def __init__(
        self,
        qm: QueueManager,
        settings: Settings,
        endpoints: Sequence[Endpoint],
        metrics: BrokerMetrics,
        *,
        failed: Callable[[], None],
        shared: bool = False,
    ) -> None:
        self.listener = MqttListener(qm, settings, endpoints, metrics, shared=shared)
        self._failed = failed
        self._thread = threading.Thread(target=self._run, name="mqtt", daemon=True)

    def _run(self) -> None:
        try:
            self.listener.run()
        except Exception:
            log.exception("mqtt listener failed; stopping the broker")
            self._failed()

    def start(self) -> None:
        """Start serving; raises if the listener cannot (a port taken, say)."""
        self._thread.start()
        while not self.listener.ready.wait(0.1):
            if not self._thread.is_alive():
                where = ", ".join(str(e) for e in self.listener.endpoints)
                raise MqttListenerFailed(f"the MQTT listener on {where} failed")

    def stop(self) -> None:
        """Graceful: stop accepting, end the connections (wills sent), flush the durable work."""
        self.listener.stop()
        self._thread.join(timeout=30)
