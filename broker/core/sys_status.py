"""What the ``$SYS/broker/...`` topics say in a cluster of MQTT nodes: each node's own status,
and the cluster's totals.

Pure: members in (each listener process's row, with the counters it wrote at its last
heartbeat), (topic, text) pairs out. Every node publishes its own under
``$SYS/broker/nodes/NODE/...`` (the sum over its listener processes); one node, the holder of
the totals' lease, publishes the cluster's under ``$SYS/broker/...``, the names Mosquitto
gives one broker's, so that a tool written for one broker reads the cluster as one; and it
clears the topics of a node that is gone. Counts are since each process started (a node that
restarts begins its own again; the totals count live members only).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Sequence

from broker.core.cluster import Member

PREFIX = "$SYS/broker/"
NODES = PREFIX + "nodes/"
# The counters a member writes with its heartbeat, each a number summed over members.
COUNTERS = (
    "messages/received",
    "messages/sent",
    "bytes/received",
    "bytes/sent",
    "logins/failed",
    "logins/throttled",
    "throttled/users",
    "throttled/addresses",
)
# Every value a node's topics hold, so that a node gone has each cleared.
NAMES = ("version", "uptime", "clients/connected", *COUNTERS)


def node_topics(node: str, members: Iterable[Member], now: int, version: str) -> list[tuple[str, str]]:
    """``node``'s own status, from its live members (its listener processes)."""
    own = [m for m in members if m.node == node and m.alive]
    return [(f"{NODES}{node}/{name}", text) for name, text in _status(own, now, version)]


def cluster_topics(members: Iterable[Member], now: int, version: str) -> list[tuple[str, str]]:
    """The cluster's totals over its live members, and how many nodes are live."""
    live = [m for m in members if m.alive]
    totals = [(PREFIX + name, text) for name, text in _status(live, now, version)]
    return [*totals, (NODES[:-1] + "/count", str(len({m.node for m in live})))]


def gone_topics(published: Collection[str], members: Iterable[Member]) -> list[str]:
    """The topics of the nodes that ``published`` (topics under ``$SYS/broker/nodes/``) shows
    and that have no live member: to be cleared."""
    live = {m.node for m in members if m.alive}
    gone = sorted({node for node in map(topic_node, published) if node and node not in live})
    return [f"{NODES}{node}/{name}" for node in gone for name in NAMES]


def topic_node(topic: str) -> str:
    """The node a ``$SYS/broker/nodes/NODE/...`` topic is of ("" for any other topic)."""
    if not topic.startswith(NODES):
        return ""
    node, slash, _ = topic[len(NODES) :].partition("/")
    return node if slash else ""


def _status(members: Sequence[Member], now: int, version: str) -> list[tuple[str, str]]:
    """(name, text) of each value over ``members``; the uptime is the oldest one's."""
    counts: Counter[str] = Counter()
    for member in members:
        counts.update(dict(member.counters))
    started = min((m.started_at for m in members), default=now)
    values = [
        ("version", f"broker {version}"),
        ("uptime", f"{max(0, now - started) // 1000} seconds"),
        ("clients/connected", str(sum(m.clients for m in members))),
    ]
    return values + [(name, str(counts[name])) for name in COUNTERS]
