"""Bridges to other MQTT brokers (a Mosquitto of an existing estate), configured as
Mosquitto configures its own: a file named by ``mqtt_bridges`` with sections of

    connection NAME
    address HOST:PORT
    topic PATTERN [in|out|both [QOS [LOCAL_PREFIX REMOTE_PREFIX]]]
    remote_username USER / remote_password PASSWORD / remote_clientid ID
    local_username PRINCIPAL

A bridge is one more shell on the gateway. Locally it is a persistent session
(``bridge:NAME``, listed by ``broker mqtt sessions``) whose subscriptions (the ``out`` and
``both`` topics, as ``local_username``, so under the ACL) deliver to its queue; remotely it
is a paho-mqtt client with a persistent session (CleanSession=0), subscribed to the ``in``
and ``both`` topics. What it receives remotely it publishes locally through the engine,
marked with its name as origin (``translation.publication``), and acknowledges to the remote
broker only once that routing has committed; what it takes from its queue it publishes
remotely, stored as the listener's outbound messages are, and forgets only when the remote
broker has acknowledged it (PUBACK, PUBCOMP). So QoS 1 and 2 cross at least once whichever
side restarts or is cut (a duplicate is possible, never a loss); QoS 0 at most once.
A publication marked with the bridge's own name is never sent back over it (no loop).

A bridge is supervised (``broker.service.supervision``): when its local side fails (the
database unavailable, say) it ends, and a new one starts after a back-off. Its remote session
then resends what the bridge had not acknowledged, and its local session what the remote
broker had not: a failure costs a duplicate at most.

In a cluster every node reads the same bridges, and one runs each: the member holding its
lease (``broker.store.nodes.take_lease``), which it holds while it is alive. When that
member is declared dead, another takes the lease, and the bridge's sessions resume there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from broker.core.topics import matches
from broker.protocol.mqtt.packets import MQTT_311, Connect, Publish
from broker.service.config import ConfigError
from broker.service.mqtt.host import Host
from broker.store import mqtt as sessions
from broker.store import nodes

log = logging.getLogger("broker.mqtt")

DIRECTIONS = ("in", "out", "both")
MAX_PRINCIPAL = 12
WINDOW = 100  # messages sent to the remote broker unacknowledged
POLL_SECONDS = 0.1
RECONNECT_MIN, RECONNECT_MAX = 1, 30  # seconds: the back-off of reconnections
# In the protocol level, as Mosquitto's own bridges send it ("try_private"): the remote
# Mosquitto then never sends the bridge back what the bridge itself published.
BRIDGE_BIT = 0x80


@dataclass(frozen=True, slots=True)
class BridgeTopic:
    """``topic PATTERN DIRECTION QOS LOCAL_PREFIX REMOTE_PREFIX``: the local topics
    ``LOCAL_PREFIX + PATTERN`` are the remote ``REMOTE_PREFIX + PATTERN``."""

    pattern: str
    direction: str = "both"
    qos: int = 0
    local_prefix: str = ""
    remote_prefix: str = ""

    @property
    def local(self) -> str:
        return self.local_prefix + self.pattern

    @property
    def remote(self) -> str:
        return self.remote_prefix + self.pattern

    def inbound(self) -> bool:
        return self.direction in ("in", "both")

    def outbound(self) -> bool:
        return self.direction in ("out", "both")


@dataclass(frozen=True, slots=True)
class BridgeConfig:
    name: str
    host: str = ""
    port: int = 1883
    topics: tuple[BridgeTopic, ...] = ()
    remote_username: str | None = None
    remote_password: str | None = None
    remote_clientid: str = ""
    local_username: str = ""

    @property
    def client_id(self) -> str:
        """The remote client id (Mosquitto's default is ``HOSTNAME.NAME``; this one is stable)."""
        return self.remote_clientid or f"broker.{self.name}"

    @property
    def principal(self) -> str:
        return self.local_username or self.name[:MAX_PRINCIPAL]

    @property
    def session(self) -> str:
        return f"bridge:{self.name}"


def parse(text: str) -> list[BridgeConfig]:
    """The bridges of a file in Mosquitto's bridge syntax (other Mosquitto options refused)."""
    found: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):  # a comment only there, as for Mosquitto
            continue
        try:
            key, *args = shlex.split(line)
            if key == "connection":
                (name,) = args
                found.append({"name": _name(name), "topics": []})
            elif not found:
                raise ConfigError("a bridge starts with 'connection NAME'")
            elif key == "address":
                (address,) = args
                host, _, port = address.partition(":")
                found[-1].update(host=host, port=int(port or 1883))
            elif key == "topic":
                found[-1]["topics"].append(_topic(args))
            elif key in ("remote_username", "remote_password", "remote_clientid", "local_username"):
                (found[-1][key],) = args
            else:
                raise ConfigError(f"unknown bridge option {key!r}")
        except (ValueError, ConfigError) as exc:
            raise ConfigError(f"bridge configuration line {number}: {line.strip()!r}: {exc}") from None
    bridges = [BridgeConfig(**{**b, "topics": tuple(b["topics"])}) for b in found]
    for bridge in bridges:
        if not bridge.host or not bridge.topics:
            raise ConfigError(f"bridge {bridge.name!r} needs an address and at least one topic")
    return bridges


def _name(text: str) -> str:
    if not text or not all(c.isalnum() or c in "._-" for c in text):
        raise ConfigError("a connection name is letters, digits, '.', '_' and '-'")
    return text


def _topic(args: list[str]) -> BridgeTopic:
    if not 1 <= len(args) <= 5 or len(args) == 4:
        raise ConfigError("use: topic PATTERN [in|out|both [QOS [LOCAL_PREFIX REMOTE_PREFIX]]]")
    direction = args[1] if len(args) > 1 else "both"
    if direction not in DIRECTIONS:
        raise ConfigError(f"direction {direction!r}: use in, out or both")
    qos = int(args[2]) if len(args) > 2 else 0
    if qos not in (0, 1, 2):
        raise ConfigError("QoS 0, 1 or 2")
    local, remote = (args[3], args[4]) if len(args) == 5 else ("", "")
    return BridgeTopic(args[0], direction, qos, local, remote)


def load(path: str) -> list[BridgeConfig]:
    return parse(Path(path).read_text(encoding="utf-8")) if path else []


def to_local(topics: Iterable[BridgeTopic], topic: str) -> tuple[str, int] | None:
    """The local topic and QoS of a publication received from the remote broker on ``topic``."""
    for spec in topics:
        if spec.inbound() and matches(spec.remote, topic):
            return spec.local_prefix + topic[len(spec.remote_prefix) :], spec.qos
    return None


def to_remote(topics: Iterable[BridgeTopic], topic: str) -> tuple[str, int] | None:
    """The remote topic and QoS of a local publication on ``topic``."""
    for spec in topics:
        if spec.outbound() and matches(spec.local, topic):
            return spec.remote_prefix + topic[len(spec.local_prefix) :], spec.qos
    return None


async def leased(listener: Host, config: BridgeConfig, run: Callable[[], Awaitable[None]]) -> None:
    """Run the bridge (each ``run()`` a new one) whenever this member holds its lease: it
    waits while another live member holds it, and stops when the lease is lost."""
    while True:
        owner = await _lease(listener, config.name)
        log.info(
            "mqtt bridge runs on this node", extra={"bridge": config.name, "node": listener.gateway.node}
        )
        try:
            await _while_held(listener, config.name, owner, run)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(_release_lease, listener, config.name, owner)


async def _lease(listener: Host, name: str) -> str:
    """Take the lease of bridge ``name`` (waiting while a live member holds it); the owner
    that took it."""
    while True:
        owner = listener.gateway.owner
        if await asyncio.to_thread(_take_lease, listener, name, owner):
            return owner
        await asyncio.sleep(listener.membership.period)


async def _while_held(listener: Host, name: str, owner: str, run: Callable[[], Awaitable[None]]) -> None:
    """Run a bridge until it fails (raised) or ``owner`` no longer holds its lease."""
    task = asyncio.ensure_future(run())
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=listener.membership.period)
            if done:
                task.result()
                return
            if listener.gateway.owner != owner or not await asyncio.to_thread(
                _holds_lease, listener, name, owner
            ):
                log.warning("mqtt bridge lease lost; the bridge stops on this node", extra={"bridge": name})
                return
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def _take_lease(listener: Host, name: str, owner: str) -> bool:
    with listener.qm.unit_of_work() as uow:
        return nodes.take_lease(uow.connection, nodes.BRIDGE + name, owner)


def _holds_lease(listener: Host, name: str, owner: str) -> bool:
    with listener.qm.reading() as conn:
        return nodes.lease_holder(conn, nodes.BRIDGE + name) == owner


def _release_lease(listener: Host, name: str, owner: str) -> None:
    with listener.qm.unit_of_work() as uow:
        nodes.free_lease(uow.connection, nodes.BRIDGE + name, owner)


@dataclass
class Bridge:
    """One running bridge, on the listener's event loop; ``task`` is its name in the process's
    health report."""

    listener: Host
    config: BridgeConfig
    task: str
    sent: dict[int, int] = field(default_factory=dict)  # paho message id -> local packet id
    used: set[int] = field(default_factory=set)  # local packet ids in flight
    granted: dict[str, int] = field(default_factory=dict)
    remote: Any = None
    failure: BaseException | None = None  # of local work nobody awaited: the bridge ends

    async def run(self) -> None:
        """Bridge until cancelled, or until the local side fails (raised)."""
        loop = asyncio.get_running_loop()
        self.remote = self._client(loop)
        try:
            await self._open()
            self.listener.health.succeeded(self.task)
            self.remote.connect_async(self.config.host, self.config.port, keepalive=30)
            self.remote.loop_start()  # reconnects with back-off by itself
            while self.failure is None:
                await self._pump()
                await asyncio.sleep(POLL_SECONDS)
            raise self.failure
        finally:
            self.remote.disconnect()
            self.remote.loop_stop()

    def _fail(self, exc: BaseException) -> None:
        self.failure = exc

    def _client(self, loop: asyncio.AbstractEventLoop) -> Any:
        import paho.mqtt.client as paho

        config = self.config
        client = paho.Client(
            paho.CallbackAPIVersion.VERSION2,
            client_id=config.client_id,
            clean_session=False,
            # Mosquitto's bridge flag on the protocol level: paho sends the number as it is.
            protocol=cast(paho.MQTTProtocolVersion, paho.MQTTv311 | BRIDGE_BIT),
        )
        if config.remote_username is not None:
            client.username_pw_set(config.remote_username, config.remote_password)
        client.reconnect_delay_set(RECONNECT_MIN, RECONNECT_MAX)
        client.max_queued_messages_set(0)
        client.manual_ack_set(True)

        def connected(c: Any, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
            if reason.is_failure:
                log.warning("mqtt bridge refused", extra={"bridge": config.name, "reason": str(reason)})
                return
            log.info("mqtt bridge connected", extra={"bridge": config.name, "address": self._address})
            inbound = [(spec.remote, spec.qos) for spec in config.topics if spec.inbound()]
            if inbound:
                c.subscribe(inbound)

        client.on_connect = connected
        client.on_disconnect = lambda *_: log.warning(
            "mqtt bridge disconnected; reconnecting", extra={"bridge": config.name}
        )

        def message(_c: paho.Client, _u: Any, msg: paho.MQTTMessage) -> None:
            loop.call_soon_threadsafe(self._received, msg)

        def published(_c: paho.Client, _u: Any, mid: int, _r: Any, _p: Any) -> None:
            loop.call_soon_threadsafe(self._acknowledged, mid)

        client.on_message = message
        client.on_publish = published
        return client

    @property
    def _address(self) -> str:
        return f"{self.config.host}:{self.config.port}"

    async def _open(self) -> None:
        """The local session: its queue, its subscriptions, and the messages sent before a
        restart and not acknowledged, sent again."""
        listener, config = self.listener, self.config
        gateway, queue = listener.gateway, sessions.queue_for(config.session)
        connect = Connect("MQTT", MQTT_311, config.session, False, 0)
        opened = await gateway.submit(gateway.open(connect, config.session, config.principal, self._address))
        outbound = tuple((spec.local, spec.qos) for spec in config.topics if spec.outbound())
        if outbound:
            subscribed = await gateway.submit(
                gateway.subscribe(config.session, queue, config.principal, outbound)
            )
            for (text, _), (code, _) in zip(outbound, subscribed.answers, strict=True):
                if code > 2:
                    log.warning(
                        "mqtt bridge subscription refused", extra={"bridge": config.name, "filter": text}
                    )
                else:
                    self.granted[text] = code
        for item in opened.outbound:
            self._send(item.publish)

    async def _pump(self) -> None:
        """Send what the bridge's queue holds, as far as the window allows."""
        gateway, config = self.listener.gateway, self.config
        queue = sessions.queue_for(config.session)
        while len(self.used) < WINDOW and await asyncio.to_thread(self.listener.qm.depth, queue) > 0:
            ids = [i for i in range(1, 2 * WINDOW + 1) if i not in self.used][: WINDOW - len(self.used)]
            job = gateway.fetch(config.session, queue, ids, dict(self.granted), origin=config.name)
            for publish in await gateway.submit(job):
                self._send(publish)

    def _send(self, publish: Publish) -> None:
        mapped = to_remote(self.config.topics, publish.topic)
        if mapped is None:  # not a bridged topic after all: nothing to wait for
            if publish.packet_id is not None:
                self._forget(publish.packet_id)
            return
        topic, _ = mapped
        info = self.remote.publish(topic, publish.payload, publish.qos, publish.retain)
        if publish.packet_id is not None:
            self.used.add(publish.packet_id)
            self.sent[info.mid] = publish.packet_id

    def _acknowledged(self, mid: int) -> None:
        packet_id = self.sent.pop(mid, None)
        if packet_id is not None:
            self._forget(packet_id)

    def _forget(self, packet_id: int) -> None:
        self.used.discard(packet_id)
        gateway = self.listener.gateway
        gateway.post(gateway.acknowledged(self.config.session, [packet_id], received=False), self._fail)

    def _received(self, message: Any) -> None:
        mapped = to_local(self.config.topics, message.topic)
        if mapped is None:
            self.remote.ack(message.mid, message.qos)
            return
        topic, qos = mapped
        publish = Publish(topic, message.payload, min(qos, message.qos), bool(message.retain))
        gateway = self.listener.gateway
        job = gateway.publish("", [publish], self.config.principal, origin=self.config.name)
        gateway.submit(job).add_done_callback(lambda done: self._routed(done, message))

    def _routed(self, done: asyncio.Future[Any], message: Any) -> None:
        """Acknowledge to the remote broker only what has been routed; if it could not be, the
        bridge ends, and the remote broker sends it again to the next one."""
        if done.cancelled():
            return
        if (exc := done.exception()) is not None:
            self._fail(exc)
            return
        if any(done.result()):
            log.warning(
                "mqtt bridge publication refused", extra={"bridge": self.config.name, "topic": message.topic}
            )
        self.remote.ack(message.mid, message.qos)
