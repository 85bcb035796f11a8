"""Broker instances for the network tests: one ``broker serve --api`` process per queue
manager, each with its own database, on loopback ports.

A :class:`Node` is started the way an operator starts a broker and is ready when its
``/ready`` answers; the test talks to its database directly (a QueueManager and a
BrokerClient of its own, as an application on that host would) and to its API over HTTP.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from broker.admin import neighbours
from broker.bench import processes
from broker.client import BrokerClient
from broker.network import links
from broker.service.provision import prepare_database
from queues import QueueManager, make_engine

BROKER = Path(sys.executable).with_name("broker")
READY_SECONDS = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(condition: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


class Node:
    """One broker instance: queue manager ``name`` on database ``url``."""

    def __init__(self, name: str, url: str, workdir: Path, *, mqtt_port: int | None = None) -> None:
        self.name = name
        self.url = url
        self.port = free_port()
        self.mqtt_port = mqtt_port  # serve MQTT there too
        self.log_path = workdir / f"{name}.log"
        self.workdir = workdir
        self.process: subprocess.Popen[bytes] | None = None
        prepare_database(make_engine(url), name)
        self.qm = QueueManager(make_engine(url), appl_name="nettest", user_id="app")
        self.client = BrokerClient(self.qm, user_id="app", timeout=15.0)

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Node:
        env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
        argv = [str(BROKER), "--db", self.url, "--qmgr", self.name, "--log-format", "json"]
        argv += ["serve", "--api", "--host", "127.0.0.1", "--port", str(self.port), "--batch-size", "50"]
        if self.mqtt_port is not None:
            argv += ["--mqtt", str(self.mqtt_port)]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(argv, cwd=self.workdir, env=env, stdout=log, stderr=log)
        wait_until(self._ready, READY_SECONDS, f"{self.name} to be ready")
        return self

    def _ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"{self.name} exited:\n{self.tail()}")
        try:
            return httpx.get(self.api + "/ready", timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> None:
        processes.stop(self.process)
        self.client.close()
        self.qm.close()

    def link(self, other: Node, token: str, *, check_topology: bool = True) -> str | None:
        """Define the link to ``other`` on this side; returns the warning, if any."""
        _, warning = neighbours.add_neighbour(
            self.qm, other.name, other.api, token, check_topology=check_topology
        )
        return warning

    def proxies(self) -> list[tuple[str, str | None]]:
        """(topic, origin) of the proxy subscriptions neighbours hold here."""
        from broker import store

        with self.qm.reading() as conn:
            page = store.list_subscriptions(conn, store.SubscriptionFilter(), limit=1000)
        return [(sub.key.topic, sub.origin) for _, sub in page if sub.origin is not None]

    def channel(self, neighbour: str) -> links.Link:
        with self.qm.reading() as conn:
            link = links.get_link(conn, neighbour)
        assert link is not None
        return link

    def lines(self, msg: str) -> list[dict[str, Any]]:
        found = []
        for raw in self.log_path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("msg") == msg:
                found.append(entry)
        return found

    def tail(self, count: int = 40) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-count:])
