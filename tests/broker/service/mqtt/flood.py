"""Raw-socket clients for the flood tests: a publisher that writes PUBLISHes as fast as its
socket takes them (QoS 0, or QoS 1/2 with a window of unacknowledged ones), subscribers that
count what they receive, and a probe that times its own QoS 1 round trips.

They read and write bytes themselves (the codec only encodes): a library client would spend
more time per message than the broker does, and the test would measure the client.
"""

from __future__ import annotations

import multiprocessing
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from broker.protocol.mqtt import (
    MQTT_311,
    ConnAck,
    Connect,
    Decoder,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    encode,
)
from tests.broker.service.mqtt.clients import PASSWORD

PUBLISH = 0x30
CHUNK = 64


SEND_BUFFER = 16384  # the kernel's buffering between a publisher and the broker stays small


def connect(port: int, client_id: str) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", port))
    sock.sendall(
        encode(Connect("MQTT", MQTT_311, client_id, True, 0, username="alice", password=PASSWORD.encode()))
    )
    decoder = Decoder()
    packets: list[object] = []
    while not packets:
        packets = list(decoder.feed(sock.recv(4096)))
    assert packets[0] == ConnAck(False, 0), packets
    return sock


def subscribe(sock: socket.socket, topic: str, qos: int = 0) -> None:
    sock.sendall(encode(Subscribe(1, ((topic, qos),))))
    decoder = Decoder()
    packets: list[object] = []
    while not packets:
        packets = list(decoder.feed(sock.recv(4096)))
    assert packets[0] == SubAck(1, (qos,)), packets


class Counter:
    """A subscriber (QoS 0) that counts the PUBLISH packets it reads, as fast as it can read:
    in a process of its own, so that the test's publisher threads never keep it from reading
    (the interpreter lock would, and it would look like a client that does not keep up)."""

    def __init__(self, port: int, client_id: str, topic: str) -> None:
        self._count = multiprocessing.Value("q", 0, lock=False)
        self._ready = multiprocessing.Event()
        self._halt = multiprocessing.Event()
        self._process = multiprocessing.get_context("fork").Process(
            target=_count_publishes,
            args=(port, client_id, topic, self._count, self._ready, self._halt),
            daemon=True,
        )

    def start(self) -> None:
        self._process.start()
        assert self._ready.wait(30), "the subscriber did not subscribe"

    @property
    def count(self) -> int:
        return int(self._count.value)

    def stop(self) -> None:
        self._halt.set()
        self._process.join(5)
        if self._process.is_alive():
            self._process.kill()


def _count_publishes(port: int, client_id: str, topic: str, count: Any, ready: Any, halt: Any) -> None:
    sock = connect(port, client_id)
    subscribe(sock, topic)
    ready.set()
    buffer = b""
    sock.settimeout(0.5)
    while not halt.is_set():
        try:
            data = sock.recv(1 << 20)
        except TimeoutError:
            continue
        if not data:
            return
        buffer += data
        found, buffer = count_publishes(buffer)
        count.value += found


def count_publishes(buffer: bytes) -> tuple[int, bytes]:
    """The PUBLISH packets whole at the head of ``buffer``, and what is left of it."""
    found, at, end = 0, 0, len(buffer)
    while at + 2 <= end:
        length, shift, i = 0, 0, at + 1
        while i < end:
            byte = buffer[i]
            length |= (byte & 0x7F) << shift
            i += 1
            if not byte & 0x80:
                break
            shift += 7
        else:
            break
        if i + length > end:
            break
        found += buffer[at] & 0xF0 == PUBLISH
        at = i + length
    return found, buffer[at:]


@dataclass
class Publisher:
    """Writes PUBLISHes of ``payload`` bytes on ``topic`` flat out for ``seconds``: QoS 0 as
    fast as the socket takes them, QoS 1/2 with up to ``window`` unacknowledged. ``sent``:
    how many the broker accepted (QoS 0: written; QoS 1/2: acknowledged)."""

    port: int
    client_id: str
    topic: str
    qos: int = 0
    payload: int = 64
    window: int = 1000
    sent: int = 0
    acknowledged: int = 0
    error: BaseException | None = None
    _free: threading.Semaphore = field(init=False)

    def run(self, seconds: float) -> None:
        try:
            self._run(seconds)
        except BaseException as exc:  # reported by the test, with what was sent until then
            self.error = exc

    def _run(self, seconds: float) -> None:
        sock = connect(self.port, self.client_id)
        body = bytes(self.payload)
        deadline = time.monotonic() + seconds
        if not self.qos:
            chunk = encode(Publish(self.topic, body)) * CHUNK
            while time.monotonic() < deadline:
                sock.sendall(chunk)
                self.sent += CHUNK
            sock.close()
            return
        self._free = threading.Semaphore(self.window)
        reader = threading.Thread(target=self._acknowledge, args=(sock,), daemon=True)
        reader.start()
        number = 0
        while time.monotonic() < deadline:
            if not self._free.acquire(timeout=1):
                continue
            number = number % 65535 + 1
            sock.sendall(encode(Publish(self.topic, body, self.qos, packet_id=number)))
            self.sent += 1
        finish = time.monotonic() + 30
        while self.acknowledged < self.sent and time.monotonic() < finish:
            time.sleep(0.05)
        sock.close()
        reader.join(5)

    def _acknowledge(self, sock: socket.socket) -> None:
        decoder = Decoder()
        while True:
            try:
                data = sock.recv(65536)
            except OSError:
                return
            if not data:
                return
            for packet in decoder.feed(data):
                if isinstance(packet, PubRec):
                    sock.sendall(encode(PubRel(packet.packet_id)))
                elif isinstance(packet, PubAck | PubComp):
                    self.acknowledged += 1
                    self._free.release()


class Probe:
    """A client publishing QoS 1 to its own subscription every ``every`` seconds and timing
    each round trip: the PUBLISH back from the broker. In a process of its own, as the
    :class:`Counter` is: in the test's process the publisher threads' turns at the interpreter
    lock would be timed as the broker's."""

    def __init__(self, port: int, client_id: str, every: float = 0.05) -> None:
        self._longest = multiprocessing.Value("d", 0.0, lock=False)
        self._trips = multiprocessing.Value("q", 0, lock=False)
        self._ready = multiprocessing.Event()
        self._halt = multiprocessing.Event()
        self._process = multiprocessing.get_context("fork").Process(
            target=_probe,
            args=(port, client_id, every, self._longest, self._trips, self._ready, self._halt),
            daemon=True,
        )

    def start(self) -> None:
        self._process.start()
        assert self._ready.wait(30), "the probe did not subscribe"

    def stop(self) -> float:
        """Stop; the longest round trip."""
        self._halt.set()
        self._process.join(30)
        if self._process.is_alive():
            self._process.kill()
        assert self._trips.value, "the probe made no round trip"
        return float(self._longest.value)


def _probe(port: int, client_id: str, every: float, longest: Any, trips: Any, ready: Any, halt: Any) -> None:
    sock = connect(port, client_id)
    topic = f"probe/{client_id}"
    subscribe(sock, topic, 1)
    ready.set()
    decoder = Decoder()
    number = 0
    while not halt.is_set():
        number = number % 65535 + 1
        sent = time.monotonic()
        sock.sendall(encode(Publish(topic, b"probe", 1, packet_id=number)))
        back = False
        while not back:
            for packet in decoder.feed(sock.recv(65536)):
                if isinstance(packet, Publish):
                    back = True
                    longest.value = max(longest.value, time.monotonic() - sent)
                    trips.value += 1
                    sock.sendall(encode(PubAck(packet.packet_id or 0)))
        time.sleep(every)
    sock.close()
