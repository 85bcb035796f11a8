"""PostgreSQL fails over under a running ``broker serve --mqtt``: the broker's URL names a primary
and its synchronous standby (``?host=...&host=...&target_session_attrs=read-write``); MQTT QoS 1
and QoS 2 publishers, an MQRFH2 application publishing on the stream (routed by two routers, so
claim turns cross the failover) and a persistent MQTT subscriber flow; the primary stops at once
and the standby is promoted. The broker reconnects to the new primary by itself: every message
acknowledged before, during or after the failover is delivered, the stream carries on, and the
log holds no error. The outage (primary stopped -> first message sent after it delivered) and
the QoS 2 messages delivered more than once (none may be: the QoS 2 publisher keeps its flows as
MQTT says, which paho-mqtt's does not across failed reconnections) are printed as a JSON line on
standard error (``pytest -s``), the figures ``docs/operations.md`` quotes."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.client import BrokerClient
from broker.store import mqtt
from queues import QueueManager
from queues.ids import now_ms
from tests.broker.service.mqtt.clients import PASSWORD
from tests.e2e.outages import Application, PahoPublisher, PahoSubscriber, Path_, StrictPathPublisher
from tests.e2e.processes import Brokers, PrivateCluster, ServeProcess, free_port, wait_until
from tests.e2e.replication import Primary, Standby, replicate_synchronously

pytestmark = pytest.mark.slow

FLOWING = 20  # messages of each path delivered before the primary goes
# A failover manager's time to notice that the primary is gone and promote a standby
# (Patroni: its loop_wait and ttl, 10-30 s by default; a second here).
DETECTION_SECONDS = 1.0
RECOVERY_SECONDS = 15.0  # the most the broker may take to deliver again after the primary stops
CARRY_ON_SECONDS = 2.0  # traffic after the first delivery on the new primary
DRAIN_SECONDS = 30.0


@pytest.fixture
def replicated() -> Iterator[tuple[Primary, Standby]]:
    if os.geteuid() != 0:  # pragma: no cover - the test machines run as root
        pytest.fail("the private PostgreSQL clusters are run through runuser, which needs root")
    primary = Primary()
    standby = Standby(primary)
    try:
        primary.create()
        standby.create()
        replicate_synchronously(primary)
        yield primary, standby
    finally:
        standby.remove()
        primary.remove()


def multi_host_url(*clusters: PrivateCluster) -> str:
    """The URL a broker is given for a primary and its standbys, as ``docs/operations.md``
    shows it."""
    hosts = "&".join(f"host=127.0.0.1:{cluster.port}" for cluster in clusters)
    return f"postgresql://postgres@/broker?{hosts}&target_session_attrs=read-write"


def serve(brokers: Brokers) -> ServeProcess:
    """``broker serve --mqtt`` with two routers sharing the stream (so claim turns cross the
    failover), and alice's MQTT password."""
    process = brokers.start(routers=2, mqtt_port=free_port())
    with brokers.qm.unit_of_work() as uow:
        mqtt.set_password(uow.connection, "alice", PASSWORD.encode(), now_ms())
    return process


class Traffic:
    """MQTT QoS 1 and QoS 2 publishers, an MQRFH2 application publishing on the stream the
    routers route, and one persistent MQTT subscriber of all three, each on its own path."""

    def __init__(self, broker: ServeProcess) -> None:
        port, url = broker.mqtt_port, broker.url
        assert port is not None
        self.paths = {
            "out/q1": Path_("mqtt qos 1", lossless=True),
            "out/q2": Path_("mqtt qos 2", lossless=True),
            "rfh/x": Path_("mqrfh2 -> mqtt", lossless=True),
        }
        self.subscriber = PahoSubscriber(
            port, "watch", [("out/#", 2), ("rfh/#", 2)], self.paths.get, user="alice"
        )
        self.publishers: list[PahoPublisher | StrictPathPublisher] = [
            PahoPublisher(port, "pub-q1", "out/q1", 1, self.paths["out/q1"], user="alice"),
            StrictPathPublisher(port, "pub-q2", "out/q2", 2, self.paths["out/q2"], user="alice"),
        ]
        self.application = Application(url, "rfh-publisher", self._put_publication)

    def _put_publication(self, qm: QueueManager, seq: int) -> None:
        path = self.paths["rfh/x"]
        path.send(seq)
        BrokerClient(qm, user_id="app").publish("rfh/x", str(seq), wait=False)
        path.acknowledge(seq)  # the put committed

    def start(self) -> None:
        self.subscriber.start()
        for worker in [*self.publishers, self.application]:
            worker.start()

    def flowing(self) -> bool:
        return all(len(path.received) >= FLOWING for path in self.paths.values())

    def recovered(self, since: float) -> bool:
        return all(path.recovery(since) is not None for path in self.paths.values())

    def acknowledged(self) -> int:
        return sum(publisher.acknowledged() for publisher in self.publishers) + len(
            self.paths["rfh/x"].acknowledged
        )

    def stop(self) -> None:
        self.application.stop()
        for publisher in self.publishers:
            publisher.stop()
            publisher.settle()

    def lost(self) -> dict[str, list[int]]:
        return {path.name: path.lost() for path in self.paths.values() if path.lost()}

    def close(self) -> None:
        for publisher in self.publishers:
            publisher.close()
        self.subscriber.client.loop_stop()
        self.application.stop()


def test_the_broker_follows_its_database_to_the_promoted_standby(
    replicated: tuple[Primary, Standby], tmp_path: Path
) -> None:
    primary, standby = replicated
    brokers = Brokers(multi_host_url(primary, standby), tmp_path)
    try:
        broker = serve(brokers)
        traffic = Traffic(broker)
        try:
            traffic.start()
            wait_until(traffic.flowing, 30, "messages flowing")
            acknowledged_before = traffic.acknowledged()
            primary.crash()
            stopped = time.monotonic()  # the primary is gone, every connection to it cut
            time.sleep(DETECTION_SECONDS)  # the standby refuses writes meanwhile: nothing may stay on it
            standby.promote()
            promoted = time.monotonic()
            wait_until(lambda: traffic.recovered(stopped), RECOVERY_SECONDS, "a delivery on every path")
            time.sleep(CARRY_ON_SECONDS)
            traffic.stop()
            drained = wait_until(lambda: not traffic.lost(), DRAIN_SECONDS, "the drain", required=False)
        finally:
            traffic.close()
        print(json.dumps(figures(traffic, stopped, promoted, acknowledged_before)), file=sys.stderr)
        assert drained, f"acknowledged but never delivered: {traffic.lost()}"
        assert not traffic.paths["out/q2"].duplicates(), "QoS 2 messages delivered twice"
        check_log(broker)
    finally:
        brokers.close()


def figures(traffic: Traffic, stopped: float, promoted: float, acknowledged_before: int) -> dict[str, Any]:
    """What the failover cost, path by path: seconds from the primary's stop (and from the
    promotion) to the first delivery of a message sent after it; what was lost or doubled."""
    paths = traffic.paths.values()
    return {
        "fault": "postgresql failover (primary stopped -m immediate, standby promoted)",
        "promoted_after": round(promoted - stopped, 2),
        "outage_seconds": {p.name: round(p.recovery(stopped) or 0.0, 2) for p in paths},
        "after_promotion_seconds": {p.name: round(p.recovery(promoted) or 0.0, 2) for p in paths},
        "acknowledged_before": acknowledged_before,
        "acknowledged": {p.name: len(p.acknowledged) for p in paths},
        "lost": {p.name: len(p.lost()) for p in paths},
        "qos2_duplicates": len(traffic.paths["out/q2"].duplicates()),
    }


def check_log(process: ServeProcess) -> None:
    """The failover was an outage the broker waited out, not a defect: no error, no traceback,
    and the database's absence and return both logged."""
    log = process.log_path.read_text(encoding="utf-8", errors="replace")
    assert "Traceback" not in log, log[log.index("Traceback") - 2000 : log.index("Traceback") + 3000]
    errors = [line for line in process.lines() if line.get("level") in ("error", "critical")]
    assert not errors, errors
    assert process.lines("database unavailable; background work waits for it")
    assert process.lines("database available again")
