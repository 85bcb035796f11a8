"""The listener's status on ``$SYS/broker/...`` topics, as Mosquitto publishes its own.

Off unless ``mqtt_sys_interval`` is set: every that many seconds the serving listener process
of each node publishes its node's status under ``$SYS/broker/nodes/NODE/...``, and the node
holding the totals' lease the cluster's under ``$SYS/broker/...`` (``broker.core.sys_status``;
with one node, its own), each value a retained QoS 0 publication through the same gateway and
engine as any client's, as the broker's own principal (``admin_group``). So who may read them
is the broker's ordinary authority: subscribe authority on ``$SYS/#`` (or the topic). Leading
wildcards never match ``$`` topics (``broker.core.topics``), so a subscriber to ``#`` does not
receive them; being retained, a new subscriber gets the current values at once.

Each listener process writes its counters with its heartbeat (``broker.service.mqtt.
membership``), so the values of the others are as of their last heartbeat; this process's
own are as of now.
"""

from __future__ import annotations

import asyncio
import time
from importlib.metadata import PackageNotFoundError, version

from broker.core import sys_status
from broker.core.cluster import Member
from broker.protocol.mqtt.packets import Publish
from broker.service.metrics import BrokerMetrics
from broker.service.mqtt.host import Host
from broker.store import listings, nodes
from queues.ids import now_ms

MAX_NODES = 10_000  # the nodes' topics a totals pass looks at for ones gone


def counters(metrics: BrokerMetrics) -> dict[str, int]:
    """This process's counters (``sys_status.COUNTERS``), named as Mosquitto names them (the
    sign-in throttle's, which Mosquitto has not: ``logins/...`` since the start,
    ``throttled/...`` now). Read from those five metrics alone: the member's heartbeat reads
    them every period, and collecting the whole registry for each would cost more."""
    mqtt = metrics.mqtt
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for metric in (mqtt.packets, mqtt.bytes, mqtt.login_failures, mqtt.refused, mqtt.throttled)
        for family in metric.collect()
        for sample in family.samples
    }

    def read(name: str, **labels: str) -> int:
        return int(samples.get((name, tuple(sorted(labels.items()))), 0))

    return {
        "messages/received": read("broker_mqtt_packets_total", direction="in", type="PUBLISH"),
        "messages/sent": read("broker_mqtt_packets_total", direction="out", type="PUBLISH"),
        "bytes/received": read("broker_mqtt_bytes_total", direction="in"),
        "bytes/sent": read("broker_mqtt_bytes_total", direction="out"),
        "logins/failed": read("broker_mqtt_login_failures_total"),
        "logins/throttled": read("broker_mqtt_refused_total", what="throttled"),
        "throttled/users": read("broker_mqtt_throttled", key="user"),
        "throttled/addresses": read("broker_mqtt_throttled", key="address"),
    }


def _version() -> str:
    try:
        return version("wmq-psc-broker")
    except PackageNotFoundError:
        return "unknown"


async def publish(listener: Host, started: float) -> None:
    """Publish the node's status and, holding the totals' lease, the cluster's (clearing the
    topics of nodes gone), as one job: one commit for every value. ``started``: the listener's
    time.monotonic() at start, whose uptime stands in for its own row's until that is written."""
    gateway = listener.gateway
    members, totals, published = await asyncio.to_thread(_read, listener)
    now = now_ms()
    since = now - int((time.monotonic() - started) * 1000)
    live = tuple(sorted(counters(listener.metrics).items()))
    mine = Member(gateway.owner, gateway.node, "", since, 0, now, len(listener.clients), counters=live)
    members = [m for m in members if m.owner != gateway.owner] + [mine]
    release = _version()
    values = sys_status.node_topics(gateway.node, members, now, release)
    if totals:
        values += sys_status.cluster_topics(members, now, release)
        values += [(topic, "") for topic in sys_status.gone_topics(published, members)]
    publishes = [Publish(topic, text.encode(), 0, True) for topic, text in values]
    await gateway.submit(gateway.publish("", publishes, listener.settings.admin_group))


def _read(listener: Host) -> tuple[list[Member], bool, list[str]]:
    """The members; whether this process holds the totals' lease (taking it if free); if so,
    the nodes' topics retained now (their uptimes: one a node)."""
    owner = listener.gateway.owner
    with listener.gateway.qm.unit_of_work() as uow:
        members = nodes.members(uow.connection)
        totals = nodes.take_lease(uow.connection, nodes.SYS_TOTALS, owner)
        pattern = f"{sys_status.NODES}+/uptime"
        found = listings.list_retained(uow.connection, pattern, limit=MAX_NODES) if totals else []
    return members, totals, [publication.topic for _, publication in found]
