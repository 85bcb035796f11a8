"""More MQTT listener processes on the same ports (``mqtt_processes``).

One listener is one event loop and one gateway thread under one interpreter lock: one core.
With ``mqtt_processes`` N, ``broker serve`` runs its own listener and N-1 processes running
only a listener (no routing loop), every one binding the MQTT ports with SO_REUSEPORT, so
that the kernel spreads new connections among them. They share everything through the
database as two brokers would: sessions, subscriptions, queues, retained publications; a
CONNECT for a client id that another process serves takes the session over through a
disconnect request (``broker.service.mqtt.takeover``). The serving process's listener is the
*primary*: it alone releases its node's earlier run's sessions at start, and runs the
housekeeping passes, the ``$SYS`` topics and the bridges (one per node, not per process; the
passes and each bridge on one node of the cluster, under a lease). Every process is a member
of the cluster (``broker.service.mqtt.membership``): one that dies is found dead at once by the
others of its node, and its sessions are released.
"""

from __future__ import annotations

from broker.service.config import Settings
from broker.service.metrics import BrokerMetrics
from broker.service.mqtt.listener import MqttListener
from broker.service.mqtt.transports import endpoints
from broker.service.router_pool import child_of, stop_with


def listen(settings: Settings, parent: int) -> None:
    """The body of an extra listener process, started by process ``parent``."""
    with child_of(parent, settings) as qm:
        listener = MqttListener(
            qm, settings, endpoints(settings), BrokerMetrics(), primary=False, shared=True
        )
        stop_with(parent, listener.stop, listener.stopped.is_set)
        listener.run()
