"""An MQTT cluster for the tests: nodes as separate ``broker serve --mqtt`` processes (each its
own node name and port, standing for a machine) on one PostgreSQL database, behind Debian's
HAProxy run on the repository's own ``deploy/haproxy.cfg``; clients know only HAProxy's port.
And the clients of failover runs: paho-mqtt subscribers that count what they receive, and a
publisher that keeps its flows across reconnections."""

from __future__ import annotations

import collections
import os
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho

from broker.protocol.mqtt import Publish
from broker.store import mqtt
from queues.ids import now_ms
from tests.broker.service.mqtt.clients import PASSWORD, TIMEOUT, StrictPublisher, eventually
from tests.e2e.processes import Brokers, ServeProcess, free_port

HAPROXY = "/usr/sbin/haproxy"
CONFIG = Path(__file__).resolve().parents[4] / "deploy" / "haproxy.cfg"
NODES = 3  # the servers deploy/haproxy.cfg names
# HAProxy connects to the nodes from this address, with a PROXY header: the tests' own clients
# connect to a node straight from 127.0.0.1, without one.
PROXY_SOURCE = "127.0.0.2"


class Cluster:
    """``NODES`` nodes named node1... on ports of their own, and HAProxy in front of them.
    Nodes start when asked (:meth:`start`); HAProxy marks the others down."""

    def __init__(self, brokers: Brokers, workdir: Path, **environment: str) -> None:
        self.brokers = brokers
        self.environment = environment
        self.ports = {f"node{i}": free_port() for i in range(1, NODES + 1)}
        self.port = free_port()  # HAProxy's: the only one clients know
        self.socket = workdir / "haproxy.sock"
        self.nodes: dict[str, ServeProcess] = {}
        self.haproxy: subprocess.Popen[bytes] | None = None
        self._log = (workdir / "haproxy.log").open("ab")

    def start(self, *names: str) -> None:
        """Start the nodes ``names`` (the first also creates the principal alice)."""
        for name in names:
            settings = {"BROKER_NODE_NAME": name, "BROKER_MQTT_PROXY_FROM": PROXY_SOURCE, **self.environment}
            self.nodes[name] = self.brokers.start(name, mqtt_port=self.ports[name], environment=settings)
            if len(self.nodes) == 1:
                with self.brokers.qm.unit_of_work() as uow:
                    mqtt.set_password(uow.connection, "alice", PASSWORD.encode(), now_ms())

    def proxy(self) -> None:
        """Start HAProxy on deploy/haproxy.cfg, as it is, with the addresses in the environment."""
        environment = {
            **os.environ,
            "MQTT_BIND": f"127.0.0.1:{self.port}",
            "HAPROXY_SOCKET": str(self.socket),
            "HAPROXY_SOURCE": PROXY_SOURCE,
            **{name.upper(): f"127.0.0.1:{port}" for name, port in self.ports.items()},
        }
        argv = [HAPROXY, "-db", "-f", str(CONFIG)]
        self.haproxy = subprocess.Popen(argv, env=environment, stdout=self._log, stderr=self._log)
        assert eventually(self._listening, TIMEOUT), "HAProxy did not start"

    def _listening(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            return False
        return True

    def states(self) -> dict[str, str]:
        """Each server's status as HAProxy sees it (UP, DOWN, ...), from its runtime API (none
        while that is not up yet)."""
        with socket.socket(socket.AF_UNIX) as sock:
            try:
                sock.connect(str(self.socket))
            except OSError:
                return {}
            sock.sendall(b"show stat\n")
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        lines = data.decode().splitlines()
        header = lines[0].lstrip("# ").split(",")
        rows = [dict(zip(header, line.split(","), strict=False)) for line in lines[1:] if line]
        return {row["svname"]: _state(row) for row in rows if row.get("pxname") == "nodes"}

    def wait(self, state: str, *names: str, timeout: float = 30.0) -> None:
        """Until HAProxy sees every one of ``names`` in ``state`` (UP, DOWN), settled: not on its
        way to the other (``UP 1/2``), and UP only once a check has passed (HAProxy starts its
        servers UP, before their first check)."""
        assert eventually(lambda: all(self.states().get(n, "") == state for n in names), timeout), (
            f"HAProxy: {self.states()}, wanted {names} {state}"
        )

    def holder(self, client_id: str) -> str:
        """The node holding ``client_id``'s session ("" if none)."""
        with self.brokers.qm.reading() as conn:
            stored = mqtt.find_session(conn, client_id)
        return "" if stored is None else stored.node

    def close(self) -> None:
        if self.haproxy is not None and self.haproxy.poll() is None:
            self.haproxy.kill()
            self.haproxy.wait(10)
        self._log.close()


def _state(row: dict[str, str]) -> str:
    """A server's state in ``show stat``: its status, but UP only once a check has passed."""
    status = row["status"]
    if status == "UP" and not row.get("check_status", "").endswith("OK"):
        return "UP (unchecked)"
    return status


class Counted:
    """A paho-mqtt client through HAProxy (persistent session unless ``clean``) that reconnects
    on its own, as devices do, counting what it receives by payload and its connections."""

    def __init__(self, port: int, client_id: str, *, clean: bool = False, keepalive: int = 60) -> None:
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=clean)
        self.client.username_pw_set("alice", PASSWORD)
        self.client.reconnect_delay_set(1, 1)
        self.client_id = client_id
        self.port = port
        self.keepalive = keepalive
        self.received: collections.Counter[bytes] = collections.Counter()
        self.connects: list[tuple[float, int, bool]] = []  # (time.monotonic(), return code, present)
        self.lock = threading.Lock()
        self.client.on_connect = self._connected
        self.client.on_message = self._message

    def _connected(self, _c: Any, _u: Any, flags: Any, reason: Any, _p: Any) -> None:
        with self.lock:
            self.connects.append((time.monotonic(), reason.value, bool(flags.session_present)))

    def _message(self, _c: Any, _u: Any, message: Any) -> None:
        with self.lock:
            self.received[message.payload] += 1

    def connect(self) -> None:
        self.client.connect("127.0.0.1", self.port, keepalive=self.keepalive)
        self.client.loop_start()
        assert eventually(lambda: bool(self.connects), TIMEOUT), f"{self.client_id} did not connect"

    def subscribe(self, topic: str, qos: int) -> None:
        done = threading.Event()
        self.client.on_subscribe = lambda *_: done.set()
        self.client.subscribe(topic, qos)
        assert done.wait(TIMEOUT), f"{self.client_id}: no SUBACK"

    def resumed_since(self, moment: float) -> float | None:
        """When it connected again after ``moment`` (its session present), if it has."""
        with self.lock:
            again = [at for at, code, present in self.connects if at > moment and code == 0 and present]
        return again[0] if again else None

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


class Publisher:
    """Publishes numbered payloads (``b"<n>"``) at ``qos`` through HAProxy every ``interval``
    seconds until halted, on a persistent session that keeps each flow across reconnections
    (:class:`StrictPublisher`): if HAProxy moves it to another node, what it sent once is
    still routed once. paho's publisher does not: on a clean session it sends a PUBREC'd
    publication again as a new one, and its reconnections back off to seconds."""

    def __init__(self, port: int, topic: str, qos: int, interval: float) -> None:
        self.topic, self.qos, self.interval = topic, qos, interval
        self.acknowledged: set[bytes] = set()
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name="publisher", daemon=True)
        self.client = StrictPublisher(port, "publisher", acknowledged=self._acknowledged)

    def _acknowledged(self, publish: Publish) -> None:
        self.acknowledged.add(publish.payload)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        number = 0
        while not self._halt.wait(self.interval):
            self.client.publish(self.topic, str(number).encode(), self.qos)
            number += 1

    def halt(self, timeout: float = TIMEOUT) -> set[bytes]:
        """Stop publishing, wait for the acknowledgements of what was sent; what was acknowledged."""
        self._halt.set()
        self._thread.join(TIMEOUT)
        connected = self.client.connected
        assert eventually(self.client.done, timeout), (
            f"{len(self.client.pending)} publications never acknowledged; the publisher connected "
            f"{len(connected)} times (at {[round(at - connected[0], 2) for at in connected]} s)"
        )
        self.client.stop()
        with self.client.lock:
            return set(self.acknowledged)
