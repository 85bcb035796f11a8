"""A fault-injection harness: traffic on every path through a running ``broker serve --mqtt
--api`` while its database fails, and the proof afterwards that every path delivers again and
that nothing acknowledged was lost.

The paths, each a stream of numbered messages (the payload is the number) sent every
:data:`PERIOD` seconds:

- ``mqtt qos 0/1/2``: paho publishers to a persistent paho subscriber (QoS 2 subscription);
- ``mqrfh2 -> mqtt``: MQRFH2 publications put on the broker's stream by an application;
- ``mqtt -> mqrfh2``: MQTT publications to an MQRFH2 subscription's queue, read by an application;
- ``bridge in`` / ``bridge out``: through a bridge to a Mosquitto of the test's own;
- ``offline session``: a persistent session that is offline during the fault receives, when
  its client comes back, the QoS 1 messages published meanwhile;
- ``operator disconnect``: an operator's disconnect request, made as the database returns,
  closes its client.

A message is *acknowledged* when its sender was told it is durable (PUBACK or PUBCOMP, the
put's commit, Mosquitto's PUBACK for the bridge's inbound side); every acknowledged message
of a QoS 1/2 path must arrive. A path *recovers* when a message sent after the database's
return is received.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import paho.mqtt.client as paho

from broker.client import BrokerClient, decode_publication
from broker.protocol.mqtt import ConnAck, Publish
from broker.store import mqtt_requests
from queues import MQError, QueueManager, make_engine
from tests.broker.service.mqtt.clients import PASSWORD, Mosquitto, MqttBroker, Raw, StrictPublisher
from tests.e2e.processes import Brokers, free_port

PERIOD = 0.05  # seconds between two messages of one path
RECOVERY_SECONDS = 5.0  # the most a path may take to deliver again once the database is back
DRAIN_SECONDS = 40.0
APP_QUEUE = "APP.Q"
EXPECTED_TASKS = {
    "router",
    "channels",
    "mqtt-gateway",
    "mqtt-watcher",
    "mqtt-requests",
    "mqtt-session-limits",
    "mqtt-sys",
    "mqtt-bridge-estate",
}


@dataclass
class Path_:
    """One path's messages: when each was sent, which were acknowledged, when each arrived."""

    name: str
    lossless: bool
    sent: dict[int, float] = field(default_factory=dict)
    acknowledged: set[int] = field(default_factory=set)
    received: dict[int, float] = field(default_factory=dict)
    arrivals: Counter[int] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def send(self, seq: int) -> None:
        with self.lock:
            self.sent[seq] = time.monotonic()

    def acknowledge(self, seq: int) -> None:
        with self.lock:
            self.acknowledged.add(seq)

    def receive(self, seq: int) -> None:
        with self.lock:
            self.received.setdefault(seq, time.monotonic())
            self.arrivals[seq] += 1

    def duplicates(self) -> list[int]:
        """The messages that arrived more than once (none may, on a QoS 2 path)."""
        with self.lock:
            return sorted(seq for seq, count in self.arrivals.items() if count > 1)

    def recovery(self, since: float) -> float | None:
        """Seconds from ``since`` to the arrival of the first message sent after it."""
        with self.lock:
            arrivals = [self.received[s] for s, at in self.sent.items() if at >= since and s in self.received]
        return min(arrivals) - since if arrivals else None

    def lost(self, sent_after: float = 0.0) -> list[int]:
        with self.lock:
            return sorted(
                s for s in self.acknowledged if self.sent.get(s, 0.0) >= sent_after and s not in self.received
            )


class PahoPublisher(threading.Thread):
    """Publishes ``seq`` on ``topic`` every :data:`PERIOD` seconds, reconnecting by itself (a
    persistent session for QoS 1/2: what was not acknowledged is sent again)."""

    def __init__(
        self, port: int, client_id: str, topic: str, qos: int, path: Path_, *, user: str | None
    ) -> None:
        super().__init__(name=client_id, daemon=True)
        self.topic, self.qos, self.path = topic, qos, path
        self.client = _client(client_id, clean=qos == 0, user=user)
        self.mids: dict[int, int] = {}  # paho message id -> seq
        self.acked_mids: list[int] = []
        self.client.on_publish = lambda _c, _u, mid, _r, _p: self.acked_mids.append(mid)
        self.client.connect_async("127.0.0.1", port, keepalive=30)
        self.client.loop_start()
        self.halt = threading.Event()

    def run(self) -> None:
        seq = 0
        while not self.halt.wait(PERIOD):
            seq += 1
            self.path.send(seq)
            info = self.client.publish(self.topic, str(seq).encode(), self.qos)
            self.mids[info.mid] = seq

    def settle(self) -> None:
        """Record what was acknowledged (message ids are unique within a run of this size)."""
        if self.qos:
            for mid in list(self.acked_mids):
                self.path.acknowledge(self.mids[mid])

    def acknowledged(self) -> int:
        return len(self.acked_mids)

    def stop(self) -> None:
        self.halt.set()
        self.join(10)

    def close(self) -> None:
        self.client.loop_stop()


class StrictPathPublisher(threading.Thread):
    """Publishes ``seq`` on ``topic`` every :data:`PERIOD` seconds at QoS 1 or 2 through a
    :class:`StrictPublisher`, which keeps the QoS 2 flow across reconnections that fail (paho's
    publisher sends a PUBREL it owes as a new PUBLISH then: a duplicate of its own making)."""

    def __init__(self, port: int, client_id: str, topic: str, qos: int, path: Path_, *, user: str) -> None:
        super().__init__(name=client_id, daemon=True)
        self.topic, self.qos, self.path = topic, qos, path
        self.count = 0
        self.client = StrictPublisher(port, client_id, user=user, acknowledged=self._acknowledged)
        self.halt = threading.Event()

    def _acknowledged(self, publish: Publish) -> None:
        self.path.acknowledge(int(publish.payload))
        self.count += 1

    def run(self) -> None:
        seq = 0
        while not self.halt.wait(PERIOD):
            seq += 1
            self.path.send(seq)
            self.client.publish(self.topic, str(seq).encode(), self.qos)

    def settle(self) -> None:
        """Nothing to do: each acknowledgement is recorded as it comes."""

    def acknowledged(self) -> int:
        return self.count

    def stop(self) -> None:
        self.halt.set()
        self.join(10)

    def close(self) -> None:
        self.client.stop()


class PahoSubscriber:
    """A persistent session subscribed to ``filters``; each message goes to the path its topic
    names (``route``)."""

    def __init__(
        self,
        port: int,
        client_id: str,
        filters: list[tuple[str, int]],
        route: Callable[[str], Path_ | None],
        *,
        user: str | None,
    ) -> None:
        self.client = _client(client_id, clean=False, user=user)
        self.subscribed = threading.Event()
        self.port = port

        def on_connect(c: Any, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
            if not reason.is_failure:
                c.subscribe(filters)

        def on_message(_c: Any, _u: Any, msg: Any) -> None:
            path = route(msg.topic)
            if path is not None:
                path.receive(int(msg.payload))

        self.client.on_connect = on_connect
        self.client.on_subscribe = lambda *_: self.subscribed.set()
        self.client.on_message = on_message

    def start(self) -> PahoSubscriber:
        self.client.connect_async("127.0.0.1", self.port, keepalive=30)
        self.client.loop_start()
        assert self.subscribed.wait(15), "the subscriber was not subscribed"
        return self

    def stop(self) -> None:
        gone = threading.Event()
        self.client.on_disconnect = lambda *_: gone.set()
        self.client.disconnect()
        gone.wait(10)
        self.client.loop_stop()


def _client(client_id: str, *, clean: bool, user: str | None) -> paho.Client:
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=clean)
    if user is not None:
        client.username_pw_set(user, PASSWORD)
    client.reconnect_delay_set(0.2, 0.5)  # type: ignore[arg-type]  # floats work, and the test needs them
    client.max_queued_messages_set(0)
    return client


class Application(threading.Thread):
    """An MQRFH2 application with its own queue manager: ``step`` every :data:`PERIOD`
    seconds, whatever the database does meanwhile (a failed step is simply not counted)."""

    def __init__(self, url: str, name: str, step: Callable[[QueueManager, int], None]) -> None:
        super().__init__(name=name, daemon=True)
        self.url, self.step = url, step
        self.halt = threading.Event()

    def run(self) -> None:
        qm = QueueManager(make_engine(self.url), appl_name=self.name, user_id="app")
        seq = 0
        try:
            while not self.halt.wait(PERIOD):
                seq += 1
                with contextlib.suppress(MQError):
                    self.step(qm, seq)
        finally:
            qm.close()

    def stop(self) -> None:
        self.halt.set()
        self.join(30)


class Traffic:
    """Every path through one broker, flowing from :meth:`start` to :meth:`stop`."""

    def __init__(self, broker: MqttBroker, remote: Mosquitto, api: str) -> None:
        self.broker, self.remote, self.api = broker, remote, api
        names = [
            ("mqtt qos 0", False),
            ("mqtt qos 1", True),
            ("mqtt qos 2", True),
            ("mqrfh2 -> mqtt", True),
            ("mqtt -> mqrfh2", True),
            ("bridge in", True),
            ("bridge out", True),
            ("offline session", True),
        ]
        self.paths = {name: Path_(name, lossless) for name, lossless in names}
        port, url = broker.port, broker.brokers.url
        self.publishers = [
            PahoPublisher(port, "pub-q0", "out/q0", 0, self.paths["mqtt qos 0"], user="alice"),
            PahoPublisher(port, "pub-q1", "out/q1", 1, self.paths["mqtt qos 1"], user="alice"),
            PahoPublisher(port, "pub-q2", "out/q2", 2, self.paths["mqtt qos 2"], user="alice"),
            PahoPublisher(port, "pub-app", "app/x", 1, self.paths["mqtt -> mqrfh2"], user="alice"),
            PahoPublisher(port, "pub-br", "br/out/x", 1, self.paths["bridge out"], user="alice"),
            PahoPublisher(remote.port, "remote-pub", "br/in/x", 1, self.paths["bridge in"], user=None),
        ]
        self.applications = [
            Application(url, "rfh-publisher", self._put_publication),
            Application(url, "rfh-subscriber", self._get_publication),
        ]
        self.subscriber = PahoSubscriber(
            port, "watch", [("out/#", 2), ("rfh/#", 2), ("br/in/#", 2)], self._route, user="alice"
        )
        self.remote_subscriber = PahoSubscriber(
            remote.port, "remote-sub", [("br/out/#", 1)], lambda _: self.paths["bridge out"], user=None
        )
        self.offline_since = 0.0

    def _route(self, topic: str) -> Path_ | None:
        prefixes = {
            "out/q0": "mqtt qos 0",
            "out/q1": "mqtt qos 1",
            "out/q2": "mqtt qos 2",
            "rfh/": "mqrfh2 -> mqtt",
            "br/in/": "bridge in",
        }
        return next((self.paths[name] for prefix, name in prefixes.items() if topic.startswith(prefix)), None)

    def _put_publication(self, qm: QueueManager, seq: int) -> None:
        path = self.paths["mqrfh2 -> mqtt"]
        path.send(seq)
        BrokerClient(qm, reply_queue="APP.REPLIES", user_id="app").publish("rfh/x", str(seq), wait=False)
        path.acknowledge(seq)  # the put committed

    def _get_publication(self, qm: QueueManager, _: int) -> None:
        path = self.paths["mqtt -> mqrfh2"]
        while True:
            try:
                message = qm.get(APP_QUEUE, wait=0.2)
            except MQError as exc:
                if exc.reason == 2033:  # MQRC_NO_MSG_AVAILABLE
                    return
                raise
            path.receive(int(decode_publication(message).body))

    def start(self) -> None:
        qm = self.broker.qm
        qm.define_queue(APP_QUEUE, max_depth=1_000_000)
        with BrokerClient(qm, user_id="app", timeout=30) as app:
            assert app.subscribe("app/#", APP_QUEUE).completion == "ok"
        offline = PahoSubscriber(
            self.broker.port, "offline", [("out/q1", 1)], lambda _: None, user="alice"
        ).start()
        offline.stop()
        self.offline_since = time.monotonic()
        self.subscriber.start()
        self.remote_subscriber.start()
        _wait(lambda: _bridge_connected(self.broker), 20, "the bridge connected")
        for worker in [*self.publishers, *self.applications]:
            worker.start()

    def offline_returns(self) -> None:
        """The offline session's client comes back: it receives what was published meanwhile."""
        path = self.paths["offline session"]
        self.offline = PahoSubscriber(
            self.broker.port, "offline", [("out/q1", 1)], lambda _: path, user="alice"
        )
        self.offline.start()

    def stop(self) -> None:
        for worker in [*self.publishers, *self.applications]:
            worker.stop()
        for publisher in self.publishers:
            publisher.settle()
        qos1 = self.paths["mqtt qos 1"]
        offline = self.paths["offline session"]
        with qos1.lock:
            offline.sent = {s: at for s, at in qos1.sent.items() if at >= self.offline_since}
            offline.acknowledged = {s for s in qos1.acknowledged if s in offline.sent}

    def drained(self) -> bool:
        return not any(path.lost() for path in self.paths.values() if path.lossless)

    def close(self) -> None:
        for publisher in self.publishers:
            publisher.close()
        for subscriber in (self.subscriber, self.remote_subscriber, getattr(self, "offline", None)):
            if subscriber is not None:
                subscriber.client.loop_stop()


def _bridge_connected(broker: MqttBroker) -> bool:
    return bool(broker.process.lines("mqtt bridge connected"))


def _wait(check: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"not {what} within {seconds} s"
        time.sleep(0.05)


@dataclass
class Figures:
    """What one fault cost: seconds to recover, path by path, from the database's return."""

    fault: str
    recovery: dict[str, float | None]

    def line(self) -> str:
        return json.dumps({"fault": self.fault, "recovery": self.recovery})


class Harness:
    """A broker on ``url`` (its API, MQTT and a bridge), the traffic, and the checks."""

    def __init__(self, url: str, workdir: Path, **environment: str) -> None:
        (workdir / "mosquitto").mkdir()
        self.remote = Mosquitto(workdir / "mosquitto")
        self.remote.start()
        bridges = workdir / "bridges.conf"
        bridges.write_text(f"connection estate\naddress 127.0.0.1:{self.remote.port}\ntopic br/# both 1\n")
        self.brokers = Brokers(url, workdir)
        api_port = free_port()
        self.api = f"http://127.0.0.1:{api_port}"
        environment = {
            "BROKER_MQTT_BRIDGES": str(bridges),
            "BROKER_MQTT_SYS_INTERVAL": "1",
            "BROKER_MQTT_SESSION_EXPIRY": "3600",
            **environment,
        }
        self.broker = MqttBroker(self.brokers, api_port, **environment)
        self.traffic = Traffic(self.broker, self.remote, self.api)

    def run(
        self,
        fault: str,
        begin: Callable[[], None],
        end: Callable[[], None],
        *,
        hold: float = 0.0,
        outage: bool = True,
    ) -> Figures:
        """Traffic; ``begin`` the fault, keep it ``hold`` seconds (``/ready`` must say
        ``degraded``, naming the database, meanwhile) and ``end`` it, returning once the
        database is back; then every check (``outage``: the broker must have logged the
        database's absence). Returns the recovery figures."""
        traffic = self.traffic
        traffic.start()
        self._victim = Raw(self.broker.port)
        assert self._victim.connect("victim") == ConnAck(False, 0)
        time.sleep(2.0)
        begin()
        if hold:
            self._check_degraded(hold)
        end()
        back = time.monotonic()
        victim = self._disconnect_victim(back)
        time.sleep(RECOVERY_SECONDS + 1.0)
        traffic.offline_returns()
        recovery = {
            name: path.recovery(back) for name, path in traffic.paths.items() if name != "offline session"
        }
        recovery["operator disconnect"] = victim
        traffic.stop()
        _wait(traffic.drained, DRAIN_SECONDS, "every acknowledged message delivered")
        figures = Figures(fault, recovery)
        print(figures.line(), file=sys.stderr)
        slow = {
            name: seconds
            for name, seconds in recovery.items()
            if seconds is None or seconds > RECOVERY_SECONDS
        }
        assert not slow, f"paths that did not deliver again within {RECOVERY_SECONDS} s: {slow}"
        self._check_health()
        self._check_log(outage)
        return figures

    def _disconnect_victim(self, back: float) -> float | None:
        """Seconds from the database's return until an operator's disconnect request, made then
        (retried while the database still refuses it), has closed its client."""
        closed = threading.Event()

        def watch() -> None:
            try:
                raw.closed_by_broker(timeout=RECOVERY_SECONDS * 3)
            finally:
                closed.set()

        raw = self._victim
        threading.Thread(target=watch, daemon=True).start()
        deadline = back + RECOVERY_SECONDS * 3
        while time.monotonic() < deadline:
            try:
                mqtt_requests.disconnect(self.broker.qm, "victim", "outage test")
                break
            except MQError:
                time.sleep(0.1)
        if not closed.wait(max(0.0, deadline - time.monotonic())):
            return None
        return time.monotonic() - back

    def _check_degraded(self, hold: float) -> None:
        """``/ready`` says ``degraded``, naming the database, within the ``hold`` seconds."""
        until = time.monotonic() + hold
        seen: list[dict[str, Any]] = []
        while time.monotonic() < until:
            body = httpx.get(f"{self.api}/ready", timeout=5).json()
            if body["status"] == "degraded" and body["database"]:
                seen.append(body)
            time.sleep(0.2)
        assert seen, "/ready never said the database was unavailable during the fault"

    def _check_health(self) -> None:
        """Every supervised task of the process alive and running again."""
        deadline = time.monotonic() + RECOVERY_SECONDS
        while True:
            body = httpx.get(f"{self.api}/ready", timeout=5).json()
            tasks = {task["name"]: task for task in body["tasks"]}
            running = {name for name, task in tasks.items() if task["alive"] and task["state"] == "running"}
            if body["status"] == "ready" and running >= EXPECTED_TASKS:
                return
            assert time.monotonic() < deadline, f"not ready again: {body}"
            time.sleep(0.2)

    def _check_log(self, outage: bool) -> None:
        """No traceback: a known outage is a warning, not an error with its stack."""
        log = self.broker.process.log_path.read_text(encoding="utf-8", errors="replace")
        assert "Traceback" not in log, log[log.index("Traceback") - 2000 : log.index("Traceback") + 3000]
        errors = [line for line in self.broker.process.lines() if line.get("level") in ("error", "critical")]
        assert not errors, errors
        if outage:
            assert self.broker.process.lines("database unavailable; background work waits for it")

    def close(self) -> None:
        self.traffic.close()
        self.brokers.close()
        if self.remote.process is not None and self.remote.process.poll() is None:
            self.remote.stop()


def hold_sqlite_write_lock(database: str, seconds: float) -> subprocess.Popen[bytes]:
    """Another process holding SQLite's write lock on ``database`` for ``seconds``."""
    script = (
        "import sqlite3, sys, time\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)\n"
        "c.execute('BEGIN IMMEDIATE')\n"
        "print('locked', flush=True)\n"
        "time.sleep(float(sys.argv[2]))\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", script, database, str(seconds)], stdout=subprocess.PIPE, env=dict(os.environ)
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == b"locked"
    return holder
