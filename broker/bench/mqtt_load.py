"""The MQTT benchmark's load generator: publishers and subscribers as asyncio clients on the
broker's own codec (``broker.protocol.mqtt``), run in worker processes.

A general-purpose client library (paho-mqtt) spends tens of microseconds of Python on each
message and would be what the benchmark measures; this one does only what the benchmark needs:
write PUBLISHes with a window of unacknowledged ones, answer the QoS 1 / 2 handshakes, and count.
Every process reports its own CPU time, so the report shows what the generator cost per message.

A publication's payload starts with the publisher's wall clock (ns), its publisher number and its
sequence number: the subscribers count distinct publications (a duplicate or a missing one is
reported, never folded into the total) and, when asked, the latency of each.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from typing import Any

from broker.protocol.mqtt import (
    MQTT_5,
    MQTT_311,
    NEVER_EXPIRES,
    PROTOCOL_NAMES,
    ConnAck,
    Connect,
    Decoder,
    Disconnect,
    Packet,
    PingReq,
    PingResp,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    encode,
)

PROBE_GRACE_SECONDS = 1.0  # a probe stopped mid round trip waits this long for its answer
ROOT = "bench"  # the publications' topics are ``<root>/<publisher>/x``
FILTER = f"{ROOT}/#"
STAMP = struct.Struct("!QII")  # wall clock ns, publisher number, sequence number
CONNECT_SECONDS = 120.0  # a server still draining the previous run may answer late
NO_KEEPALIVE = 0  # a subscriber that only receives sends nothing for the whole of a long run
DRAIN_EVERY = 64  # QoS 0: let the socket push back every this many PUBLISHes


def topic(root: str, publisher: int) -> str:
    return f"{root}/{publisher}/x"


class Connection(asyncio.Protocol):
    """One client connection as an asyncio protocol: each read is decoded and handed to
    ``on_packets`` in the event loop's callback, which answers with at most one write; no task
    waits on the socket. Until a handler is set, packets queue for :meth:`next_packet`."""

    def __init__(self) -> None:
        self.level = MQTT_311  # the protocol level it speaks, set by :meth:`open`
        self.decoder = Decoder()
        self.transport: asyncio.Transport | None = None
        self.inbox: asyncio.Queue[Packet] = asyncio.Queue()
        self.on_packets: Callable[[list[Packet]], None] = self._queue
        self.on_lost: Callable[[], None] = lambda: None
        self.lost = False
        self.present = False  # the CONNACK's session present
        self.writable = asyncio.Event()
        self.writable.set()

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        client_id: str,
        keepalive: int = 60,
        *,
        clean: bool = True,
        level: int = MQTT_311,
    ) -> Connection:
        """A client connection at protocol ``level`` (3.1.1, or MQTT 5.0: its session ends with
        the connection unless not ``clean``, as 3.1.1's CleanSession says)."""
        loop = asyncio.get_running_loop()
        _, connection = await asyncio.wait_for(loop.create_connection(cls, host, port), CONNECT_SECONDS)
        connection.level = connection.decoder.protocol_level = level
        lasting = Properties(session_expiry_interval=0 if clean else NEVER_EXPIRES)
        properties = lasting if level == MQTT_5 else Properties()
        connection.send(
            Connect(PROTOCOL_NAMES[level], level, client_id, clean, keepalive, properties=properties)
        )
        answer = await connection.next_packet(f"{client_id}: CONNACK")
        if not isinstance(answer, ConnAck) or answer.return_code:
            raise RuntimeError(f"{client_id}: CONNECT answered {answer}")
        connection.present = answer.session_present
        return connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.on_packets(self.decoder.feed(data))

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.writable.set()
        self.on_lost()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def _queue(self, packets: list[Packet]) -> None:
        for packet in packets:
            self.inbox.put_nowait(packet)

    def write(self, data: bytes) -> None:
        if self.lost:
            raise RuntimeError("the server closed the connection")
        assert self.transport is not None
        self.transport.write(data)

    def encode(self, packet: Packet) -> bytes:
        return encode(packet, self.level)

    def send(self, packet: Packet) -> None:
        self.write(self.encode(packet))

    async def next_packet(self, what: str) -> Packet:
        """One packet, for the handshakes before the traffic (nothing else is in flight then)."""
        try:
            return await asyncio.wait_for(self.inbox.get(), CONNECT_SECONDS)
        except TimeoutError:
            raise RuntimeError(f"no {what} in {CONNECT_SECONDS:.0f} s") from None

    async def close(self) -> None:
        if not self.lost:
            self.send(Disconnect())
            assert self.transport is not None
            self.transport.close()


# --- publishers -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PublisherSpec:
    host: str
    port: int
    qos: int
    publishers: tuple[int, ...]  # publisher numbers this process runs, one connection each
    count: int  # publications per publisher, at most
    start_at: float  # wall clock: all processes start together
    window: int = 100  # unacknowledged QoS 1 / 2 PUBLISHes per connection
    rate: float = 0.0  # publications/s per publisher; 0: as fast as the server takes them
    seconds: float = 0.0  # stop publishing after this long (0: after ``count``)
    payload_size: int = 256
    protocol: int = MQTT_311  # the protocol level of its connections
    root: str = ROOT  # the first level of its topics


@dataclass(slots=True)
class PublisherResult:
    published: int = 0
    started: float = 0.0
    finished: float = 0.0  # when the server had taken (QoS 0) or acknowledged the last one
    cpu: float = 0.0
    error: str = ""


class _Window:
    """A publisher's unacknowledged PUBLISHes: acknowledgements are counted as they are read,
    the QoS 2 PUBRELs of one read go out in one write, and the sender is woken when there is
    room again."""

    def __init__(self, connection: Connection, size: int) -> None:
        self.connection = connection
        self.size = size
        self.unacknowledged = 0
        self.room = asyncio.Event()
        self.pong = asyncio.Event()
        connection.on_packets = self.received
        connection.on_lost = self.room.set

    def received(self, packets: list[Packet]) -> None:
        releases = []
        for packet in packets:
            if isinstance(packet, PubRec):
                releases.append(self.connection.encode(PubRel(packet.packet_id)))
            elif isinstance(packet, PubAck | PubComp):
                self.unacknowledged -= 1
            elif isinstance(packet, PingResp):
                self.pong.set()
        if releases:
            self.connection.write(b"".join(releases))
        self.room.set()

    async def free(self) -> int:
        """How many more PUBLISHes may go out now; waits until at least one may."""
        await self._until(lambda: self.unacknowledged < self.size)
        return self.size - self.unacknowledged

    async def settled(self) -> None:
        """Every PUBLISH sent acknowledged, and every one before a PINGREQ read by the server."""
        await self._until(lambda: self.unacknowledged == 0)
        self.connection.send(PingReq())
        await self._until(self.pong.is_set)

    async def _until(self, condition: Callable[[], bool]) -> None:
        while not condition():
            if self.connection.lost:
                raise RuntimeError("the server closed the connection")
            self.room.clear()
            await self.room.wait()


async def _publish(spec: PublisherSpec, number: int) -> PublisherResult:
    client_id = f"bench-pub-{number}-{spec.start_at:.6f}"
    connection = await Connection.open(
        spec.host, spec.port, client_id, keepalive=NO_KEEPALIVE, level=spec.protocol
    )
    window = _Window(connection, spec.window)
    name = topic(spec.root, number)
    padding = bytes(spec.payload_size - STAMP.size)
    await asyncio.sleep(max(0.0, spec.start_at - time.time()))
    started = time.time()
    packet_id = 0
    sequence = 0
    stop = started + spec.seconds if spec.seconds else float("inf")
    while sequence < spec.count and time.time() < stop:
        if spec.rate:
            await asyncio.sleep(max(0.0, started + sequence / spec.rate - time.time()))
            batch = 1
        elif spec.qos:
            batch = min(await window.free(), spec.count - sequence)
        else:
            await connection.writable.wait()  # QoS 0: the socket's push-back is the only window
            batch = min(DRAIN_EVERY, spec.count - sequence)
        chunk = []
        for _ in range(batch):
            payload = STAMP.pack(time.time_ns(), number, sequence) + padding
            if spec.qos:
                packet_id = packet_id % 0xFFFF + 1
                chunk.append(connection.encode(Publish(name, payload, spec.qos, packet_id=packet_id)))
            else:
                chunk.append(connection.encode(Publish(name, payload)))
            sequence += 1
        if spec.qos:
            window.unacknowledged += batch
        connection.write(b"".join(chunk))
    await window.settled()
    finished = time.time()
    await connection.close()
    return PublisherResult(sequence, started, finished)


async def _publishers(spec: PublisherSpec) -> PublisherResult:
    results = await asyncio.gather(*(_publish(spec, number) for number in spec.publishers))
    return PublisherResult(
        sum(r.published for r in results),
        min(r.started for r in results),
        max(r.finished for r in results),
    )


# --- subscribers ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SubscriberSpec:
    host: str
    port: int
    qos: int
    subscribers: tuple[int, ...]
    run: str  # in the client identifiers: a run's clients never take over an earlier run's sessions
    idle_seconds: float = 3.0  # after the publishers are done, give up after this long without any
    latency: bool = False
    protocol: int = MQTT_311  # the protocol level of its connections
    root: str = ROOT  # the first level of the topics it subscribes to
    share: str = ""  # a shared subscription's group name (empty: each subscriber its own)

    @property
    def filter(self) -> str:
        wildcard = f"{self.root}/#"
        return f"$share/{self.share}/{wildcard}" if self.share else wildcard


@dataclass(slots=True)
class SubscriberResult:
    received: int = 0  # every PUBLISH, duplicates included
    distinct: int = 0
    last: float = 0.0  # wall clock of the last delivery
    cpu: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    error: str = ""
    in_window: int = 0  # PUBLISHes received before the window's end (a flood's measuring window)
    keys: set[bytes] = field(default_factory=set)  # a shared subscription's: the publications it got


class _Subscriber:
    """Counts deliveries and answers the server's QoS 1 / 2 handshakes, one write per read."""

    def __init__(
        self, connection: Connection, spec: SubscriberSpec, window: Synchronized[float] | None
    ) -> None:
        self.connection = connection
        self.spec = spec
        self.window = window  # wall clock of the measuring window's end, once set (else 0)
        self.seen: set[bytes] = set()
        self.result = SubscriberResult()
        connection.on_packets = self.received

    def received(self, packets: list[Packet]) -> None:
        result, seen = self.result, self.seen
        now = time.time_ns()
        window_end = self.window.value if self.window is not None else 0.0
        counted = 0 < now / 1e9 <= window_end
        answers = []
        for packet in packets:
            if isinstance(packet, Publish):
                result.last = now / 1e9
                result.received += 1
                result.in_window += counted
                seen.add(packet.payload[8:16])
                if self.spec.latency:
                    result.latencies_ms.append((now - STAMP.unpack_from(packet.payload)[0]) / 1e6)
                if packet.qos == 1:
                    answers.append(self.connection.encode(PubAck(packet.packet_id or 0)))  # it has one
                elif packet.qos == 2:
                    answers.append(self.connection.encode(PubRec(packet.packet_id or 0)))
            elif isinstance(packet, PubRel):
                answers.append(self.connection.encode(PubComp(packet.packet_id)))
        if answers:
            self.connection.write(b"".join(answers))

    async def wait(
        self, done: Event, published: Synchronized[int], arrived: Synchronized[int] | None
    ) -> SubscriberResult:
        """Until the publishers are done (``published`` then holds how many they sent) and every
        publication came, or nothing more has come for ``idle_seconds``. A shared subscription's
        members each get some: they add what they got to ``arrived``, and wait for the group's sum."""
        last_count, quiet_since, reported = -1, time.monotonic(), 0
        while not self.connection.lost:
            await asyncio.sleep(0.1)
            if self.result.received != last_count:
                last_count, quiet_since = self.result.received, time.monotonic()
            got = len(self.seen)
            if arrived is not None:
                with arrived.get_lock():
                    arrived.value += got - reported
                    reported, got = got, arrived.value
            if done.is_set() and (
                got >= published.value or time.monotonic() - quiet_since > self.spec.idle_seconds
            ):
                break
        if self.connection.lost:
            self.result.error = "the server closed the connection"
        self.result.distinct = len(self.seen)
        if self.spec.share:
            self.result.keys = self.seen
        return self.result


async def _subscribe(
    spec: SubscriberSpec,
    number: int,
    ready: Callable[[], None],
    done: Event,
    published: Synchronized[int],
    window: Synchronized[float] | None,
    arrived: Synchronized[int] | None,
) -> SubscriberResult:
    client_id = f"bench-sub-{number}-{spec.run}"
    connection = await Connection.open(
        spec.host, spec.port, client_id, keepalive=NO_KEEPALIVE, level=spec.protocol
    )
    connection.send(Subscribe(1, ((spec.filter, spec.qos),)))
    answer = await connection.next_packet(f"{client_id}: SUBACK")
    if not isinstance(answer, SubAck) or answer.return_codes != (spec.qos,):
        raise RuntimeError(f"SUBSCRIBE {spec.filter} at QoS {spec.qos} answered {answer}")
    subscriber = _Subscriber(connection, spec, window)
    ready()
    result = await subscriber.wait(done, published, arrived)
    await connection.close()
    return result


async def _subscribers(
    spec: SubscriberSpec,
    ready_queue: Queue[Any],
    done: Event,
    published: Synchronized[int],
    window: Synchronized[float] | None,
    arrived: Synchronized[int] | None,
) -> list[SubscriberResult]:
    return await asyncio.gather(
        *(
            _subscribe(spec, number, lambda: ready_queue.put("ready"), done, published, window, arrived)
            for number in spec.subscribers
        )
    )


# --- process entry points ---------------------------------------------------------------------


def publisher_process(spec: PublisherSpec, results: Queue[Any]) -> None:
    cpu = time.process_time()
    try:
        result = asyncio.run(_publishers(spec))
    except Exception as error:  # reported to the parent, which fails the run
        result = PublisherResult(error=f"{type(error).__name__}: {error}")
    result.cpu = time.process_time() - cpu
    results.put(("publisher", result))


def subscriber_process(
    spec: SubscriberSpec,
    ready: Queue[Any],
    done: Event,
    published: Synchronized[int],
    results: Queue[Any],
    window: Synchronized[float] | None = None,
    arrived: Synchronized[int] | None = None,
) -> None:
    """Subscribers until the publishers are ``done``; ``published`` then says how many
    publications each subscriber (or, with ``arrived``, a shared subscription's group) should
    have received. ``window``: the end of a measuring window (wall clock), counted in each
    result's ``in_window``."""
    cpu = time.process_time()
    try:
        found = asyncio.run(_subscribers(spec, ready, done, published, window, arrived))
    except Exception as error:
        ready.put("failed")
        results.put(("subscriber", [SubscriberResult(error=f"{type(error).__name__}: {error}")]))
        return
    share = (time.process_time() - cpu) / len(found)
    for result in found:
        result.cpu = share
    results.put(("subscriber", found))


# --- a probe ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProbeSpec:
    host: str
    port: int
    client_id: str
    interval: float = 0.02  # seconds between a round trip's end and the next one's start
    protocol: int = MQTT_311  # the protocol level of its connection


@dataclass(slots=True)
class ProbeResult:
    round_trips_ms: list[float] = field(default_factory=list)
    unanswered: int = 0  # round trips not answered within PROBE_GRACE_SECONDS of the probe's stop
    error: str = ""


async def _probe(spec: ProbeSpec, ready: Callable[[], None], stop: Event) -> ProbeResult:
    """QoS 1 to its own subscription: each round trip is the PUBLISH to the server and the
    delivery back (the client that a flood must not keep waiting)."""
    connection = await Connection.open(
        spec.host, spec.port, spec.client_id, keepalive=NO_KEEPALIVE, level=spec.protocol
    )
    own = f"probe/{spec.client_id}"
    connection.send(Subscribe(1, ((own, 1),)))
    if not isinstance(await connection.next_packet("probe SUBACK"), SubAck):
        raise RuntimeError("the probe's SUBSCRIBE was refused")
    back = asyncio.Event()
    result = ProbeResult()

    def received(packets: list[Packet]) -> None:
        for packet in packets:
            if isinstance(packet, Publish):
                connection.send(PubAck(packet.packet_id or 0))
                back.set()

    connection.on_packets = received
    ready()
    packet_id = 0
    while not stop.is_set():
        packet_id = packet_id % 0xFFFF + 1
        back.clear()
        sent = time.perf_counter()
        connection.send(Publish(own, b"probe", 1, packet_id=packet_id))
        stopped: float | None = None
        while not back.is_set():
            if stop.is_set():  # the round trip under way still has PROBE_GRACE_SECONDS
                stopped = stopped or time.perf_counter()
                if time.perf_counter() - stopped > PROBE_GRACE_SECONDS:
                    break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(back.wait(), 0.1)
        if back.is_set():
            result.round_trips_ms.append((time.perf_counter() - sent) * 1000)
        else:
            result.unanswered += 1
        await asyncio.sleep(spec.interval)
    await connection.close()
    return result


def probe_process(spec: ProbeSpec, ready: Queue[Any], stop: Event, results: Queue[Any]) -> None:
    try:
        result = asyncio.run(_probe(spec, lambda: ready.put("ready"), stop))
    except Exception as error:
        ready.put("failed")
        result = ProbeResult(error=f"{type(error).__name__}: {error}")
    results.put(("probe", result))


async def first_answer(host: str, port: int, client_id: str, level: int = MQTT_311) -> float:
    """Seconds a new client waits to be connected, subscribed and have one QoS 1 publication
    to itself acknowledged and delivered."""
    started = time.perf_counter()
    connection = await Connection.open(host, port, client_id, keepalive=NO_KEEPALIVE, level=level)
    connection.send(Subscribe(1, ((f"probe/{client_id}", 1),)))
    await connection.next_packet("SUBACK")
    connection.send(Publish(f"probe/{client_id}", b"hello", 1, packet_id=1))
    answers = {type(await connection.next_packet("PUBACK and PUBLISH")) for _ in range(2)}
    if answers != {PubAck, Publish}:
        raise RuntimeError(f"a new client's QoS 1 publication answered {answers}")
    seconds = time.perf_counter() - started
    await connection.close()
    return seconds


# --- idle connections -------------------------------------------------------------------------


async def open_idle(
    host: str, port: int, count: int, keepalive: int = 60, level: int = MQTT_311
) -> list[Connection]:
    """``count`` connections that CONNECT with ``keepalive`` at ``level`` and then say nothing."""
    connections = []
    for start in range(0, count, 100):  # in steps: the server's accept backlog is finite
        connections += await asyncio.gather(
            *(
                Connection.open(host, port, f"bench-idle-{n}", keepalive, level=level)
                for n in range(start, min(count, start + 100))
            )
        )
    return connections
