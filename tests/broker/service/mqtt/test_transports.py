"""MQTT over TLS and over WebSockets (plain and TLS) against a real ``broker serve``: Mosquitto's
command-line clients and paho-mqtt with certificates made for the test, the same sessions,
authority and topic tree whatever carries a connection, and refused handshakes that leave the
other clients alone."""

from __future__ import annotations

import ipaddress
import socket
import ssl
import struct
import subprocess
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import paho.mqtt.client as paho
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Subprotocol

from broker import store
from broker.core.authority import AclRule, Permission, PrincipalKind
from broker.protocol.mqtt import (
    CONNACK_BAD_CREDENTIALS,
    CONNACK_NOT_AUTHORIZED,
    MQTT_311,
    SUBACK_FAILURE,
    ConnAck,
    Connect,
    Decoder,
    Packet,
    Publish,
    SubAck,
    Subscribe,
    encode,
)
from broker.service.config import ConfigError, Settings
from broker.service.mqtt.transports import Endpoint, endpoints
from tests.broker.service.mqtt.clients import (
    PASSWORD,
    TIMEOUT,
    MqttBroker,
    Paho,
    Received,
    eventually,
    subscribed,
)
from tests.certificates import Certificates
from tests.e2e.processes import Brokers, free_port


@dataclass
class Secure:
    """A broker with every transport: MQTT on ``broker.port``, TLS, WebSockets and WSS."""

    broker: MqttBroker
    certificates: Certificates
    tls: int
    ws: int
    wss: int

    def paho(
        self, port: int, client_id: str, *, cert: str | None = None, websockets: bool = False, **kw: Any
    ) -> Paho:
        """A paho client on ``port``; over TLS (verifying the server) when it is a TLS port,
        presenting the client certificate of the common name ``cert`` if given."""
        client = Paho(port, client_id, transport="websockets" if websockets else "tcp", **kw)
        if port in (self.tls, self.wss):
            files = self.certificates.client(cert) if cert else (None, None)
            client.client.tls_set(
                ca_certs=str(self.certificates.ca),
                certfile=None if files[0] is None else str(files[0]),
                keyfile=None if files[1] is None else str(files[1]),
            )
        return client

    def context(self, cert: str | None = None) -> ssl.SSLContext:
        """A client's TLS context trusting the test CA, with the certificate of ``cert``."""
        context = ssl.create_default_context(cafile=str(self.certificates.ca))
        if cert is not None:
            cert_file, key_file = self.certificates.client(cert)
            context.load_cert_chain(cert_file, key_file)
        return context

    def mosquitto_tls(self, tool: str, *args: str, cert: str | None = None) -> list[str]:
        """The argv of ``mosquitto_pub``/``mosquitto_sub`` over TLS (``--cafile``), with the
        client certificate of ``cert`` or with alice's password."""
        argv = [tool, "-h", "127.0.0.1", "-p", str(self.tls), "--cafile", str(self.certificates.ca)]
        if cert is None:
            argv += ["-u", "alice", "-P", PASSWORD]
        else:
            cert_file, key_file = self.certificates.client(cert)
            argv += ["--cert", str(cert_file), "--key", str(key_file)]
        return [*argv, *args]


@pytest.fixture
def secure(brokers: Brokers, certificates: Certificates) -> Secure:
    tls, ws, wss = free_port(), free_port(), free_port()
    environment = certificates.environment(
        mqtt_tls_listen=f"127.0.0.1:{tls}",
        mqtt_ws_listen=f"127.0.0.1:{ws}",
        mqtt_wss_listen=f"127.0.0.1:{wss}",
    )
    return Secure(MqttBroker(brokers, **environment), certificates, tls, ws, wss)


def connected_users(broker: MqttBroker) -> dict[str, str]:
    """The principal each client id connected as, from the broker's log."""
    return {e["client_id"]: e["user"] for e in broker.process.lines("mqtt client connected")}


def test_mosquitto_clients_over_tls_a_client_certificate_names_the_principal(secure: Secure) -> None:
    sub = subprocess.Popen(
        secure.mosquitto_tls(
            "mosquitto_sub", "-i", "carol-sub", "-t", "Tls/#", "-C", "1", "-W", "10", "-q", "1", cert="carol"
        ),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert eventually(lambda: subscribed(secure.broker, "carol-sub", "Tls/#"))
    secure_pub = secure.mosquitto_tls("mosquitto_pub", "-i", "alice-pub", "-t", "Tls/x", "-m", "over tls")
    subprocess.run([*secure_pub, "-q", "1"], check=True, timeout=TIMEOUT)
    out, _ = sub.communicate(timeout=TIMEOUT)
    assert out.strip() == "over tls"
    assert sub.returncode == 0
    # carol has no password: her certificate alone authenticated her, as carol.
    assert connected_users(secure.broker) == {"carol-sub": "carol", "alice-pub": "alice"}


def test_a_certificate_principal_is_subject_to_its_acl_rules(secure: Secure) -> None:
    with secure.broker.qm.unit_of_work() as uow:
        rule = AclRule("dave", PrincipalKind.USER, "Secret", Permission.SUBSCRIBE, False)
        store.add_acl_rule(uow.connection, rule)
    dave = secure.paho(secure.tls, "dave", cert="dave", user=None)
    assert dave.connect() == (0, False)
    assert dave.subscribe(("Secret/#", 1), ("Open/#", 1)) == [SUBACK_FAILURE, 1]
    dave.close()


def test_the_user_name_beside_a_certificate_must_be_absent_or_its_principal(secure: Secure) -> None:
    carol = secure.context("carol")
    answers = [
        _tls_connect(secure.tls, carol, None, None)[1],
        _tls_connect(secure.tls, carol, "carol", b"not checked")[1],
        _tls_connect(secure.tls, carol, "alice", PASSWORD.encode())[1],  # alice's password, carol's cert
    ]
    assert answers == [ConnAck(False, 0), ConnAck(False, 0), ConnAck(False, CONNACK_NOT_AUTHORIZED)]


def test_without_a_certificate_passwords_apply_over_tls(secure: Secure) -> None:
    plain = secure.context()
    answers = [
        _tls_connect(secure.tls, plain, "alice", PASSWORD.encode())[1],
        _tls_connect(secure.tls, plain, "alice", b"nope")[1],
        _tls_connect(secure.tls, plain, "carol", b"")[1],  # the certificate's name, without it
        _tls_connect(secure.tls, plain, None, None)[1],  # no anonymous principal configured
    ]
    bad, anonymous = ConnAck(False, CONNACK_BAD_CREDENTIALS), ConnAck(False, CONNACK_NOT_AUTHORIZED)
    assert answers == [ConnAck(False, 0), bad, bad, anonymous]


def test_websockets_and_tls_share_one_topic_tree_and_the_sessions(secure: Secure) -> None:
    plain = secure.paho(secure.broker.port, "plain")
    ws = secure.paho(secure.ws, "ws", websockets=True)
    wss = secure.paho(secure.wss, "wss", websockets=True, cert="carol", user=None)
    for client in (plain, ws, wss):
        assert client.connect() == (0, False)
        assert client.subscribe(("Mix/#", 1)) == [1]
    for number, client in enumerate((plain, ws, wss)):
        client.publish(f"Mix/{number}", f"from {number}".encode(), 1)
    expected = [Received(f"Mix/{n}", f"from {n}".encode(), 1, False) for n in range(3)]
    for client in (plain, ws, wss):
        assert sorted(client.receive(3), key=lambda m: m.topic) == expected
    # A persistent session taken from TCP to WebSockets and TLS: what it missed is waiting.
    roamer = secure.paho(secure.broker.port, "roamer", clean=False)
    roamer.connect()
    roamer.subscribe(("Roam/#", 2))
    roamer.close()
    plain.publish("Roam/missed", b"kept", 2)
    back = secure.paho(secure.wss, "roamer", websockets=True, clean=False)
    assert back.connect() == (0, True)
    assert back.receive(1) == [Received("Roam/missed", b"kept", 2, False)]
    assert connected_users(secure.broker)["wss"] == "carol"


def _tls_connect(
    port: int,
    context: ssl.SSLContext,
    user: str | None = "alice",
    password: bytes | None = PASSWORD.encode(),
) -> tuple[str, Packet]:
    """(TLS version agreed, the broker's answer to a CONNECT); ``ssl.SSLError`` if it refuses."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock,
        context.wrap_socket(sock, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(encode(Connect("MQTT", MQTT_311, "probe", True, 60, None, user, password)))
        return str(tls.version()), Decoder().feed(tls.recv(64))[0]


def test_refused_handshakes_leave_the_other_clients_alone(secure: Secure) -> None:
    sub = secure.paho(secure.tls, "steady", cert="carol", user=None)
    sub.connect()
    sub.subscribe(("Steady/#", 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # ssl.TLSVersion.TLSv1_1 itself
        old = ssl.create_default_context(cafile=str(secure.certificates.ca))
        old.minimum_version = ssl.TLSVersion.TLSv1_1
        old.set_ciphers("DEFAULT:@SECLEVEL=0")  # let this client offer TLS 1.1 at all
        old.maximum_version = ssl.TLSVersion.TLSv1_2
        # The same client, allowed 1.2, gets in.
        assert _tls_connect(secure.tls, old) == ("TLSv1.2", ConnAck(False, 0))
        old.maximum_version = ssl.TLSVersion.TLSv1_1
        with pytest.raises(ssl.SSLError) as refused:
            _tls_connect(secure.tls, old)
    assert refused.value.reason in ("UNEXPECTED_EOF_WHILE_READING", "TLSV1_ALERT_PROTOCOL_VERSION")
    stranger_cert, stranger_key = secure.certificates.client("carol", trusted=False)
    untrusted = secure.mosquitto_tls("mosquitto_pub", "-t", "Steady/x", "-m", "no", "-q", "1")
    untrusted += ["--cert", str(stranger_cert), "--key", str(stranger_key)]
    assert subprocess.run(untrusted, capture_output=True, timeout=TIMEOUT).returncode != 0
    with socket.create_connection(("127.0.0.1", secure.tls), timeout=TIMEOUT) as cleartext:
        cleartext.sendall(encode(Connect("MQTT", MQTT_311, "clear", True, 60, None, "alice", b"x")))
        assert cleartext.recv(64)[:1] in (b"", b"\x15")  # no CONNACK: closed, at most a TLS alert
    pub = secure.paho(secure.broker.port, "pub")
    pub.connect()
    pub.publish("Steady/after", b"still here", 1)
    assert sub.receive(1) == [Received("Steady/after", b"still here", 1, False)]
    assert sub.nothing_more()  # nothing from the refused clients


@pytest.fixture
def raw_ws(secure: Secure) -> Iterator[ClientConnection]:
    url = f"ws://127.0.0.1:{secure.ws}/mqtt"
    with connect(url, subprotocols=[Subprotocol("mqtt")], open_timeout=TIMEOUT) as ws:
        yield ws


def _packets(ws: ClientConnection, count: int) -> list[Packet]:
    decoder, found = Decoder(), []
    while len(found) < count:
        message = ws.recv(timeout=TIMEOUT)
        assert isinstance(message, bytes)
        found += decoder.feed(message)
    return found


def test_a_websocket_message_may_hold_several_packets_or_part_of_one(raw_ws: ClientConnection) -> None:
    connect_packet = Connect("MQTT", MQTT_311, "framed", True, 60, None, "alice", PASSWORD.encode())
    raw_ws.send(encode(connect_packet) + encode(Subscribe(1, [("Framed/#", 0)])))
    assert _packets(raw_ws, 2) == [ConnAck(False, 0), SubAck(1, (0,))]
    publication = encode(Publish("Framed/split", b"x" * 1000, 0, False))
    raw_ws.send(publication[:3])
    raw_ws.send(publication[3:700])
    raw_ws.send(publication[700:])
    assert _packets(raw_ws, 1) == [Publish("Framed/split", b"x" * 1000, 0, False)]


def test_a_text_websocket_message_ends_the_connection(raw_ws: ClientConnection) -> None:
    raw_ws.send(encode(Connect("MQTT", MQTT_311, "text", True, 60, None, "alice", PASSWORD.encode())))
    assert _packets(raw_ws, 1) == [ConnAck(False, 0)]
    raw_ws.send("not MQTT")
    with pytest.raises(ConnectionClosed) as closed:
        raw_ws.recv(timeout=TIMEOUT)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1003


def _websocket_refusal(url: str, subprotocols: list[str] | None) -> int:
    """The HTTP status of a refused WebSocket handshake."""
    offered = None if subprotocols is None else [Subprotocol(s) for s in subprotocols]
    with pytest.raises(InvalidStatus) as refused:
        connect(url, subprotocols=offered, open_timeout=TIMEOUT)
    return refused.value.response.status_code


def test_websocket_handshakes_other_than_mqtts_are_refused(secure: Secure) -> None:
    base = f"ws://127.0.0.1:{secure.ws}"
    assert _websocket_refusal(f"{base}/other", ["mqtt"]) == 404
    assert _websocket_refusal(f"{base}/mqtt", None) == 400  # the specification: clients offer mqtt
    assert _websocket_refusal(f"{base}/mqtt", ["stomp"]) == 400
    client = secure.paho(secure.ws, "after", websockets=True)
    assert client.connect() == (0, False)  # the listener serves on


def test_paho_over_websockets_speaks_3_1_too(secure: Secure) -> None:
    client = secure.paho(secure.wss, "old", websockets=True, protocol=paho.MQTTv31)
    assert client.connect() == (0, False)
    assert client.subscribe(("Old/#", 2)) == [2]
    client.publish("Old/one", b"3.1", 2)
    assert client.receive(1) == [Received("Old/one", b"3.1", 2, False)]


def test_the_listeners_the_settings_ask_for(certificates: Certificates) -> None:
    files = {"tls_cert": str(certificates.server_cert), "tls_key": str(certificates.server_key)}
    found = endpoints(Settings(mqtt_listen="1883", mqtt_wss_listen="0.0.0.0:8081", **files))
    assert [str(e) for e in found] == ["mqtt://127.0.0.1:1883", "wss://0.0.0.0:8081/mqtt"]
    assert found[0].context is None and found[1].context is not None
    assert endpoints(Settings(mqtt_ws_listen="9001")) == [Endpoint("ws", "127.0.0.1", 9001)]  # no TLS files
    assert endpoints(Settings()) == []


def test_a_broker_stopping_ends_websocket_and_tls_connections_with_their_wills(secure: Secure) -> None:
    keeper = secure.paho(secure.broker.port, "keeper", clean=False)
    keeper.connect()
    keeper.subscribe(("Wills/#", 1))
    keeper.close()
    for port, name in ((secure.ws, "ws"), (secure.wss, "wss"), (secure.tls, "tls")):
        client = secure.paho(
            port, name, websockets=port != secure.tls, will=(f"Wills/{name}", b"gone", 1, False)
        )
        assert client.connect() == (0, False)
    secure.broker.restart(kill=False)  # SIGTERM: every connection ends as a lost one
    back = secure.paho(secure.broker.port, "keeper", clean=False)
    assert back.connect() == (0, True)
    wills = sorted(back.receive(3), key=lambda m: m.topic)
    assert wills == [Received(f"Wills/{name}", b"gone", 1, False) for name in ("tls", "ws", "wss")]


@dataclass
class Proxied:
    """A broker that takes PROXY headers from 127.0.0.1 (the tests' proxy) on MQTT and TLS."""

    broker: MqttBroker
    tls: int
    context: ssl.SSLContext


@pytest.fixture
def proxied(brokers: Brokers, certificates: Certificates) -> Proxied:
    tls = free_port()
    environment = certificates.environment(mqtt_tls_listen=f"127.0.0.1:{tls}", mqtt_proxy_from="127.0.0.1")
    context = ssl.create_default_context(cafile=str(certificates.ca))
    return Proxied(MqttBroker(brokers, **environment), tls, context)


def _v1(source: str, port: int) -> bytes:
    return f"PROXY TCP{6 if ':' in source else 4} {source} {source} {port} 1883\r\n".encode()


def _v2(command: int, source: str = "::", port: int = 0) -> bytes:
    body = (
        b""
        if command == 0x20
        else socket.inet_pton(socket.AF_INET6, source) * 2 + struct.pack(">HH", port, 1883)
    )
    return (
        b"\r\n\r\n\x00\r\nQUIT\n"
        + bytes([command, 0x21 if body else 0])
        + struct.pack(">H", len(body))
        + body
    )


def _connect(client_id: str, password: bytes = PASSWORD.encode(), user: str = "alice") -> bytes:
    return encode(Connect("MQTT", MQTT_311, client_id, True, 60, None, user, password))


def _answer(sock: socket.socket) -> Packet | None:
    """The broker's first packet, None if it closes the connection first (a reset, when it
    closes with what the client sent unread)."""
    try:
        data = sock.recv(64)
    except ConnectionResetError:
        return None
    return Decoder().feed(data)[0] if data else None


def _addresses(broker: MqttBroker) -> dict[str, str]:
    return {e["client_id"]: e["address"] for e in broker.process.lines("mqtt client connected")}


def test_a_proxy_names_each_client_and_must_send_its_header(proxied: Proxied) -> None:
    port = proxied.broker.port
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        sock.sendall(_v1("203.0.113.7", 40001) + _connect("v1"))  # the header and CONNECT in one write
        assert _answer(sock) == ConnAck(False, 0)
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        header = _v2(0x21, "2001:db8::5", 4242)
        sock.sendall(header[:10])  # the header in pieces, as TCP may deliver it
        time.sleep(0.05)
        sock.sendall(header[10:30])
        time.sleep(0.05)
        sock.sendall(header[30:] + _connect("v2"))
        assert _answer(sock) == ConnAck(False, 0)
    with (
        socket.create_connection(("127.0.0.1", proxied.tls), timeout=TIMEOUT) as sock,
    ):
        sock.sendall(_v1("198.51.100.3", 40003))  # before the TLS handshake, as HAProxy sends it
        with proxied.context.wrap_socket(sock, server_hostname="localhost") as tls:
            tls.sendall(_connect("tls"))
            assert _answer(tls) == ConnAck(False, 0)
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        sock.sendall(_v2(0x20) + encode(Connect("MQTT", 0, "check", True, 0, None)))  # HAProxy's check
        assert _answer(sock) == ConnAck(False, 1)
    assert eventually(lambda: len(_addresses(proxied.broker)) == 3)
    assert _addresses(proxied.broker) == {
        "v1": "203.0.113.7:40001",
        "v2": "[2001:db8::5]:4242",
        "tls": "198.51.100.3:40003",
    }
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        sock.sendall(_connect("no-header"))  # straight from the proxy's address: refused
        assert _answer(sock) is None
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        sock.sendall(b"PROXY TCP4 1.2.3.4 5.6.7.8 99999 1883\r\n")
        assert _answer(sock) is None
    refused = "mqtt connection refused: no valid PROXY protocol header"
    assert eventually(lambda: len(proxied.broker.process.lines(refused)) == 2)
    assert all(line["address"].startswith("127.0.0.1:") for line in proxied.broker.process.lines(refused))


def test_the_sign_in_throttle_counts_each_proxied_client_by_its_own_address(proxied: Proxied) -> None:
    """Behind a proxy every connection comes from one address: without the header, another
    client's failures would throttle alice's login by that address."""
    port = proxied.broker.port
    for attempt in range(8):
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
            sock.sendall(_v1("203.0.113.66", 50000 + attempt) + _connect(f"guess{attempt}", b"wrong", "bob"))
            assert _answer(sock) in (
                ConnAck(False, CONNACK_BAD_CREDENTIALS),
                ConnAck(False, CONNACK_NOT_AUTHORIZED),
            )
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        sock.sendall(_v1("203.0.113.66", 50100) + _connect("same-address", user="alice"))
        assert _answer(sock) == ConnAck(False, CONNACK_NOT_AUTHORIZED)  # the guesser's address: throttled
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        sock.sendall(_v1("203.0.113.67", 50200) + _connect("device", user="alice"))
        assert _answer(sock) == ConnAck(False, 0)


def test_without_the_setting_a_proxy_header_is_not_read(secure: Secure) -> None:
    with socket.create_connection(("127.0.0.1", secure.broker.port), timeout=TIMEOUT) as sock:
        # Nobody may name an address: the header is read as MQTT ("P" a PUBREC of 82 bytes,
        # malformed), and the connection closed.
        sock.sendall(_v1("203.0.113.7", 40001) + _connect("forger") + bytes(64))
        assert _answer(sock) is None
    assert endpoints(Settings(mqtt_listen="1883", mqtt_proxy_from=("10.0.0.0/8", "::1")))[0].proxies == (
        ipaddress.ip_network("10.0.0.0/8"),
        ipaddress.ip_network("::1"),
    )
    with pytest.raises(ConfigError, match="mqtt_proxy_from='haproxy' is not valid"):
        endpoints(Settings(mqtt_listen="1883", mqtt_proxy_from=("haproxy",)))
