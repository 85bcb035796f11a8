"""MQTT clients for the listener's tests: paho-mqtt (a real client library), the Mosquitto
command-line clients, a raw socket speaking through the codec (for what no library sends), and
a publisher that keeps the QoS 1/2 flows exactly as MQTT says across reconnections.

paho-mqtt 2.2 does not, in one case: a QoS 2 message whose PUBREL it is to send again after a
reconnection, when that reconnection fails too (CONNACK 3 during a database outage, say), is
sent the next time as a PUBLISH with DUP=0 (``_messages_reconnect_reset_out`` turns its
``resend_pubrel`` state into ``publish``): a new message for any server, so the subscribers
receive it twice. Tests that count QoS 2 duplicates publish with :class:`StrictPublisher`."""

from __future__ import annotations

import queue
import socket
import subprocess
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import paho.mqtt.client as paho
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties

from broker.protocol.mqtt import (
    MQTT_311,
    ConnAck,
    Connect,
    Decoder,
    MqttProtocolError,
    Packet,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    Will,
    encode,
)
from queues import QueueManager
from tests.e2e.processes import Brokers, ServeProcess, free_port

TIMEOUT = 10.0
PASSWORD = "s3cret"
MOSQUITTO = "/usr/sbin/mosquitto"


@dataclass
class Received:
    topic: str
    payload: bytes
    qos: int
    retain: bool


class Paho:
    """A paho-mqtt client that records what it receives."""

    def __init__(
        self,
        port: int,
        client_id: str,
        *,
        protocol: paho.MQTTProtocolVersion = paho.MQTTv311,
        clean: bool = True,
        user: str | None = "alice",
        password: str = PASSWORD,
        will: tuple[str, bytes, int, bool] | None = None,
        keepalive: int = 60,
        transport: Literal["tcp", "websockets"] = "tcp",
        session_expiry: int | None = None,
    ) -> None:
        """MQTT 5.0 (``protocol`` paho.MQTTv5): ``clean`` is Clean Start, ``session_expiry``
        the Session Expiry Interval sent (None: none, so 0)."""
        v5 = protocol == paho.MQTTv5
        self.client = paho.Client(
            paho.CallbackAPIVersion.VERSION2,
            client_id=client_id,
            protocol=protocol,
            clean_session=None if v5 else clean,
            transport=transport,
        )
        self.clean = clean
        self.properties: PahoProperties | None = None
        if v5 and session_expiry is not None:
            self.properties = PahoProperties(PacketTypes.CONNECT)
            self.properties.SessionExpiryInterval = session_expiry
        if user is not None:
            self.client.username_pw_set(user, password)
        if will is not None:
            self.client.will_set(*will)
        self.messages: queue.Queue[Received] = queue.Queue()
        self.connacks: queue.Queue[tuple[int, bool]] = queue.Queue()
        self.subacks: queue.Queue[list[int]] = queue.Queue()
        self.client.on_message = self._on_message
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = self._on_subscribe
        self.port = port
        self.keepalive = keepalive

    def _on_message(self, _c: Any, _u: Any, msg: Any) -> None:
        self.messages.put(Received(msg.topic, msg.payload, msg.qos, bool(msg.retain)))

    def _on_connect(self, _c: Any, _u: Any, flags: Any, reason: Any, _p: Any) -> None:
        self.connacks.put((reason.value, bool(flags.session_present)))

    def _on_subscribe(self, _c: Any, _u: Any, _mid: int, codes: Any, _p: Any) -> None:
        self.subacks.put([c.value for c in codes])

    def connect(self) -> tuple[int, bool]:
        """(CONNACK return code, session present)."""
        if self.client.protocol == paho.MQTTv5:
            self.client.connect(
                "127.0.0.1",
                self.port,
                keepalive=self.keepalive,
                clean_start=self.clean,
                properties=self.properties,
            )
        else:
            self.client.connect("127.0.0.1", self.port, keepalive=self.keepalive)
        self.client.loop_start()
        return self.connacks.get(timeout=TIMEOUT)

    def subscribe(self, *filters: tuple[str, int]) -> list[int]:
        self.client.subscribe(list(filters))
        return self.subacks.get(timeout=TIMEOUT)

    def publish(self, topic: str, payload: bytes, qos: int = 0, retain: bool = False) -> None:
        info = self.client.publish(topic, payload, qos, retain)
        info.wait_for_publish(TIMEOUT)

    def receive(self, count: int, timeout: float = TIMEOUT) -> list[Received]:
        deadline = time.monotonic() + timeout
        return [self.messages.get(timeout=max(0.01, deadline - time.monotonic())) for _ in range(count)]

    def nothing_more(self, wait: float = 0.7) -> bool:
        time.sleep(wait)
        return self.messages.empty()

    def close(self) -> None:
        """DISCONNECT, and wait until it is sent (else the broker sees a lost connection)."""
        gone = threading.Event()
        self.client.on_disconnect = lambda *_: gone.set()
        self.client.disconnect()
        gone.wait(TIMEOUT)
        self.client.loop_stop()


class Raw:
    """A client that sends exactly the bytes or packets a test wants."""

    def __init__(
        self, port: int, *, receive_buffer: int | None = None, level: int = MQTT_311, source: str = ""
    ) -> None:
        """``receive_buffer``: a small SO_RCVBUF, for a client whose socket fills soon;
        ``level``: the protocol level it speaks; ``source``: the loopback address it connects from."""
        self.sock = socket.socket()
        if receive_buffer is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        self.sock.settimeout(TIMEOUT)
        if source:
            self.sock.bind((source, 0))
        self.sock.connect(("127.0.0.1", port))
        self.level = level
        self.decoder = Decoder(protocol_level=level)
        self.pending: list[Packet] = []

    def send(self, *packets: Packet) -> None:
        self.sock.sendall(b"".join(encode(p, self.level) for p in packets))

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def connect(
        self,
        client_id: str,
        *,
        clean: bool = True,
        user: str | None = "alice",
        password: bytes = PASSWORD.encode(),
        keepalive: int = 60,
        will: Will | None = None,
        properties: Properties | None = None,
    ) -> Packet:
        """CONNECT at the client's level (``properties``: MQTT 5.0's); the answer."""
        self.send(
            Connect(
                "MQTT",
                self.level,
                client_id,
                clean,
                keepalive,
                will,
                username=user,
                password=None if user is None else password,
                properties=properties or Properties(),
            )
        )
        return self.next()

    def next(self, timeout: float = TIMEOUT) -> Packet:
        deadline = time.monotonic() + timeout
        while not self.pending:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed by the broker")
            self.pending.extend(self.decoder.feed(data))
        return self.pending.pop(0)

    def closed_by_broker(self, timeout: float = TIMEOUT) -> bool:
        """Whether the broker closes the connection (reading whatever it sends first)."""
        self.sock.settimeout(timeout)
        try:
            while self.sock.recv(65536):
                pass
        except (ConnectionResetError, TimeoutError):
            return False
        return True

    def close(self) -> None:
        self.sock.close()


class StrictPublisher:
    """A persistent-session publisher that reconnects by itself and finishes every flow: after
    each reconnection it sends again, in order, PUBLISH (DUP=1) for what is not acknowledged and
    PUBREL for what is PUBREC'd. ``acknowledged`` is told of each publication once PUBACK or
    PUBCOMP came."""

    def __init__(
        self,
        port: int,
        client_id: str,
        *,
        user: str | None = "alice",
        acknowledged: Callable[[Publish], None] | None = None,
    ) -> None:
        self.port, self.client_id, self.user = port, client_id, user
        self.on_acknowledged = acknowledged
        self.pending: OrderedDict[int, tuple[Publish, bool]] = OrderedDict()  # id -> (packet, PUBREC'd)
        self.lock = threading.Lock()
        self.raw: Raw | None = None
        self.next_id = 1
        self.stopping = False
        self.connected: list[float] = []  # time.monotonic() of each accepted CONNECT
        self.thread = threading.Thread(target=self._run, name=client_id, daemon=True)
        self.thread.start()

    def publish(self, topic: str, payload: bytes, qos: int) -> None:
        with self.lock:
            packet_id = self.next_id
            self.next_id = packet_id % 65535 + 1
            packet = Publish(topic, payload, qos, packet_id=packet_id)
            self.pending[packet_id] = (packet, False)
            self._send(packet)

    def _send(self, *packets: Packet) -> None:
        if self.raw is not None:
            try:
                self.raw.send(*packets)
            except OSError:
                self.raw = None

    def _run(self) -> None:
        while not self.stopping:
            try:
                raw = Raw(self.port)
                answer = raw.connect(self.client_id, clean=False, user=self.user)
                if not isinstance(answer, ConnAck) or answer.return_code:
                    raise ConnectionError(f"refused: {answer}")
                if not answer.session_present and self.connected:  # it had one
                    raise AssertionError("the session was lost")
                with self.lock:
                    self.raw = raw
                    self.connected.append(time.monotonic())
                    for packet, released in self.pending.values():
                        assert packet.packet_id is not None
                        self._send(PubRel(packet.packet_id) if released else replace(packet, dup=True))
                while not self.stopping:
                    self._acknowledged(raw.next(timeout=60))
            except (OSError, ConnectionError):
                with self.lock:
                    self.raw = None
                time.sleep(0.2)

    def _acknowledged(self, packet: Packet) -> None:
        with self.lock:
            if isinstance(packet, PubAck | PubComp):
                done = self.pending.pop(packet.packet_id, None)
                if done is not None and self.on_acknowledged is not None:
                    self.on_acknowledged(done[0])
            elif isinstance(packet, PubRec) and packet.packet_id in self.pending:
                self.pending[packet.packet_id] = (self.pending[packet.packet_id][0], True)
                self._send(PubRel(packet.packet_id))

    def done(self) -> bool:
        with self.lock:
            return not self.pending

    def stop(self) -> None:
        self.stopping = True
        with self.lock:
            if self.raw is not None:
                self.raw.close()


def _mosquitto(program: str, port: int, version: str, topic: str) -> list[str]:
    """The command line of a Mosquitto client as alice, on ``topic``."""
    return [
        program,
        "-h",
        "127.0.0.1",
        "-p",
        str(port),
        "-V",
        version,
        "-u",
        "alice",
        "-P",
        PASSWORD,
        "-t",
        topic,
    ]


def mosquitto_pub(port: int, version: str, topic: str, message: str, qos: int, *extra: str) -> None:
    argv = _mosquitto("mosquitto_pub", port, version, topic)
    subprocess.run([*argv, "-m", message, "-q", str(qos), *extra], check=True, timeout=TIMEOUT)


def mosquitto_sub(port: int, version: str, topic: str, count: int, *extra: str) -> subprocess.Popen[str]:
    """A mosquitto_sub that exits after ``count`` messages, printing ``retain topic payload``."""
    argv = _mosquitto("mosquitto_sub", port, version, topic)
    options = ["-C", str(count), "-F", "%r %t %p", "-W", str(int(TIMEOUT))]
    return subprocess.Popen([*argv, *options, *extra], stdout=subprocess.PIPE, text=True)


class MqttBroker:
    """A ``broker serve --mqtt`` process on a free port, with principals alice and bob."""

    def __init__(self, brokers: Brokers, api_port: int | None = None, **environment: str) -> None:
        self.port = free_port()
        self.brokers = brokers
        self.process: ServeProcess = brokers.start(
            mqtt_port=self.port, api_port=api_port, environment=environment
        )
        from broker.store import mqtt
        from queues.ids import now_ms

        with self.qm.unit_of_work() as uow:
            for user in ("alice", "bob"):
                mqtt.set_password(uow.connection, user, PASSWORD.encode(), now_ms())

    @property
    def qm(self) -> QueueManager:
        return self.brokers.qm

    def restart(self, *, kill: bool = True) -> None:
        if kill:
            self.process.kill()
        else:
            self.process.terminate()
        self.process.start()


def subscribed(broker: MqttBroker, client_id: str, text: str) -> bool:
    """Whether the session of ``client_id`` holds the subscription ``text`` (its SUBACK is on
    its way): a command-line client's publication after that is delivered to it."""
    from broker.store import mqtt

    with broker.qm.reading() as conn:
        return text in mqtt.granted(conn, client_id)


def eventually(check: Callable[[], bool], timeout: float = TIMEOUT) -> bool:
    """Whether ``check`` holds within ``timeout`` (for what the broker does after a close)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def protocol_error(raw: Raw) -> bool:
    """Whether the connection ends without the broker sending anything more."""
    try:
        raw.next(timeout=TIMEOUT)
    except (ConnectionError, MqttProtocolError):
        return True
    return False


def stays_down(client: Paho) -> threading.Event:
    """An event set when the broker closes ``client``'s connection; paho would reconnect on
    its own, so its loop is stopped there (as an application that gives up would)."""
    gone = threading.Event()

    def lost(*_: object) -> None:
        gone.set()
        client.client.loop_stop()

    client.client.on_disconnect = lost
    return gone


class Mosquitto:
    """A Mosquitto of its own, persistent (its sessions and queued messages survive a restart)."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.config = workdir / "mosquitto.conf"
        self.config.write_text(
            f"listener {self.port} 127.0.0.1\nallow_anonymous true\npersistence true\n"
            f"persistence_location {workdir}/\nuser root\nlog_dest stderr\n"  # user: no privileges dropped
        )
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen([MOSQUITTO, "-c", str(self.config)])
        deadline = time.monotonic() + 10
        while True:
            try:
                probe = Paho(self.port, "probe", user=None)
                probe.connect()
                probe.close()
                return
            except OSError:
                assert time.monotonic() < deadline, "mosquitto did not start"
                time.sleep(0.1)

    def stop(self) -> None:
        assert self.process is not None
        self.process.terminate()
        self.process.wait(10)
