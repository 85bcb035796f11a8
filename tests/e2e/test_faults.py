"""Fault tests with real ``broker serve`` processes: SIGKILL at random moments, two brokers sharing
one PostgreSQL database, and the PostgreSQL server restarted under a running broker.

Every test ends with the same proof: each subscriber holds each publication it should exactly
once (publications are numbered; no gap, no duplicate), however the broker was treated meanwhile.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from broker import store
from broker.client import BrokerClient, decode_publication
from broker.core.system import CONTROL_QUEUE, DEFAULT_STREAM
from broker.protocol.options import RegOpt
from queues import QueueManager, owners
from queues.errors import MQError
from queues.reasons import Reason
from tests.e2e.processes import Brokers, PrivateCluster, Publisher, wait_until

pytestmark = pytest.mark.slow

WAIT = 60.0
SEED = 20261121
DESK_ALL = b"DESK-ALL".ljust(24, b"\x00")
DESK_T0 = b"DESK-T0".ljust(24, b"\x00")


def topic(number: int) -> str:
    return f"Seq/T{number % 3}"


# What each subscriber must end up with, given the numbers published.
EXPECTED: dict[tuple[str, bytes | None], Callable[[int], bool]] = {
    ("ALL.Q", None): lambda n: True,
    ("PLUS.Q", None): lambda n: True,
    ("SHARED.Q", DESK_ALL): lambda n: True,
    ("SHARED.Q", DESK_T0): lambda n: n % 3 == 0,
}


def subscribe_all(qm: QueueManager) -> None:
    """Wildcard subscribers on their own queues, and two sharing a queue through CorrelAsId."""
    for name in ("ALL.Q", "PLUS.Q", "SHARED.Q"):
        qm.define_queue(name, max_depth=1_000_000)
    with BrokerClient(qm, user_id="alice", timeout=WAIT) as app:
        for response in (
            app.subscribe("Seq/#", "ALL.Q"),
            app.subscribe("Seq/+", "PLUS.Q"),
            app.subscribe("Seq/#", "SHARED.Q", options=RegOpt.CorrelAsId, correl_id=DESK_ALL),
            app.subscribe("Seq/T0", "SHARED.Q", options=RegOpt.CorrelAsId, correl_id=DESK_T0),
        ):
            assert response.completion == "ok", response.describe()


def received(qm: QueueManager) -> dict[tuple[str, bytes | None], list[int]]:
    """The numbers on each subscriber queue, in queue order (browsed: nothing is taken)."""
    found: dict[tuple[str, bytes | None], list[int]] = {key: [] for key in EXPECTED}
    for queue in ("ALL.Q", "PLUS.Q", "SHARED.Q"):
        for browsed in qm.browse(queue, limit=1_000_000):
            m = browsed.message
            key = (queue, m.correl_id if queue == "SHARED.Q" else None)
            found[key].append(int(decode_publication(m).text))
    return found


def delivered_count(qm: QueueManager) -> int:
    """Like any MQ application, the monitor sees 2009 once for a connection it used just
    before the database went away (``queues.database``), and simply asks again."""
    try:
        return qm.depth("ALL.Q")
    except MQError as exc:
        if exc.reason != Reason.MQRC_CONNECTION_BROKEN:
            raise
        return qm.depth("ALL.Q")


def check_exactly_once(qm: QueueManager, publisher: Publisher, *, ordered: bool) -> None:
    got = received(qm)
    certain, uncertain = set(publisher.put), set(publisher.uncertain)
    for key, wanted in EXPECTED.items():
        numbers = got[key]
        twice = sorted(n for n, times in Counter(numbers).items() if times > 1)
        assert not twice, f"{key}: {len(twice)} publications delivered more than once, e.g. {twice[:10]}"
        expected = {n for n in certain if wanted(n)}
        missing = expected - set(numbers)
        assert not missing, f"{key}: {len(missing)} publications lost, e.g. {sorted(missing)[:10]}"
        strays = set(numbers) - expected - {n for n in uncertain if wanted(n)}
        assert not strays, f"{key}: publications never put {sorted(strays)[:10]}"
        if ordered:
            assert numbers == sorted(numbers), f"{key}: publication order not kept"


def drained(qm: QueueManager, publisher: Publisher) -> Callable[[], bool]:
    """Everything put has been routed: the inputs are empty and the deliveries are there."""
    certain = len(publisher.put)

    def done() -> bool:
        return (
            qm.depth(DEFAULT_STREAM) == 0 and qm.depth(CONTROL_QUEUE) == 0 and delivered_count(qm) >= certain
        )

    return done


def test_sigkill_at_random_moments_loses_and_duplicates_nothing(brokers: Brokers) -> None:
    broker = brokers.start(batch_size=5)
    subscribe_all(brokers.qm)
    publisher = Publisher(brokers.url, 1_000_000, topic, interval=0.003)
    publisher.start()
    rng = random.Random(SEED)  # random moments, the same ones on every run
    routed_before_kill = []
    try:
        for _ in range(5):
            time.sleep(rng.uniform(0.3, 0.9))
            routed_before_kill.append(delivered_count(brokers.qm))
            assert broker.kill() == -signal.SIGKILL
            broker.start()
        time.sleep(0.3)
    finally:
        publisher.halt()
        publisher.finish()

    assert publisher.uncertain == []
    assert routed_before_kill == sorted(routed_before_kill) and routed_before_kill[-1] > routed_before_kill[0]
    wait_until(drained(brokers.qm, publisher), WAIT, "every publication", required=False)
    assert broker.terminate() == 0
    check_exactly_once(brokers.qm, publisher, ordered=True)
    assert len(broker.lines("broker started")) == 6


# Scale-out: SKIP LOCKED on PostgreSQL, claims on SQLite (queues.claims).
def test_two_brokers_share_one_database_without_double_delivery(brokers: Brokers) -> None:
    first = brokers.start("first", batch_size=5)
    second = brokers.start("second", batch_size=5)
    subscribe_all(brokers.qm)
    publisher = Publisher(brokers.url, 1_000_000, topic, interval=0.003)
    publisher.start()
    try:
        wait_until(
            lambda: first.routed() > 0 and second.routed() > 0, WAIT, "both brokers to route publications"
        )
        assert first.kill() == -signal.SIGKILL  # mid-stream: the second one carries on alone
        before = second.routed()
        wait_until(lambda: second.routed() > before + 50, WAIT, "the survivor to route on")
        first.start()
        time.sleep(0.5)
    finally:
        publisher.halt()
        publisher.finish()

    wait_until(drained(brokers.qm, publisher), WAIT, "every publication", required=False)
    assert first.terminate() == 0
    assert second.terminate() == 0
    check_exactly_once(brokers.qm, publisher, ordered=False)

    # Each broker's last heartbeat reports what it routed, for status pages in any process.
    with brokers.qm.reading() as conn:
        instances = {i["instance"]: i for i in store.list_instances(conn)}
    second_process = (second.pid, owners.machine_key())
    (second_stats,) = [
        i["stats"] for i in instances.values() if owners.process_of(i["instance"]) == second_process
    ]
    assert second_stats["messages"] == sum(int(e["messages"]) for e in second.lines("batch routed"))
    assert second_stats["batches"] == len(second.lines("batch routed"))
    assert second_stats["publications"] == second.routed()


def test_two_brokers_sharing_a_stream_keep_its_publication_order(brokers: Brokers) -> None:
    """Batches of a stream commit in the order they were claimed (claim turns), so two
    routers sharing it deliver a publisher's publications in the order they were put."""
    first = brokers.start("first", batch_size=5)
    second = brokers.start("second", batch_size=5)
    subscribe_all(brokers.qm)
    publisher = Publisher(brokers.url, 1_500, topic, interval=0.0)
    publisher.start()
    publisher.finish()
    wait_until(drained(brokers.qm, publisher), WAIT, "every publication", required=False)
    assert first.terminate() == 0
    assert second.terminate() == 0
    assert first.routed() > 100 and second.routed() > 100  # both really shared the stream
    check_exactly_once(brokers.qm, publisher, ordered=True)


def test_a_broker_with_two_routers_shares_the_stream_and_stops_them_all(brokers: Brokers) -> None:
    """``broker serve --routers 2``: a second routing process shares the stream, keeps its
    order, is started again if it dies, and ends with the broker on SIGTERM."""
    broker = brokers.start(batch_size=5, routers=2)
    subscribe_all(brokers.qm)
    publisher = Publisher(brokers.url, 1_500, topic, interval=0.0)
    publisher.start()
    publisher.finish()
    wait_until(drained(brokers.qm, publisher), WAIT, "every publication", required=False)
    (started,) = broker.lines("router process started")
    routers = {broker.pid, started["pid"]}
    assert all(broker.routed(pid=pid) > 100 for pid in routers)  # both really shared the stream
    check_exactly_once(brokers.qm, publisher, ordered=True)

    os.kill(started["pid"], signal.SIGKILL)
    wait_until(lambda: len(broker.lines("router process started")) == 2, WAIT, "the router restarted")
    restarted = broker.lines("router process started")[-1]["pid"]
    wait_until(lambda: len(broker.lines("broker started")) == 3, WAIT, "the new router ready")
    assert broker.terminate() == 0
    with pytest.raises(ProcessLookupError):  # stopped and reaped with the broker
        os.kill(restarted, 0)
    assert len(broker.lines("broker stopped")) == 2  # the serving router and the restarted one


def test_postgresql_restarted_under_the_running_broker(
    private_postgres: PrivateCluster, tmp_path: Path
) -> None:
    group = Brokers(private_postgres.url, tmp_path)
    try:
        broker = group.start(batch_size=5)
        subscribe_all(group.qm)
        publisher = Publisher(group.url, 1_000_000, topic, interval=0.003)
        publisher.start()
        try:
            wait_until(lambda: delivered_count(group.qm) >= 100, WAIT, "a steady stream of deliveries")
            private_postgres.restart()
            assert broker.alive
            resumed = delivered_count(group.qm) + 100
            wait_until(lambda: delivered_count(group.qm) >= resumed, WAIT, "routing to resume")
        finally:
            publisher.halt()
            publisher.finish()

        wait_until(drained(group.qm, publisher), WAIT, "every publication", required=False)
        assert broker.alive
        warnings = broker.lines("database unavailable; background work waits for it")
        assert warnings and all(w["level"] == "warning" for w in warnings)
        assert len(warnings) <= 2  # once per outage (a second if the broker saw it come and go)
        assert broker.lines("database available again")
        assert publisher.retries > 0  # the publisher saw the outage too
        check_exactly_once(group.qm, publisher, ordered=True)
        assert broker.terminate() == 0
    finally:
        group.close()
