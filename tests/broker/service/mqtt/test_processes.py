"""Several MQTT listener processes on one port (``mqtt_processes``): a client id taken over on
another process closes the first connection there, and the session carries on."""

from __future__ import annotations

import os
import signal
import time

from broker.protocol.mqtt import ConnAck, PubAck, Publish, SubAck, Subscribe
from broker.store import mqtt as sessions
from tests.broker.service.mqtt.clients import MqttBroker, Paho, Raw, eventually
from tests.e2e.processes import Brokers

ATTEMPTS = 40  # the kernel spreads connections over the two processes: one lands elsewhere soon


def _holder(broker: MqttBroker, client_id: str) -> int:
    """The pid of the listener process that connected ``client_id`` last."""
    connected = [e for e in broker.process.lines("mqtt client connected") if e.get("client_id") == client_id]
    return int(connected[-1]["pid"])


def _payloads(raw: Raw, count: int) -> list[bytes]:
    """The next ``count`` publications, each acknowledged (the window is one message)."""
    got = []
    while len(got) < count:
        packet = raw.next()
        if isinstance(packet, Publish):
            got.append(packet.payload)
            raw.send(PubAck(packet.packet_id or 0))
    return got


def test_a_client_id_taken_over_on_another_process_keeps_its_session(brokers: Brokers) -> None:
    broker = MqttBroker(brokers, BROKER_MQTT_PROCESSES="2", BROKER_MQTT_MAX_INFLIGHT="1")
    assert eventually(lambda: len(broker.process.lines("mqtt listener started")) == 2, 60)
    first = Raw(broker.port)
    assert first.connect("device", clean=False) == ConnAck(False, 0)
    first.send(Subscribe(1, (("cmd/#", 1),)))
    assert first.next() == SubAck(1, (1,))
    pub = Paho(broker.port, "pub")
    pub.connect()
    for n in range(3):
        pub.publish("cmd/x", f"m{n}".encode(), 1)
    assert first.next() == Publish("cmd/x", b"m0", 1, False, packet_id=1)  # m1, m2: beyond the window

    holder = _holder(broker, "device")
    for _ in range(ATTEMPTS):  # one landing on the same process takes over there: try again
        second = Raw(broker.port)
        assert second.connect("device", clean=False) == ConnAck(True, 0)
        if _holder(broker, "device") != holder:
            break
        first = second
    else:
        raise AssertionError(f"no connection landed on the second process in {ATTEMPTS} attempts")

    assert first.closed_by_broker()
    assert _payloads(second, 3) == [b"m0", b"m1", b"m2"]  # m0 again (not acknowledged), then the rest
    pub.publish("cmd/y", b"after", 1)
    assert _payloads(second, 1) == [b"after"]  # its subscription moved with it
    second.close()
    pub.close()


def _landed_on_another_process(broker: MqttBroker, client_id: str) -> Raw:
    """A persistent session of ``client_id`` held by the listener process that is not the
    serving one (connections the kernel gives to the serving one are closed, and tried again)."""
    for _ in range(ATTEMPTS):
        raw = Raw(broker.port)
        answer = raw.connect(client_id, clean=False)
        assert isinstance(answer, ConnAck) and answer.return_code == 0
        if _holder(broker, client_id) != broker.process.pid:
            return raw
        # The client closes first: a server-side TIME-WAIT on loopback could meet a later
        # connection that the kernel gives the same client port.
        raw.close()
        assert eventually(lambda: not _online(broker, client_id))
    raise AssertionError(f"no connection landed on the second process in {ATTEMPTS} attempts")


def test_the_sessions_of_a_listener_process_that_died_are_released(brokers: Brokers) -> None:
    """A killed listener process cannot answer a takeover: its clients reconnect at once (a
    process of the same node that no longer exists is dead without waiting for the node
    timeout), and the sessions nobody reconnects are marked offline within a period."""
    broker = MqttBroker(brokers, BROKER_MQTT_PROCESSES="2")
    assert eventually(lambda: len(broker.process.lines("mqtt listener started")) == 2, 60)
    first, second = (_landed_on_another_process(broker, c) for c in ("first", "second"))
    holder = _holder(broker, "first")
    assert _holder(broker, "second") == holder
    os.kill(holder, signal.SIGKILL)
    assert _ended(first)

    started = time.monotonic()
    again, answer = _reconnect(broker, "first")
    assert answer == ConnAck(True, 0)
    assert time.monotonic() - started < 1.0  # no wait for an answer, nor for the node timeout
    assert eventually(lambda: not _online(broker, "second"), 10)
    assert _online(broker, "first")
    assert not broker.process.lines("mqtt takeover not answered; taking the session anyway")
    again.close()
    second.close()


def _online(broker: MqttBroker, client_id: str) -> bool:
    with broker.qm.reading() as conn:
        stored = sessions.find_session(conn, client_id)
    return stored is not None and stored.online


def _ended(raw: Raw) -> bool:
    """Whether the connection ends (closed or reset: a killed process's kernel may do either)."""
    try:
        return raw.closed_by_broker()
    except ConnectionResetError:
        return True


def _reconnect(broker: MqttBroker, client_id: str) -> tuple[Raw, object]:
    """Connect again as a client library does: a connection the kernel handed to the killed
    process's listening socket in the moment it was closing is reset, and tried again."""
    for _ in range(ATTEMPTS):
        raw = Raw(broker.port)
        try:
            return raw, raw.connect(client_id, clean=False)
        except ConnectionResetError:
            raw.close()
            time.sleep(0.05)
    raise AssertionError(f"every reconnection of {client_id} reset")
