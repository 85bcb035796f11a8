"""Broker instances for the network tests: one ``broker serve --api`` process per queue
manager, each with its own database, on loopback ports.

A :class:`Node` is started the way an operator starts a broker and is ready when its
``/ready`` answers; the test talks to its database directly (a QueueManager and a
BrokerClient of its own, as an application on that host would) and to its API over HTTP.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from broker.admin import neighbours
from broker.bench import processes
from broker.bench.processes import free_port, wait_until  # noqa: F401 (the network tests use them from here)
from broker.client import BrokerClient
from broker.network import links
from broker.service.provision import prepare_database
from queues import QueueManager, make_engine

READY_SECONDS = 60.0


class Node:
    """One broker instance: queue manager ``name`` on database ``url``."""

    def __init__(self, name: str, url: str, workdir: Path, *, mqtt_port: int | None = None) -> None:
        self.name = name
        self.url = url
        self.port = processes.free_port()
        self.mqtt_port = mqtt_port  # serve MQTT there too
        serve = ["--api", "--host", "127.0.0.1", "--port", str(self.port), "--batch-size", "50"]
        if mqtt_port is not None:
            serve += ["--mqtt", str(mqtt_port)]
        log = workdir / f"{name}.log"
        self.server = processes.ServeProcess(name, url, log, serve, options=["--qmgr", name], cwd=workdir)
        prepare_database(make_engine(url), name)
        self.qm = QueueManager(make_engine(url), appl_name="nettest", user_id="app")
        self.client = BrokerClient(self.qm, user_id="app", timeout=15.0)

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Node:
        self.server.start(lambda: processes.api_ready(self.api), READY_SECONDS)
        return self

    def kill(self) -> None:
        self.server.kill()

    def stop(self) -> None:
        self.server.stop()
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
        return self.server.lines(msg)

    def tail(self, count: int = 40) -> str:
        return self.server.tail(count)
