"""Connection scale: many clients on one server, each with one subscription.

``count`` clients CONNECT (keepalive 60, clean session) in steps of ``STEP`` at a time, then
each SUBSCRIBEs to one filter at QoS 1; each sends PINGREQ every half keepalive, as a client
library does. The server's resident set (its process and its children) before and after, per
connection. Then one publication on that topic at QoS 0 and one at QoS 1: the time from the
PUBLISH to the last of the ``count`` deliveries (each QoS 1 delivery is acknowledged at once),
and how many arrived. The clients are asyncio protocols on the broker's own codec
(``broker.bench.mqtt_load.Connection``), in this process: with nothing to do between the
fan-outs, one event loop keeps up with every one of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from broker.bench.mqtt_load import Connection
from broker.protocol.mqtt import MQTT_311, Packet, PingReq, PingResp, PubAck, Publish, SubAck, Subscribe

TOPIC = "scale/all"
STEP = 200  # connections opened at once: a server's accept queue is finite
KEEPALIVE = 60
FANOUT_SECONDS = 300.0
SETTLE_SECONDS = 2.0
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Fanout:
    qos: int
    received: int
    seconds: float  # from the PUBLISH to the last delivery


@dataclass(frozen=True, slots=True)
class Scale:
    server: str
    connections: int
    connect_seconds: float  # the first CONNECT to the last CONNACK
    subscribe_seconds: float  # the first SUBSCRIBE to the last SUBACK
    rss_before_kb: int
    rss_after_kb: int
    fanouts: tuple[Fanout, ...]

    @property
    def connects_per_second(self) -> float:
        return self.connections / self.connect_seconds if self.connect_seconds > 0 else 0.0

    @property
    def kb_per_connection(self) -> float:
        return (self.rss_after_kb - self.rss_before_kb) / self.connections


def raise_file_limit(needed: int) -> None:
    """Sockets are files: raise this process's soft limit (its children inherit it) toward
    the hard one, or fail saying so."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise SystemExit(f"{needed} connections need {needed} open files; the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed if hard == resource.RLIM_INFINITY else hard, hard))


class _Arrivals:
    """When each subscriber received the publication of each QoS."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.times: dict[int, list[float]] = {0: [], 1: []}
        self._all: dict[int, asyncio.Future[None]] = {}

    def arrived(self, qos: int) -> None:
        times = self.times[qos]
        times.append(time.monotonic())
        every = self._all.get(qos)
        if every is not None and len(times) >= self.count and not every.done():
            every.set_result(None)

    async def every(self, qos: int) -> None:
        """Until every subscriber has it, or FANOUT_SECONDS."""
        self._all[qos] = every = asyncio.get_running_loop().create_future()
        if len(self.times[qos]) < self.count:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(every, FANOUT_SECONDS)


class _Subscriber:
    """One client acknowledging its QoS 1 deliveries and recording each arrival."""

    __slots__ = ("arrivals", "connection")

    def __init__(self, connection: Connection, arrivals: _Arrivals) -> None:
        self.connection = connection
        self.arrivals = arrivals
        connection.on_packets = self._packets

    def _packets(self, packets: list[Packet]) -> None:
        for packet in packets:
            if isinstance(packet, Publish):
                if packet.qos == 1:
                    self.connection.send(PubAck(packet.packet_id or 0))
                self.arrivals.arrived(packet.qos)


async def _in_steps(count: int, one: Callable[[int], Awaitable[T]], into: list[T]) -> None:
    """``one(n)`` for every n below ``count``, STEP at a time, the results added to ``into``."""
    for start in range(0, count, STEP):
        into += await asyncio.gather(*(one(n) for n in range(start, min(count, start + STEP))))


async def _keep_alive(clients: list[Connection]) -> None:
    """PINGREQ from every client each half keepalive, as a client library sends it: a
    server closes a client silent for one and a half keepalives (opening 10,000 can take
    longer than that)."""
    while True:
        await asyncio.sleep(KEEPALIVE / 2)
        for client in clients:
            client.send(PingReq())


async def _subscribe(connection: Connection, what: str) -> None:
    connection.send(Subscribe(1, ((TOPIC, 1),)))
    answer = await connection.next_packet(what)
    while isinstance(answer, PingResp):
        answer = await connection.next_packet(what)
    if not isinstance(answer, SubAck) or answer.return_codes != (1,):
        raise RuntimeError(f"{what}: SUBSCRIBE answered {answer}")


async def _fanout(publisher: Connection, qos: int, arrivals: _Arrivals) -> Fanout:
    started = time.monotonic()
    waiting = asyncio.ensure_future(arrivals.every(qos))
    publisher.send(Publish(TOPIC, b"x" * 64, qos, False, packet_id=qos or None))
    await waiting
    times = arrivals.times[qos]
    return Fanout(qos, len(times), (max(times) - started) if times else float("nan"))


async def measure(
    host: str, port: int, count: int, rss: Callable[[], int], server: str, level: int = MQTT_311
) -> Scale:
    """Every figure for ``count`` clients at protocol ``level`` on the server at
    ``host``:``port`` (``rss``: its resident set in KB)."""
    raise_file_limit(count + 256)
    before = rss()
    clients: list[Connection] = []
    pinging = asyncio.ensure_future(_keep_alive(clients))
    try:
        started = time.monotonic()
        await _in_steps(
            count, lambda n: Connection.open(host, port, f"scale-{n}", KEEPALIVE, level=level), clients
        )
        connect_seconds = time.monotonic() - started
        started = time.monotonic()
        await _in_steps(count, lambda n: _subscribe(clients[n], f"scale-{n}"), [])
        subscribe_seconds = time.monotonic() - started
        arrivals = _Arrivals(count)
        for client in clients:
            _Subscriber(client, arrivals)
        await asyncio.sleep(SETTLE_SECONDS)
        after = rss()
        publisher = await Connection.open(host, port, "scale-publisher", KEEPALIVE, level=level)
        fanouts = tuple([await _fanout(publisher, qos, arrivals) for qos in (0, 1)])
        await asyncio.gather(*(c.close() for c in [publisher, *clients]))
    finally:
        pinging.cancel()
    return Scale(server, count, connect_seconds, subscribe_seconds, before, after, fanouts)
