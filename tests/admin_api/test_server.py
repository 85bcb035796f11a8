"""``broker serve --api`` for real: uvicorn on a loopback port, a router beside it, SIGTERM ends both."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from admin_api import create_app
from admin_api.server import listening_socket, serve
from broker import store
from broker.service.config import Settings
from broker.service.tls import server_context
from queues import MQError, QueueManager, Reason, make_engine
from tests.certificates import Certificates
from tests.e2e.harness import service

STARTUP_SECONDS = 60


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def broker(url: str, *argv: str) -> list[str]:
    return [sys.executable, "-m", "broker.cli", "--db", url, "--log-format", "text", *argv]


@contextmanager
def serving(
    database_url: str, *flags: str, verify: ssl.SSLContext | bool = True
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``broker serve --api`` on a free port, once its API answers /ready (https with ``verify``)."""
    port = free_port()
    process = subprocess.Popen(
        broker(database_url, "serve", "--api", "--port", str(port), *flags),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    base = f"{'https' if isinstance(verify, ssl.SSLContext) else 'http'}://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        assert process.poll() is None, process.communicate()[0]
        try:
            if httpx.get(f"{base}/ready", timeout=1, verify=verify).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "the API never became ready"
        time.sleep(0.1)
    try:
        yield process, base
    finally:
        if process.poll() is None:
            process.kill()
        print(process.communicate()[0])  # shown beside a failure: what the broker logged


@pytest.fixture
def server(database_url: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    with serving(database_url) as started:
        yield started


def test_serve_api_routes_answers_and_stops_cleanly_on_sigterm(
    database_url: str, server: tuple[subprocess.Popen[str], str]
) -> None:
    process, base = server
    created = subprocess.run(
        broker(database_url, "token", "create", "--role", "admin", "--principal", "ops", "--json"),
        capture_output=True,
        text=True,
        check=True,
    )
    secret = json.loads(created.stdout)["token"]
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {secret}"}, timeout=30) as client:
        assert client.post("/api/v1/queues", json={"name": "SCORES"}).status_code == 201
        subscribed = client.post("/api/v1/subscriptions", json={"topics": ["Sport/#"], "queue": "SCORES"})
        assert subscribed.status_code == 201, subscribed.text
        assert subscribed.json()["subscriptions"][0]["user_id"] == "ops"
        status = client.get("/api/v1/status").json()
        assert len(status["routers"]) == 1
        assert "broker_queue_depth" in client.get("/metrics").text
        assert client.get("/docs").status_code == 200

    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    assert "broker stopped" in output
    engine = make_engine(database_url)
    try:
        qm = QueueManager(engine)
        assert not qm.list_queues("AMQ.*"), "the API's reply queue outlived it"
        with qm.reading() as conn:
            (router,) = store.list_instances(conn)
        assert router["stats"]["messages"] == 1
        qm.notifier.close()
    finally:
        engine.dispose()


def test_a_router_that_crashes_stops_the_api_and_its_error_is_raised(
    qm: QueueManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    routing = service(qm)

    def crash(**_: object) -> None:
        raise MQError(Reason.MQRC_UNEXPECTED_ERROR, "the router broke")

    monkeypatch.setattr(routing, "run", crash)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with pytest.raises(MQError, match="the router broke"):
            serve(create_app(qm, Settings()), listening_socket("127.0.0.1", 0), router=routing)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def test_serve_api_over_https_with_the_tls_settings(database_url: str, certificates: Certificates) -> None:
    trusted = ssl.create_default_context(cafile=str(certificates.ca))
    flags = ["--api-tls", "--tls-cert", str(certificates.server_cert)]
    flags += ["--tls-key", str(certificates.server_key), "--tls-client-ca", str(certificates.ca)]
    with serving(database_url, *flags, verify=trusted) as (_, base):
        assert httpx.get(f"{base}/ready", verify=trusted).json()["status"] == "ready"
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{base}/ready")  # the system's CAs do not vouch for the test CA
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{base.replace('https', 'http')}/ready")  # cleartext to the TLS port
        carol = ssl.create_default_context(cafile=str(certificates.ca))
        carol.load_cert_chain(*certificates.client("carol"))
        assert httpx.get(f"{base}/ready", verify=carol).status_code == 200  # a trusted client cert
        stranger = ssl.create_default_context(cafile=str(certificates.ca))
        stranger.load_cert_chain(*certificates.client("carol", trusted=False))
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{base}/ready", verify=stranger)
        assert httpx.get(f"{base}/ready", verify=trusted).status_code == 200  # serving on


def test_tls_connections_to_the_api_socket_get_tcp_nodelay(certificates: Certificates) -> None:
    """The API's socket under asyncio's TLS server, as uvicorn runs it (``create_server(sock=,
    ssl=)``): every connection accepted has TCP_NODELAY, so small responses go out at once."""
    context = server_context(
        Settings(tls_cert=str(certificates.server_cert), tls_key=str(certificates.server_key))
    )

    async def accepted_nodelay() -> int:
        loop = asyncio.get_running_loop()
        seen: asyncio.Future[int] = loop.create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                sock = transport.get_extra_info("socket")
                seen.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

        sock = listening_socket("127.0.0.1", 0)
        server = await loop.create_server(Probe, sock=sock, ssl=context)
        client = ssl.create_default_context(cafile=str(certificates.ca))
        _, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1], ssl=client)
        try:
            return await asyncio.wait_for(seen, 10)
        finally:
            writer.close()
            server.close()

    assert asyncio.run(accepted_nodelay()) != 0
