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

import time
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from broker.protocol.mqtt.packets import Publish

if TYPE_CHECKING:
    from broker.service.metrics import BrokerMetrics
    from broker.service.mqtt.listener import MqttListener

PREFIX = "$SYS/broker/"


def status(uptime: float, connected: int, metrics: BrokerMetrics) -> list[tuple[str, str]]:
    """(topic, text) of each value, named as Mosquitto names them (the sign-in throttle's, which
    Mosquitto has not: ``logins/...`` since the start, ``throttled/...`` now)."""
    read = metrics.registry.get_sample_value

    def packets(direction: str) -> int:
        return int(read("broker_mqtt_packets_total", {"direction": direction, "type": "PUBLISH"}) or 0)

    def octets(direction: str) -> int:
        return int(read("broker_mqtt_bytes_total", {"direction": direction}) or 0)

    def throttled(key: str) -> int:
        return int(read("broker_mqtt_throttled", {"key": key}) or 0)

    values = {
        "version": f"broker {_version()}",
        "uptime": f"{int(uptime)} seconds",
        "clients/connected": str(connected),
        "messages/received": str(packets("in")),
        "messages/sent": str(packets("out")),
        "bytes/received": str(octets("in")),
        "bytes/sent": str(octets("out")),
        "logins/failed": str(int(read("broker_mqtt_login_failures_total") or 0)),
        "logins/throttled": str(int(read("broker_mqtt_refused_total", {"what": "throttled"}) or 0)),
        "throttled/users": str(throttled("user")),
        "throttled/addresses": str(throttled("address")),
    }
    return [(PREFIX + name, text) for name, text in values.items()]


def _version() -> str:
    try:
        return version("wmq-psc-broker")
    except PackageNotFoundError:
        return "unknown"


async def publish(listener: MqttListener, started: float) -> None:
    """Publish the status (as of ``started``, the listener's time.monotonic() at start), as
    one job: one commit for every value."""
    values = status(time.monotonic() - started, len(listener.clients), listener.metrics)
    publishes = [Publish(topic, text.encode(), 0, True) for topic, text in values]
    gateway = listener.gateway
    await gateway.submit(gateway.publish("", publishes, listener.settings.admin_group))
