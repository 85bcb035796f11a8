"""The listener's limits, against a real ``broker serve --mqtt``: how fast it takes new
connections and how many half-open ones it holds, a new client's wait beside a CONNECT flood,
memory after connection churn, topics up to MQ's longest, and the close after DISCONNECT."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from pathlib import Path

from broker.bench import mqtt_churn
from broker.bench.process_stats import quiet
from broker.protocol.mqtt import ConnAck, Disconnect, PubAck, Publish, SubAck, Subscribe
from broker.protocol.psc import MAX_TOPIC_LENGTH
from broker.store import mqtt
from tests.broker.service.mqtt.clients import MqttBroker, Raw, eventually
from tests.broker.service.mqtt.test_flood import rss_mb
from tests.e2e.processes import Brokers

ANONYMOUS = {"BROKER_MQTT_ANONYMOUS": "anon"}  # the bench's short-lived clients send no user name


def _connect_all(port: int, count: int, prefix: str) -> float:
    """``count`` clients CONNECT at once; the seconds until the last CONNACK."""
    answers: list[object] = []

    def one(n: int) -> None:
        raw = Raw(port)
        answers.append(raw.connect(f"{prefix}-{n}"))
        raw.close()

    started = time.monotonic()
    threads = [threading.Thread(target=one, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == [ConnAck(False, 0)] * count
    return time.monotonic() - started


def test_connections_are_accepted_no_faster_than_the_rate_allows(brokers: Brokers) -> None:
    """20 a second, a second's worth at once: 60 clients take two seconds more."""
    broker = MqttBroker(brokers, BROKER_MQTT_MAX_CONNECT_RATE="20")
    assert _connect_all(broker.port, 60, "paced") >= 1.6  # unpaced, they take a tenth of that


def test_half_open_connections_hold_their_places_for_the_connect_timeout_at_most(brokers: Brokers) -> None:
    """Five sockets that never send CONNECT fill the half-open places: the next client waits
    until the timeout frees them, and is then served."""
    broker = MqttBroker(brokers, BROKER_MQTT_MAX_HALF_OPEN="5", BROKER_MQTT_CONNECT_TIMEOUT="1")
    silent = [socket.create_connection(("127.0.0.1", broker.port)) for _ in range(5)]
    time.sleep(0.2)  # all five are accepted before the client comes
    started = time.monotonic()
    client = Raw(broker.port)
    assert client.connect("patient") == ConnAck(False, 0)
    waited = time.monotonic() - started
    assert 0.5 <= waited < 4.0, waited
    for sock in silent:
        sock.settimeout(5)
        assert sock.recv(1) == b""  # closed by the broker
        sock.close()
    client.close()


def test_a_new_client_is_served_within_a_second_beside_a_connect_flood(brokers: Brokers) -> None:
    """Two hundred clients at a time connect, subscribe, publish and leave, flat out; a new
    client's CONNECT, SUBSCRIBE and QoS 1 PUBLISH are each answered within a second at p99."""
    broker = MqttBroker(brokers, **ANONYMOUS)
    flood = mqtt_churn.connect_flood(broker.port, "broker", "test", seconds=3.0)
    assert flood.errors == 0
    assert flood.flood_rate > 50, flood.flood_rate
    assert len(flood.flooded.connack) >= 3
    assert flood.flooded.worst() < 1.0, flood.flooded


def test_memory_levels_off_under_connection_churn(brokers: Brokers) -> None:
    """Clients that connect, subscribe, publish and leave leave nothing behind: after ten
    thousand (the bounded caches full), fifteen thousand more add well under the 10 MB that
    100,000 may add. ``broker serve`` runs on jemalloc (``broker.cli.allocator``): on glibc's
    malloc what churn frees stays resident in holes, several megabytes more on SQLite. Each
    reading waits for the broker to be done with the clients that left (on a loaded machine it
    is still ending their sessions when the last one has gone)."""
    broker = MqttBroker(brokers, **ANONYMOUS)
    pid = broker.process.pid
    assert on_jemalloc(pid)
    warm = mqtt_churn.churn(broker.port, lambda: 0, "broker", "warm", 10_000)
    assert warm.errors == 0
    quiet([pid])
    before = rss_mb(pid)
    churned = mqtt_churn.churn(broker.port, lambda: 0, "broker", "churn", 15_000)
    assert churned.errors == 0
    quiet([pid])
    assert rss_mb(pid) - before < 10.0, (before, rss_mb(pid))


def test_the_allocator_setting_system_keeps_glibcs_malloc(brokers: Brokers) -> None:
    broker = MqttBroker(brokers, BROKER_ALLOCATOR="system")
    assert not on_jemalloc(broker.process.pid)


def on_jemalloc(pid: int) -> bool:
    """Whether the process has jemalloc loaded (started again with it preloaded)."""
    return "libjemalloc" in Path(f"/proc/{pid}/maps").read_text()


def test_topics_up_to_mqs_longest_work_and_a_longer_one_is_refused_for_its_length(broker: MqttBroker) -> None:
    """MQ's topic strings hold 10,240 characters (MQ_TOPIC_STR_LENGTH), whatever the protocol:
    a topic that long is subscribed to and published on; one character more is refused as a
    topic error (SUBACK 0x80, the publication dropped), logged and counted as such, never as an
    authorisation refusal."""
    longest = "long/" + "x" * (MAX_TOPIC_LENGTH - 5)
    too_long = longest + "y"
    client = Raw(broker.port)
    assert client.connect("long-topics") == ConnAck(False, 0)
    client.send(Subscribe(1, ((longest, 1), (too_long, 1))))
    assert client.next() == SubAck(1, (1, 0x80))
    client.send(Publish(too_long, b"refused", 1, packet_id=2), Publish(longest, b"taken", 1, packet_id=3))
    got = [client.next(), client.next(), client.next()]
    delivered = [p for p in got if isinstance(p, Publish)]
    assert [(p.topic, p.payload) for p in delivered] == [(longest, b"taken")]
    assert {p.packet_id for p in got if isinstance(p, PubAck)} == {2, 3}
    client.send(PubAck(delivered[0].packet_id or 0))

    for packet in ("publication", "subscription"):
        (line,) = broker.process.lines(f"mqtt {packet} refused: topic too long or not valid")
        assert line["topic_length"] == MAX_TOPIC_LENGTH + 1
    assert not broker.process.lines("mqtt publication refused: not authorised")
    assert not broker.process.lines("mqtt subscription refused: not authorised")
    client.close()


def test_the_connection_closes_at_once_after_disconnect(broker: MqttBroker) -> None:
    """DISCONNECT: the broker closes the socket before it ends the session (no will)."""
    client = Raw(broker.port)
    assert client.connect("leaving") == ConnAck(False, 0)
    client.send(Disconnect())
    started = time.monotonic()
    assert client.closed_by_broker(timeout=5)
    assert time.monotonic() - started < 0.5
    client.close()


def test_a_cycle_of_the_benchmark_is_one_clean_client(brokers: Brokers) -> None:
    """The churn and CONNECT-flood figures count what ``cycle`` does: a clean session that
    subscribes, publishes, receives its own publication and leaves nothing behind."""
    broker = MqttBroker(brokers, **ANONYMOUS)
    times: list[float] = []
    asyncio.run(mqtt_churn.cycle(broker.port, "one-cycle", times))
    assert len(times) == 3 and all(t >= 0 for t in times)

    def ended() -> bool:
        with broker.qm.unit_of_work() as uow:
            return mqtt.find_session(uow.connection, "one-cycle") is None

    assert eventually(ended)
