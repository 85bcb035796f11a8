"""Connections that come and go: a new client's wait beside a CONNECT flood, and memory after churn.

A *cycle* is one short-lived client: CONNECT (clean session), SUBSCRIBE to a topic of its own at
QoS 1, PUBLISH on it at QoS 1, wait for the PUBACK and its own delivery, DISCONNECT. The flood
runs ``CONCURRENCY`` cycles at a time, flat out (the server's admission settings pace it). A
probe client does the same, one cycle after another, and times each step from the moment it
sent the packet: CONNECT -> CONNACK, SUBSCRIBE -> SUBACK, PUBLISH -> PUBACK. The probe runs
alone first, then beside the flood. Churn: ``cycles`` cycles, the server's resident set taken
after a tenth of them and at the end (a server that keeps something per connection grows
between the two).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from broker.bench.mqtt_load import Connection
from broker.protocol.mqtt import MQTT_311, PubAck, Publish, SubAck, Subscribe

CONCURRENCY = 200  # flood clients at a time
PROBE_SECONDS = 3.0
CYCLE_SECONDS = 30.0  # a cycle that takes longer counts as an error


@dataclass(frozen=True, slots=True)
class Steps:
    """The probe's waits, in seconds, each step sorted."""

    connack: tuple[float, ...]
    suback: tuple[float, ...]
    puback: tuple[float, ...]

    def worst(self, fraction: float = 0.99) -> float:
        """The slowest step's ``fraction`` percentile."""
        return max(percentile(times, fraction) for times in (self.connack, self.suback, self.puback))


@dataclass(frozen=True, slots=True)
class ConnectFlood:
    server: str
    alone: Steps
    flooded: Steps
    flood_rate: float  # flood cycles completed per second
    errors: int  # flood cycles that failed or took over CYCLE_SECONDS


@dataclass(frozen=True, slots=True)
class Churn:
    server: str
    cycles: int
    seconds: float
    mark: int  # cycles done when rss_mark_kb was taken
    rss_start_kb: int
    rss_mark_kb: int
    rss_end_kb: int
    errors: int

    @property
    def rate(self) -> float:
        return self.cycles / self.seconds if self.seconds > 0 else 0.0

    @property
    def growth_mb(self) -> float:
        """From the mark to the end: what each further cycle left behind."""
        return (self.rss_end_kb - self.rss_mark_kb) / 1024


def percentile(ordered: Sequence[float], fraction: float) -> float:
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def cycle(port: int, client_id: str, times: list[float] | None = None, level: int = MQTT_311) -> None:
    """One short-lived client at protocol ``level`` (see the module's docstring); ``times`` gets
    its three waits."""
    started = time.monotonic()
    client = await Connection.open("127.0.0.1", port, client_id, level=level)
    connected = time.monotonic()
    topic = f"churn/{client_id}"
    client.send(Subscribe(1, ((topic, 1),)))
    answer = await client.next_packet(f"{client_id}: SUBACK")
    if not isinstance(answer, SubAck) or answer.return_codes != (1,):
        raise RuntimeError(f"{client_id}: SUBSCRIBE answered {answer}")
    subscribed = time.monotonic()
    client.send(Publish(topic, b"x" * 64, 1, packet_id=2))
    acknowledged = delivered = False
    while not (acknowledged and delivered):
        packet = await client.next_packet(f"{client_id}: PUBACK")
        if isinstance(packet, PubAck) and packet.packet_id == 2:
            acknowledged = True
            if times is not None:
                times += [connected - started, subscribed - connected, time.monotonic() - subscribed]
        elif isinstance(packet, Publish):
            delivered = True
            if packet.packet_id is not None:
                client.send(PubAck(packet.packet_id))
    await client.close()


class Flood:
    """``CONCURRENCY`` cycles at a time until stopped; counts them."""

    def __init__(self, port: int, prefix: str, concurrency: int = CONCURRENCY, level: int = MQTT_311) -> None:
        self.port, self.prefix, self.concurrency, self.level = port, prefix, concurrency, level
        self.done = self.errors = 0
        self._next = 0
        self._stopped = False  # besides cancelling: 3.11's wait_for can swallow a cancellation
        self._tasks: list[asyncio.Task[None]] = []
        self.on_cycle: Callable[[int], None] = lambda done: None

    def start(self, cycles: int | None = None) -> None:
        self._limit = cycles
        self._tasks = [asyncio.ensure_future(self._worker()) for _ in range(self.concurrency)]

    async def _worker(self) -> None:
        while not self._stopped and (self._limit is None or self._next < self._limit):
            self._next += 1
            try:
                await asyncio.wait_for(
                    cycle(self.port, f"{self.prefix}-{self._next}", level=self.level), CYCLE_SECONDS
                )
            except (OSError, RuntimeError, TimeoutError):
                self.errors += 1
            self.done += 1
            self.on_cycle(self.done)

    async def wait(self) -> None:
        await asyncio.gather(*self._tasks)

    async def stop(self) -> None:
        self._stopped = True
        for task in self._tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._tasks, return_exceptions=True)


async def _probe(port: int, prefix: str, seconds: float, level: int) -> Steps:
    times: list[float] = []
    deadline = time.monotonic() + seconds
    number = 0
    while time.monotonic() < deadline:
        number += 1
        await asyncio.wait_for(cycle(port, f"{prefix}-{number}", times, level), CYCLE_SECONDS)
    return Steps(*(tuple(sorted(times[step::3])) for step in range(3)))


async def _connect_flood(port: int, server: str, run_id: str, seconds: float, level: int) -> ConnectFlood:
    alone = await _probe(port, f"probe-{run_id}", seconds, level)
    flood = Flood(port, f"flood-{run_id}", level=level)
    flood.start()
    await asyncio.sleep(0.5)  # the flood is at full strength before the probe starts
    started, done = time.monotonic(), flood.done
    try:
        flooded = await _probe(port, f"probe-flooded-{run_id}", seconds, level)
    finally:
        rate = (flood.done - done) / (time.monotonic() - started)
        await flood.stop()
    return ConnectFlood(server, alone, flooded, rate, flood.errors)


def connect_flood(
    port: int, server: str, run_id: str, seconds: float = PROBE_SECONDS, level: int = MQTT_311
) -> ConnectFlood:
    return asyncio.run(_connect_flood(port, server, run_id, seconds, level))


async def _churn(
    port: int, rss: Callable[[], int], server: str, run_id: str, cycles: int, level: int
) -> Churn:
    mark = max(1, cycles // 10)
    flood = Flood(port, f"churn-{run_id}", concurrency=min(CONCURRENCY, cycles), level=level)
    marks: dict[str, int] = {"start": rss()}

    def at(done: int) -> None:
        if done == mark:
            marks["mark"] = rss()

    flood.on_cycle = at
    started = time.monotonic()
    flood.start(cycles)
    await flood.wait()
    seconds = time.monotonic() - started
    await asyncio.sleep(1.0)  # the last sessions end
    return Churn(
        server, cycles, seconds, mark, marks["start"], marks.get("mark", marks["start"]), rss(), flood.errors
    )


def churn(
    port: int, rss: Callable[[], int], server: str, run_id: str, cycles: int, level: int = MQTT_311
) -> Churn:
    return asyncio.run(_churn(port, rss, server, run_id, cycles, level))
