"""The $SYS status of a cluster: each node's own, the cluster's totals, the topics of nodes gone."""

from __future__ import annotations

from broker.core.cluster import Member
from broker.core.sys_status import NAMES, cluster_topics, gone_topics, node_topics, topic_node

NOW = 1_000_000


def member(owner: str, node: str, *, started: int, clients: int, dead: bool = False, **counts: int) -> Member:
    counters = tuple(sorted((name.replace("_", "/"), n) for name, n in counts.items()))
    return Member(owner, node, "", started, 1, NOW, clients, NOW if dead else 0, counters=counters)


MEMBERS = [
    member("a1", "a:1883", started=NOW - 90_000, clients=3, messages_received=10, bytes_sent=100),
    member("a2", "a:1883", started=NOW - 30_000, clients=2, messages_received=5),  # a's second process
    member("b1", "b:1883", started=NOW - 50_000, clients=4, messages_received=1, logins_failed=2),
    member("c1", "c:1883", started=NOW - 999_000, clients=7, messages_received=1000, dead=True),
]


def test_a_node_publishes_the_sum_of_its_live_processes_under_its_name() -> None:
    topics = dict(node_topics("a:1883", MEMBERS, NOW, "1.0"))
    prefix = "$SYS/broker/nodes/a:1883/"
    assert set(topics) == {prefix + name for name in NAMES}
    assert topics[prefix + "clients/connected"] == "5"
    assert topics[prefix + "messages/received"] == "15"
    assert topics[prefix + "bytes/sent"] == "100"
    assert topics[prefix + "logins/failed"] == "0"
    assert topics[prefix + "uptime"] == "90 seconds"  # its oldest process's
    assert topics[prefix + "version"] == "broker 1.0"


def test_the_totals_count_every_live_member_and_no_dead_one() -> None:
    topics = dict(cluster_topics(MEMBERS, NOW, "1.0"))
    assert topics["$SYS/broker/clients/connected"] == "9"
    assert topics["$SYS/broker/messages/received"] == "16"
    assert topics["$SYS/broker/logins/failed"] == "2"
    assert topics["$SYS/broker/uptime"] == "90 seconds"
    assert topics["$SYS/broker/nodes/count"] == "2"
    assert len(topics) == len(NAMES) + 1


def test_the_topics_of_a_node_with_no_live_member_are_cleared() -> None:
    published = [
        "$SYS/broker/nodes/a:1883/uptime",
        "$SYS/broker/nodes/c:1883/uptime",
        "$SYS/broker/nodes/d/uptime",
    ]
    gone = gone_topics(published, MEMBERS)
    assert gone == [f"$SYS/broker/nodes/{node}/{name}" for node in ("c:1883", "d") for name in NAMES]
    assert gone_topics(published[:1], MEMBERS) == []


def test_the_node_of_a_topic() -> None:
    assert topic_node("$SYS/broker/nodes/a:1883/uptime") == "a:1883"
    assert topic_node("$SYS/broker/nodes/count") == ""
    assert topic_node("$SYS/broker/uptime") == ""
