"""Nothing an administrator does can silently break a running broker: a real ``broker serve --api``
on each database, and every door an operator has (the admin API, the ``broker`` command, the
``queues`` Python API) refusing what would stop it, with routing going on afterwards."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from broker.client import BrokerClient
from broker.core.system import CONTROL_QUEUE, DEFAULT_STREAM, INTER_BROKER_QUEUE
from queues import DEAD_LETTER_QUEUE, MQError, QueueManager, Reason
from tests.e2e.processes import BROKER, Brokers, ServeProcess, child_environment, free_port, wait_until

SYSTEM_QUEUES = (DEFAULT_STREAM, CONTROL_QUEUE, INTER_BROKER_QUEUE, DEAD_LETTER_QUEUE)


@dataclass
class Running:
    serve: ServeProcess
    qm: QueueManager
    url: str
    api: httpx.Client

    def cli(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BROKER), "--db", self.url, *argv],
            capture_output=True,
            text=True,
            env=child_environment(),
            timeout=60,
        )


@pytest.fixture
def running(brokers: Brokers) -> Iterator[Running]:
    port = free_port()
    serve = brokers.start(api_port=port)
    created = subprocess.run(
        [
            str(BROKER),
            "--db",
            brokers.url,
            "token",
            "create",
            "--role",
            "admin",
            "--principal",
            "ops",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=child_environment(),
        check=True,
    )
    secret = json.loads(created.stdout)["token"]
    base = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {secret}"}, timeout=30) as api:
        wait_until(lambda: api.get("/api/v1/status").json()["routers"] != [], 30, "the router's first report")
        yield Running(serve, brokers.qm, brokers.url, api)


def refused_in_use(response: httpx.Response) -> str:
    assert response.status_code == 409, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert (body["reason"], body["reason_name"]) == (2042, "MQRC_OBJECT_IN_USE")
    return str(body["detail"])


def routes(running: Running, topic: str = "Safety/Check") -> None:
    """A publication still reaches a subscriber through the running broker."""
    queue = "SAFETY.CHECK"
    if queue not in {q.name for q in running.qm.list_queues("SAFETY.*")}:
        running.qm.define_queue(queue)
    with BrokerClient(running.qm, timeout=30) as client:
        assert client.subscribe(topic, queue).completion == "ok"
        assert client.publish([topic], "still routing").completion == "ok"
        assert client.receive(queue, wait=30).text == "still routing"


@pytest.mark.parametrize("queue", SYSTEM_QUEUES)
def test_a_queue_the_running_broker_uses_cannot_be_deleted_through_any_door(running: Running, queue: str):
    detail = refused_in_use(running.api.delete(f"/api/v1/queues/{queue}"))
    assert detail.startswith(f"queue {queue} is in use: broker QM1 ")
    assert f"/{running.serve.pid}@" in detail  # the holder, down to its process
    cli = running.cli("queue", "delete", queue, "--purge")
    assert cli.returncode == 1
    assert cli.stderr.startswith(f"MQRC_OBJECT_IN_USE (2042): queue {queue} is in use: broker QM1")
    with pytest.raises(MQError) as python:
        running.qm.delete_queue(queue, purge=True)
    assert python.value.reason == Reason.MQRC_OBJECT_IN_USE
    assert running.qm.inquire_queue(queue).name == queue
    routes(running)


@pytest.mark.parametrize(
    ("queue", "change", "flag", "why"),
    [
        (CONTROL_QUEUE, {"max_msg_length": 0}, "--max-msg-length=0", "below the"),
        (CONTROL_QUEUE, {"get_enabled": False}, "--get-inhibited", "gets must stay enabled"),
        (DEFAULT_STREAM, {"get_enabled": False}, "--get-inhibited", "gets must stay enabled"),
        (DEAD_LETTER_QUEUE, {"put_enabled": False}, "--put-inhibited", "puts must stay enabled"),
        (DEAD_LETTER_QUEUE, {"max_msg_length": 1024}, "--max-msg-length=1024", "below the"),
    ],
)
def test_attributes_that_would_stop_the_broker_are_refused(running: Running, queue, change, flag, why):
    assert why in refused_in_use(running.api.patch(f"/api/v1/queues/{queue}", json=change))
    cli = running.cli("queue", "alter", queue, flag)
    assert cli.returncode == 1 and why in cli.stderr, cli.stderr
    with pytest.raises(MQError) as python:
        running.qm.alter_queue(queue, **change)
    assert python.value.reason == Reason.MQRC_OBJECT_IN_USE
    # what does not get in the broker's way is still the operator's to change
    assert running.api.patch(f"/api/v1/queues/{queue}", json={"description": "watched"}).status_code == 200
    assert running.api.patch(f"/api/v1/queues/{queue}", json={"max_msg_length": 8 << 20}).status_code == 200
    routes(running)


def test_the_broker_lets_go_of_its_queues_when_it_stops(running: Running):
    assert running.serve.terminate() == 0
    running.qm.alter_queue(CONTROL_QUEUE, get_enabled=False)
    assert running.qm.delete_queue(INTER_BROKER_QUEUE) == 0


def test_a_killed_broker_holds_nothing(running: Running):
    running.serve.kill()
    assert running.qm.holders(DEFAULT_STREAM) == []  # its process is gone: no need to wait the lease out
    assert running.qm.delete_queue(DEFAULT_STREAM) == 0


def test_a_queue_with_subscriptions_is_deleted_only_with_force_which_deregisters_them(running: Running):
    running.qm.define_queue("SCORES")
    running.qm.define_queue("OTHER")
    made = running.api.post(
        "/api/v1/subscriptions", json={"topics": ["Sport/#", "News/#"], "queue": "SCORES"}
    )
    assert made.status_code == 201, made.text
    assert running.api.post(
        "/api/v1/subscriptions", json={"topics": ["Sport/#"], "queue": "OTHER"}
    ).is_success
    detail = refused_in_use(running.api.delete("/api/v1/queues/SCORES"))
    assert "receives 2 subscription(s) (Sport/#, News/#)" in detail and "force" in detail
    cli = running.cli("queue", "delete", "SCORES")
    assert cli.returncode == 1 and "receives 2 subscription(s)" in cli.stderr
    assert running.api.delete("/api/v1/queues/SCORES", params={"force": "true"}).status_code == 200
    assert running.api.get("/api/v1/subscriptions", params={"queue": "SCORES"}).json()["items"] == []
    # a publication on the topic now goes to OTHER alone: nothing is dead-lettered for SCORES
    depth = running.qm.depth(DEAD_LETTER_QUEUE)
    with BrokerClient(running.qm, timeout=30) as client:
        assert client.publish(["Sport/Soccer"], "goal").completion == "ok"
        assert client.receive("OTHER", wait=30).text == "goal"
    assert running.qm.depth(DEAD_LETTER_QUEUE) == depth


def test_the_cli_forces_the_deletion_of_a_subscribed_queue_through_the_broker(running: Running):
    running.qm.define_queue("SCORES")
    assert running.cli("subscribe", "--topic", "Sport/#", "--queue", "SCORES").returncode == 0
    deleted = running.cli("queue", "delete", "SCORES", "--force")
    assert deleted.returncode == 0, deleted.stderr
    assert running.api.get("/api/v1/subscriptions", params={"queue": "SCORES"}).json()["items"] == []
    routes(running)


def test_a_neighbours_transmission_queue_goes_with_the_neighbour_only(running: Running):
    added = running.cli(
        "neighbour", "add", "QMB", "--url", "http://127.0.0.1:9", "--token", "s" * 20, "--no-topology-check"
    )
    assert added.returncode == 0, added.stderr
    detail = refused_in_use(running.api.delete("/api/v1/queues/QMB"))
    assert "the channel to neighbour QMB sends from it (remove the neighbour instead)" in detail
    assert running.cli("queue", "delete", "QMB").returncode == 1
    assert running.cli("neighbour", "remove", "QMB").returncode == 0
    assert [q.name for q in running.qm.list_queues("QMB")] == []
    routes(running)


def test_tokens_that_would_lock_the_api_out_are_kept(running: Running):
    me = running.api.get("/api/v1/tokens").json()["items"][0]
    assert "the one making this request" in refused_in_use(running.api.delete(f"/api/v1/tokens/{me['id']}"))
    cli = running.cli("token", "revoke", str(me["id"]))
    assert cli.returncode == 1 and "the last live admin token" in cli.stderr
    other = running.api.post("/api/v1/tokens", json={"role": "admin", "principal": "ops2"}).json()
    assert running.cli("token", "revoke", str(other["id"])).returncode == 0
    forced = running.cli("token", "revoke", str(me["id"]), "--force")
    assert forced.returncode == 0, forced.stderr
    assert running.api.get("/api/v1/tokens").status_code == 401
