"""The admin API over a real database of each dialect, driven through HTTP (httpx, in process).

``api`` is the app with one token per role; ``router`` runs a routing service in a
background thread, as ``broker serve --api`` does, for the endpoints that send
commands to the broker.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from admin_api import create_app
from broker.admin import accounts
from broker.service.config import Settings
from queues import QueueManager, Reason
from tests.e2e.harness import ServiceThread, service

PRINCIPALS = {"viewer": "vera", "operator": "otto", "admin": "ada"}
COMMAND_TIMEOUT = 10.0


@dataclass
class Api:
    """The app, a client, and a secret per role."""

    qm: QueueManager
    app: FastAPI
    client: TestClient
    secrets: dict[str, str]

    def auth(self, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.secrets[role]}"}

    def request(self, method: str, path: str, role: str | None = "admin", **kwargs: Any) -> httpx.Response:
        headers = {**(self.auth(role) if role else {}), **kwargs.pop("headers", {})}
        return self.client.request(method, path, headers=headers, **kwargs)

    def get(self, path: str, role: str | None = "admin", **kwargs: Any) -> httpx.Response:
        return self.request("GET", path, role, **kwargs)

    def post(self, path: str, role: str | None = "admin", **kwargs: Any) -> httpx.Response:
        return self.request("POST", path, role, **kwargs)

    def delete(self, path: str, role: str | None = "admin", **kwargs: Any) -> httpx.Response:
        return self.request("DELETE", path, role, **kwargs)


def issue(qm: QueueManager, role: str, principal: str) -> accounts.IssuedToken:
    with qm.unit_of_work() as uow:
        return accounts.create_token(uow.connection, role, principal)


@contextmanager
def start_api(
    qm: QueueManager, *, command_timeout: float = COMMAND_TIMEOUT, **settings: Any
) -> Iterator[Api]:
    secrets = {role: issue(qm, role, principal).secret for role, principal in PRINCIPALS.items()}
    app = create_app(qm, Settings(**settings), command_timeout=command_timeout)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield Api(qm, app, client, secrets)


@pytest.fixture
def api(qm: QueueManager) -> Iterator[Api]:
    with start_api(qm) as started:
        yield started


@pytest.fixture
def router(api: Api) -> Iterator[ServiceThread]:
    """A routing service looping in a thread; it has reported before the first request."""
    routing = service(api.qm, batch_size=50)
    routing.heartbeat()
    thread = ServiceThread(routing).start()
    yield thread
    thread.stop()


def assert_problem(response: httpx.Response, status: int, reason_name: str | None = None) -> dict[str, Any]:
    """An RFC 9457 problem with this status (and MQ reason), as every error must be."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert body["instance"] == response.request.url.raw_path.decode().split("?")[0]  # as sent
    assert {"type", "title", "detail"} <= body.keys()
    assert "Traceback" not in response.text
    if reason_name is not None:
        assert (body["reason_name"], body["reason"]) == (reason_name, Reason[reason_name])
        assert body["type"] == f"/problems/mq/{reason_name}"
    return body
