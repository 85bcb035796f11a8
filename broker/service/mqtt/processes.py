"""More MQTT listener processes on the same ports (``mqtt_processes``).

One listener is one event loop and one gateway thread under one interpreter lock: one core.
With ``mqtt_processes`` N, ``broker serve`` runs its own listener and N-1 processes running
only a listener (no routing loop), every one binding the MQTT ports with SO_REUSEPORT, so
that the kernel spreads new connections among them. They share everything through the
database as two brokers would: sessions, subscriptions, queues, retained publications; a
CONNECT for a client id that another process serves takes the session over through a
disconnect request (``broker.service.mqtt.takeover``). The serving process's listener is the
*primary*: it alone marks every session offline at start, runs the housekeeping passes, the
``$SYS`` topics and the bridges (each of those is one per broker, not one per process).
"""

from __future__ import annotations

import threading

from broker.service import logs
from broker.service.config import Settings
from broker.service.metrics import BrokerMetrics
from broker.service.mqtt.listener import MqttListener
from broker.service.mqtt.transports import endpoints
from broker.service.router_pool import end_with_parent, watch_parent
from broker.service.signals import on_stop_signals
from queues import QueueManager, make_engine


def listen(settings: Settings, parent: int) -> None:
    """The body of an extra listener process, started by process ``parent``."""
    end_with_parent(parent)
    logs.configure(settings.log_level, settings.log_format)
    engine = make_engine(settings.database_url, sqlite_synchronous=settings.sqlite_synchronous)
    qm = QueueManager(engine, appl_name="broker", turn_timeout=settings.turn_timeout)
    try:
        listener = MqttListener(
            qm, settings, endpoints(settings), BrokerMetrics(), primary=False, shared=True
        )
        on_stop_signals(listener.stop)
        threading.Thread(
            target=watch_parent,
            args=(parent, listener.stop, listener.stopped.is_set),
            name="parent-check",
            daemon=True,
        ).start()
        listener.run()
    finally:
        qm.close()
