"""Publishing over HTTP: a Publish command through the running broker, delivered and retained as
an application's, refused by the broker's rules with their MQ reasons (both dialects)."""

from __future__ import annotations

from typing import Any

import httpx

from broker import store
from broker.client import BrokerClient
from broker.core.authority import Permission
from broker.protocol.options import RegOpt
from queues import DEAD_LETTER_QUEUE
from tests.admin_api.conftest import Api, assert_problem
from tests.admin_api.test_subscriptions import deny
from tests.e2e.harness import ServiceThread, drain

PUBLICATIONS = "/api/v1/publications"


def publish(api: Api, role: str = "operator", **body: Any) -> httpx.Response:
    return api.post(PUBLICATIONS, role, json=body)


def subscribed(api: Api, queue: str, topic: str) -> None:
    api.qm.define_queue(queue)
    with BrokerClient(api.qm) as client:
        assert client.subscribe(topic, queue, options=RegOpt.InformIfRet).ok


def test_a_publication_reaches_subscribers_with_its_folders_and_is_retained(
    api: Api, router: ServiceThread
) -> None:
    subscribed(api, "SCORES", "Sport/#")
    response = publish(
        api,
        topics=["Sport/Soccer"],
        body_text="1-0 ⚽",
        retain=True,
        folders=["  <usr><Match>Team1 v Team2</Match></usr>\n"],
        persistence=1,
        priority=7,
    )
    assert response.status_code == 200, response.text
    assert response.json() == {"completion": "ok", "topics": ["Sport/Soccer"], "warnings": []}
    (delivered,) = drain(api.qm, "SCORES")
    assert (delivered.topic, delivered.text, delivered.folders) == (
        "Sport/Soccer",
        "1-0 ⚽",
        ("<usr><Match>Team1 v Team2</Match></usr>",),
    )
    assert (delivered.message.persistence, delivered.message.priority) == (1, 7)
    with api.qm.reading() as conn:
        ((_, retained),) = store.list_retained(conn, "#", None, after_id=0, limit=10)
    assert (retained.topic, retained.rfh2.payload) == ("Sport/Soccer", "1-0 ⚽".encode())
    assert retained.message.user_id == "otto"  # the publisher: the token's principal
    entry = api.get("/api/v1/audit").json()["items"][0]
    assert (entry["resource"], entry["status"], entry["summary"]) == (
        "/api/v1/publications",
        200,
        {"topics": ["Sport/Soccer"], "retain": True, "user_id": "otto", "body_length": 7},
    )


def test_the_broker_refuses_with_its_mq_reasons(api: Api, router: ServiceThread) -> None:
    subscribed(api, "SCORES", "#")
    deny(api.qm, "otto", "Secret", Permission.PUBLISH)
    refused = assert_problem(
        publish(api, topics=["Secret/Plans"], body_text="x"), 403, "MQRCCF_NOT_AUTHORIZED"
    )
    assert refused["topic"] == "Secret/Plans"
    assert publish(api, topics=["Secret/Plans"], body_text="x", user_id="boss").status_code == 200
    partly = publish(api, topics=["Open", "Secret/More"], body_text="y").json()
    assert (partly["completion"], [w["reason_name"] for w in partly["warnings"]]) == (
        "warning",
        ["MQRCCF_NOT_AUTHORIZED"],
    )
    assert_problem(publish(api, topics=["Sport/#"]), 409, "MQRCCF_TOPIC_ERROR")
    for folder, reason in (
        ("not xml", "MQRC_RFH_ERROR"),
        ("<usr><open></usr>", "MQRC_RFH_PARM_ERROR"),
        ("<psc><Command>DeletePub</Command></psc>", "MQRC_RFH_PARM_ERROR"),
    ):
        assert_problem(publish(api, topics=["Open"], folders=[folder]), 409, reason)
    assert_problem(publish(api, "viewer", topics=["Open"]), 403)
    assert [p.topic for p in drain(api.qm, "SCORES")] == ["Secret/Plans", "Open"]
    assert api.qm.depth(DEAD_LETTER_QUEUE) == 0


def test_invalid_bodies_never_reach_the_broker(api: Api) -> None:
    invalid: tuple[dict[str, Any], ...] = (
        {"topics": []},
        {"topics": [""]},
        {"topics": ["a\x00b"]},
        {"topics": ["a"], "retain": 1},
        {"topics": ["a"], "folders": [""]},
        {"topics": ["a"], "folders": ["<a/>"] * 17},
        {"topics": ["a"], "priority": 10},
        {"topics": ["a"], "expiry": 0},
        {"topics": ["a"], "user_id": "far too long a name"},
        {"topics": ["a"], "retained": True},
    )
    for body in invalid:
        assert_problem(publish(api, **body), 422)
    surrogate = '{"topics": ["a"], "body_text": "\\ud800"}'  # JSON may escape one; UTF-8 cannot hold it
    assert_problem(
        api.post(PUBLICATIONS, content=surrogate, headers={"Content-Type": "application/json"}), 422
    )
    assert [q.name for q in api.qm.list_queues()] == [DEAD_LETTER_QUEUE]  # not even a reply queue


def test_without_a_live_router_nothing_is_sent(api: Api) -> None:
    problem = assert_problem(publish(api, topics=["a"]), 503)
    assert "nothing was sent" in problem["detail"]
