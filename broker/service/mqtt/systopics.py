"""The listener's status on ``$SYS/broker/...`` topics, as Mosquitto publishes its own.

Off unless ``mqtt_sys_interval`` is set: every that many seconds the listener publishes
each value as a retained QoS 0 publication, through the same gateway and engine as any
client's, as the broker's own principal (``admin_group``). So who may read them is the
broker's ordinary authority: subscribe authority on ``$SYS/#`` (or the topic). Leading
wildcards never match ``$`` topics (``broker.core.topics``), so a subscriber to ``#`` does
not receive them; being retained, a new subscriber gets the current values at once.

The values are this listener's, since it started: a restart begins them again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from broker.protocol.mqtt.packets import Publish

if TYPE_CHECKING:
    from broker.service.metrics import BrokerMetrics
    from broker.service.mqtt.listener import MqttListener

log = logging.getLogger("broker.mqtt")

PREFIX = "$SYS/broker/"


def status(uptime: float, connected: int, metrics: BrokerMetrics) -> list[tuple[str, str]]:
    """(topic, text) of each value, named as Mosquitto names them."""
    read = metrics.registry.get_sample_value

    def packets(direction: str) -> int:
        return int(read("broker_mqtt_packets_total", {"direction": direction, "type": "PUBLISH"}) or 0)

    def octets(direction: str) -> int:
        return int(read("broker_mqtt_bytes_total", {"direction": direction}) or 0)

    values = {
        "version": f"broker {_version()}",
        "uptime": f"{int(uptime)} seconds",
        "clients/connected": str(connected),
        "messages/received": str(packets("in")),
        "messages/sent": str(packets("out")),
        "bytes/received": str(octets("in")),
        "bytes/sent": str(octets("out")),
    }
    return [(PREFIX + name, text) for name, text in values.items()]


def _version() -> str:
    try:
        return version("wmq-psc-broker")
    except PackageNotFoundError:
        return "unknown"


async def publish(listener: MqttListener) -> None:
    """Publish the status every ``mqtt_sys_interval`` seconds until cancelled."""
    interval = listener.settings.mqtt_sys_interval
    if not interval:
        return
    started = time.monotonic()
    gateway, principal = listener.gateway, listener.settings.admin_group
    while True:
        values = status(time.monotonic() - started, len(listener.clients), listener.metrics)
        publishes = [Publish(topic, text.encode(), 0, True) for topic, text in values]
        try:
            await gateway.submit(gateway.publish("", publishes, principal))  # one job, one commit
        except Exception:
            log.exception("mqtt $SYS publication failed")
        await asyncio.sleep(interval)
