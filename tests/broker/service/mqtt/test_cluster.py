"""An MQTT cluster: three ``broker serve --mqtt`` nodes (separate processes, each its own node
name and port, as separate machines) on one PostgreSQL database behind HAProxy running the
repository's deploy/haproxy.cfg. Clients know only HAProxy's port. A client id taken over on
another node, a node starting, a node killed (SIGKILL) and a node stopped (SIGSTOP) that comes
back: every client resumes on a surviving node with nothing lost and, at QoS 2, nothing twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import paho.mqtt.client as paho
import pytest

from broker.protocol.mqtt import MQTT_5, ConnAck, Properties, Publish, SubAck, Subscribe, Will
from broker.service.mqtt.membership import BEATS_PER_TIMEOUT
from broker.store import mqtt
from tests.broker.service.mqtt.clients import Mosquitto, Paho, Raw, eventually
from tests.broker.service.mqtt.cluster import Cluster, Counted, Publisher
from tests.conftest import PostgresDatabases
from tests.e2e.conftest import private_postgres  # noqa: F401 (a PostgreSQL server the test may stop)
from tests.e2e.processes import BROKER, Brokers, PrivateCluster, child_environment

TIMEOUT = 3.0  # node_timeout in these tests (seconds)
# Death to declaration: the timeout after the last beat seen, seen up to a period late.
DETECTION = TIMEOUT + 2 * TIMEOUT / BEATS_PER_TIMEOUT
SUBSCRIBERS = 100
TOPIC = "fleet/data"


@pytest.fixture
def cluster(postgres: PostgresDatabases, tmp_path: Path) -> Iterator[Cluster]:
    url = postgres.create()
    brokers = Brokers(url, tmp_path)
    group = Cluster(brokers, tmp_path, BROKER_NODE_TIMEOUT=str(TIMEOUT))
    try:
        yield group
    finally:
        group.close()
        brokers.close()
        postgres.drop(url)


def cli(cluster: Cluster, *argv: str) -> object:
    """``broker --db URL ARGV... --json``: its JSON answer."""
    done = subprocess.run(
        [str(BROKER), "--db", cluster.brokers.url, *argv, "--json"],
        capture_output=True,
        text=True,
        env=child_environment(),
        check=True,
        timeout=60,
    )
    return json.loads(done.stdout)


def online(cluster: Cluster, client_id: str) -> bool:
    with cluster.brokers.qm.reading() as conn:
        stored = mqtt.find_session(conn, client_id)
    return stored is not None and stored.online


def test_a_client_id_taken_over_on_another_node_within_a_second(cluster: Cluster) -> None:
    cluster.start("node1", "node2", "node3")
    cluster.proxy()
    cluster.wait("UP", "node1", "node2", "node3")
    watcher = Paho(cluster.port, "watcher")
    watcher.connect()
    watcher.subscribe(("status/#", 1))
    first = Raw(cluster.port)
    will = Will("status/device", b"taken over", 1, False)
    assert first.connect("device", clean=False, will=will) == ConnAck(False, 0)
    holder = cluster.holder("device")
    # HAProxy gives a new connection to the node with the fewest: one without "device".
    second = Raw(cluster.port)
    started = time.monotonic()
    assert second.connect("device", clean=False) == ConnAck(True, 0)
    took = time.monotonic() - started
    assert cluster.holder("device") not in ("", holder)
    assert took < 1.0, f"the takeover across nodes took {took:.3f} s"
    assert first.closed_by_broker()  # MQTT-3.1.4-2: the first connection is closed
    assert [m.payload for m in watcher.receive(1)] == [b"taken over"]  # its will, once
    assert watcher.nothing_more()
    print(f"\ntakeover across nodes: {took * 1000:.0f} ms")
    second.close()
    watcher.close()


def test_a_node_starting_leaves_the_other_nodes_sessions_online(cluster: Cluster) -> None:
    cluster.start("node1", "node2")
    cluster.proxy()
    cluster.wait("UP", "node1", "node2")
    device = Raw(cluster.port)
    assert device.connect("online1", clean=False) == ConnAck(False, 0)
    holder = cluster.holder("online1")
    other = "node2" if holder == "node1" else "node1"
    cluster.start("node3")
    cluster.nodes[other].kill()
    cluster.nodes[other].start()  # ready: its own earlier run's sessions released, no other's
    assert online(cluster, "online1") and cluster.holder("online1") == holder

    parked = Raw(cluster.ports[other])  # straight to the restarted node: a session of its own
    assert parked.connect("parked", clean=False) == ConnAck(False, 0)
    cluster.nodes[other].kill()
    cluster.nodes[other].start()
    assert not online(cluster, "parked")  # released by its own node's start (or a peer before)
    assert online(cluster, "online1") and cluster.holder("online1") == holder
    device.close()


def test_sigkill_of_a_node_fails_every_subscriber_over_with_nothing_lost(cluster: Cluster) -> None:
    """The node holding SUBSCRIBERS persistent subscribers (QoS 1; every fourth QoS 2) is
    killed while a publisher on another node publishes at QoS 2: each subscriber reconnects
    through HAProxy to a surviving node within the detection bound and receives every
    publication acknowledged to the publisher; the QoS 2 ones receive none twice."""
    cluster.start("node1")
    cluster.proxy()
    cluster.wait("UP", "node1")
    subscribers = [Counted(cluster.port, f"sub{n:04d}") for n in range(SUBSCRIBERS)]
    for n, subscriber in enumerate(subscribers):
        subscriber.connect()
        subscriber.subscribe(TOPIC, 2 if n % 4 == 0 else 1)
    cluster.start("node2", "node3")
    cluster.wait("UP", "node2", "node3")
    publisher = Publisher(cluster.port, TOPIC, 2, 0.05)  # to node2 or node3: the fewest connections
    publisher.start()
    assert eventually(lambda: all(len(s.received) >= 10 for s in subscribers), 60)
    assert {cluster.holder(s.client_id) for s in subscribers} == {"node1"}

    killed = time.monotonic()
    cluster.nodes["node1"].kill()
    assert eventually(lambda: all(s.resumed_since(killed) for s in subscribers), DETECTION + 30)
    resumed = [s.resumed_since(killed) or 0.0 for s in subscribers]
    failover = max(resumed) - killed
    time.sleep(1.0)
    acknowledged = publisher.halt()
    assert eventually(lambda: all(acknowledged <= set(s.received) for s in subscribers), 60)

    lost = {s.client_id: len(acknowledged - set(s.received)) for s in subscribers}
    twice = {s.client_id: sum(c - 1 for c in s.received.values()) for s in subscribers[::4]}
    assert sum(lost.values()) == 0, lost
    assert sum(twice.values()) == 0, twice
    assert {cluster.holder(s.client_id) for s in subscribers} <= {"node2", "node3"}
    assert failover < DETECTION + 2.0, f"failover of {SUBSCRIBERS} clients took {failover:.1f} s"
    print(
        f"\nSIGKILL of the node of {SUBSCRIBERS} subscribers: all resumed after {failover:.2f} s "
        f"(first {min(resumed) - killed:.2f} s; node_timeout {TIMEOUT:g} s), "
        f"{len(acknowledged)} publications acknowledged, 0 lost, 0 twice at QoS 2"
    )
    for subscriber in subscribers:
        subscriber.close()


def test_a_stopped_node_that_continues_steals_nothing_back_and_sends_nothing_twice(cluster: Cluster) -> None:
    """SIGSTOP of the node of 20 QoS 2 subscribers (one of them connected to it directly, not
    through HAProxy): they resume elsewhere once it is declared dead. SIGCONT: it finds its
    lease taken, closes its connections without touching their sessions, and joins again."""
    cluster.start("node1")
    cluster.proxy()
    cluster.wait("UP", "node1")
    subscribers = [Counted(cluster.port, f"sub{n:02d}") for n in range(19)]
    subscribers.append(Counted(cluster.ports["node1"], "direct"))
    for subscriber in subscribers:
        subscriber.connect()
        subscriber.subscribe(TOPIC, 2)
    cluster.start("node2", "node3")
    cluster.wait("UP", "node2", "node3")
    publisher = Publisher(cluster.port, TOPIC, 2, 0.05)
    publisher.start()
    assert eventually(lambda: all(len(s.received) >= 10 for s in subscribers), 60)

    node1 = cluster.nodes["node1"]
    stopped = time.monotonic()
    os.kill(node1.pid, signal.SIGSTOP)
    try:
        through = subscribers[:-1]
        assert eventually(lambda: all(s.resumed_since(stopped) for s in through), DETECTION + 30)
        failover = max(s.resumed_since(stopped) or 0.0 for s in through) - stopped
        held = {s.client_id: cluster.holder(s.client_id) for s in through}
        assert set(held.values()) <= {"node2", "node3"}
        time.sleep(1.0)
    finally:
        os.kill(node1.pid, signal.SIGCONT)
    assert eventually(lambda: bool(node1.lines("mqtt node joined the cluster again")), 30)
    assert node1.lines("this node was declared dead by another; its sessions are others' now")
    time.sleep(2.0)  # it would have stolen them back by now
    assert {s.client_id: cluster.holder(s.client_id) for s in through} == held
    acknowledged = publisher.halt()
    assert eventually(lambda: all(acknowledged <= set(s.received) for s in subscribers), 60)
    twice = {s.client_id: sum(c - 1 for c in s.received.values()) for s in subscribers}
    assert sum(twice.values()) == 0, twice
    assert subscribers[-1].resumed_since(stopped)  # the direct one, on node1's new run
    assert {n["node"]: n["state"] for n in cli(cluster, "mqtt", "nodes")} == {  # type: ignore[attr-defined]
        "node1": "alive",
        "node2": "alive",
        "node3": "alive",
    }
    print(f"\nSIGSTOP of the node of 20 subscribers: all resumed elsewhere after {failover:.2f} s, 0 twice")
    for subscriber in subscribers:
        subscriber.close()


def test_a_database_outage_longer_than_the_timeout_declares_no_node_dead(
    private_postgres: PrivateCluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Every node is cut off alike: none takes another's silence for death once it returns."""
    brokers = Brokers(private_postgres.url, tmp_path)
    group = Cluster(brokers, tmp_path, BROKER_NODE_TIMEOUT=str(TIMEOUT))
    try:
        group.start("node1", "node2")
        device = Raw(group.ports["node2"])
        assert device.connect("device", clean=False) == ConnAck(False, 0)
        private_postgres.stop()
        time.sleep(2 * TIMEOUT)
        private_postgres.start()
        assert eventually(lambda: online(group, "device") and group.holder("device") == "node2", 30)
        time.sleep(2 * TIMEOUT)  # time enough to declare anyone whose beat had not come back
        for node in group.nodes.values():
            assert not node.lines("mqtt node declared dead"), node.tail()
        assert online(group, "device") and group.holder("device") == "node2"
        device.close()
    finally:
        group.close()
        brokers.close()


def test_operators_see_the_nodes_and_reach_the_node_holding_a_client(cluster: Cluster) -> None:
    cluster.start("node1", "node2")
    cluster.proxy()
    cluster.wait("UP", "node1", "node2")
    clients = {client_id: Raw(cluster.port) for client_id in ("c1", "c2")}
    for client_id, raw in clients.items():
        assert raw.connect(client_id, clean=False) == ConnAck(False, 0)
    holders = {client_id: cluster.holder(client_id) for client_id in clients}
    assert set(holders.values()) == {"node1", "node2"}  # leastconn: one each
    sessions = cli(cluster, "mqtt", "sessions")
    listed = {s["client_id"]: s["node"] for s in sessions}  # type: ignore[attr-defined]
    assert listed == holders
    # Each client's own address, as HAProxy's PROXY header names it (not HAProxy's).
    addresses = {s["client_id"]: s["address"] for s in sessions}  # type: ignore[attr-defined]
    assert addresses == {c: f"127.0.0.1:{raw.sock.getsockname()[1]}" for c, raw in clients.items()}

    def view() -> dict[str, tuple[str, int]]:
        return {n["node"]: (n["state"], n["clients"]) for n in cli(cluster, "mqtt", "nodes")}  # type: ignore[attr-defined]

    assert eventually(lambda: view() == {"node1": ("alive", 1), "node2": ("alive", 1)}, 10)

    cli(cluster, "mqtt", "disconnect", "c1")
    assert clients["c1"].closed_by_broker()
    node = cluster.nodes[holders["c1"]]
    assert eventually(lambda: bool(node.lines("mqtt client disconnected by an operator")))
    cli(cluster, "mqtt", "delete-session", "c2")
    assert clients["c2"].closed_by_broker()
    with cluster.brokers.qm.reading() as conn:
        assert mqtt.find_session(conn, "c2") is None
    assert cluster.nodes[holders["c2"]].lines("mqtt session deleted by an operator")

    cluster.nodes["node2"].kill()
    assert eventually(lambda: view()["node2"][0] == "dead", DETECTION + 10)


def test_a_bridge_runs_on_one_node_and_moves_when_that_node_dies(cluster: Cluster, tmp_path: Path) -> None:
    (tmp_path / "mosquitto").mkdir()
    mosquitto = Mosquitto(tmp_path / "mosquitto")
    mosquitto.start()
    try:
        bridges = tmp_path / "bridges.conf"
        bridges.write_text(f"connection estate\naddress 127.0.0.1:{mosquitto.port}\ntopic sensors/# in 1\n")
        cluster.environment["BROKER_MQTT_BRIDGES"] = str(bridges)
        cluster.start("node1", "node2")
        cluster.proxy()
        cluster.wait("UP", "node1", "node2")

        def running() -> list[str]:
            return [
                name
                for name, node in cluster.nodes.items()
                if node.alive and node.lines("mqtt bridge connected")
            ]

        assert eventually(lambda: len(running()) == 1, 30)
        time.sleep(2 * TIMEOUT / BEATS_PER_TIMEOUT)
        (first,) = running()  # one node runs it, the other waits
        local = Paho(cluster.port, "local", clean=False)
        local.connect()
        local.subscribe(("sensors/#", 1))
        remote = Paho(mosquitto.port, "remote", user=None)
        remote.connect()
        remote.publish("sensors/t1", b"before", 1)
        assert [m.payload for m in local.receive(1)] == [b"before"]

        cluster.nodes[first].kill()
        (second,) = [name for name in cluster.nodes if name != first]
        assert eventually(lambda: bool(cluster.nodes[second].lines("mqtt bridge connected")), DETECTION + 30)
        assert eventually(
            lambda: online(cluster, "local") and cluster.holder("local") == second, DETECTION + 30
        )
        remote.publish("sensors/t1", b"after", 1)
        assert b"after" in [m.payload for m in local.receive(1, timeout=30)]
    finally:
        mosquitto.stop()


def test_each_node_publishes_its_own_status_and_one_node_the_clusters_totals(cluster: Cluster) -> None:
    """$SYS per node under $SYS/broker/nodes/NODE/..., the totals under Mosquitto's names; a
    node killed has its topics cleared and leaves the totals once declared dead."""
    cluster.environment["BROKER_MQTT_SYS_INTERVAL"] = "1"
    cluster.start("node1", "node2")
    watcher = Paho(cluster.ports["node1"], "watcher")  # straight to node1, as the devices below to node2
    watcher.connect()
    watcher.subscribe(("$SYS/broker/clients/connected", 0), ("$SYS/broker/nodes/#", 0))
    devices = [Raw(cluster.ports["node2"]) for _ in range(2)]
    for number, device in enumerate(devices):
        assert device.connect(f"device{number}") == ConnAck(False, 0)
    seen: dict[str, bytes] = {}

    def shows(wanted: dict[str, bytes]) -> bool:
        while not watcher.messages.empty():
            message = watcher.messages.get()
            seen[message.topic] = message.payload
        return all(seen.get("$SYS/broker/" + name) == value for name, value in wanted.items())

    running = {
        "nodes/node1/clients/connected": b"1",
        "nodes/node2/clients/connected": b"2",
        "clients/connected": b"3",
        "nodes/count": b"2",
    }
    assert eventually(lambda: shows(running), 15), seen
    cluster.nodes["node2"].kill()
    gone = {"nodes/node2/clients/connected": b"", "clients/connected": b"1", "nodes/count": b"1"}
    assert eventually(lambda: shows(gone), DETECTION + 15), seen
    assert seen["$SYS/broker/nodes/node2/uptime"] == b""  # every topic of the node gone cleared
    watcher.close()


def test_a_shared_subscription_spans_the_nodes(cluster: Cluster) -> None:
    """Members of one shared subscription on two nodes: what the member on the publisher's node
    has no room for waits on the share's queue and goes to the member on the other node, as
    does what that member leaves unacknowledged when it goes."""
    cluster.start("node1", "node2")
    share = "$share/workers/jobs/#"
    silent = Raw(cluster.ports["node1"], level=MQTT_5)
    connack = silent.connect("silent", properties=Properties(receive_maximum=1))
    assert isinstance(connack, ConnAck) and connack.return_code == 0
    silent.send(Subscribe(1, ((share, 1),)))
    assert silent.next() == SubAck(1, (1,))
    far = Paho(cluster.ports["node2"], "far", protocol=paho.MQTTv5)
    assert far.connect()[0] == 0
    assert far.subscribe((share, 1)) == [1]
    publisher = Paho(cluster.ports["node1"], "boss")
    publisher.connect()
    for number in range(5):
        publisher.publish("jobs/x", b"%d" % number, 1)
    held = silent.next()
    assert isinstance(held, Publish)
    got = [m.payload for m in far.receive(4)]
    silent.close()  # never acknowledged: back on the share's queue, for the member on node2
    got += [m.payload for m in far.receive(1)]
    assert sorted(got) == [b"0", b"1", b"2", b"3", b"4"]
    assert far.nothing_more()
