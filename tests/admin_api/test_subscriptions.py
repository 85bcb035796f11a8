"""Subscriptions over HTTP: listings from the store, creates and deletes through a running broker."""

from __future__ import annotations

from typing import Any

from broker import store
from broker.client import BrokerClient
from broker.core.authority import AclRule, Permission, PrincipalKind
from broker.core.system import CONTROL_QUEUE
from broker.store import mqtt
from queues import DEAD_LETTER_QUEUE, QueueManager
from tests.admin_api.conftest import Api, assert_problem, start_api
from tests.e2e.harness import ServiceThread, drain, service

SUBS = "/api/v1/subscriptions"


def subscribe(api: Api, role: str = "operator", **body: Any) -> Any:
    body.setdefault("queue", "SCORES")
    return api.post(SUBS, role, json=body)


def deny(qm: QueueManager, user: str, pattern: str, permission: Permission = Permission.SUBSCRIBE) -> None:
    with qm.unit_of_work() as uow:
        store.add_acl_rule(uow.connection, AclRule(user, PrincipalKind.USER, pattern, permission, False))


def test_create_registers_through_the_broker_as_the_tokens_principal(api: Api, router: ServiceThread) -> None:
    api.qm.define_queue("SCORES")
    response = subscribe(api, topics=["Sport/#"], inform_if_retained=True, persistence="persistent")
    assert response.status_code == 201, response.text
    body = response.json()
    (sub,) = body["subscriptions"]
    assert (body["completion"], body["warnings"]) == ("ok", [])
    assert response.headers["location"] == f"{SUBS}/{sub['id']}"
    assert {k: sub[k] for k in ("topic", "queue", "qmgr", "user_id", "options", "sub_point")} == {
        "topic": "Sport/#",
        "queue": "SCORES",
        "qmgr": "QM1",
        "user_id": "otto",
        "options": ["InformIfRet", "Pers"],
        "sub_point": "",
    }
    assert api.get(f"{SUBS}/{sub['id']}", "viewer").json() == sub


def test_registering_again_is_200_and_delivery_follows(api: Api, router: ServiceThread) -> None:
    api.qm.define_queue("SCORES")
    first = subscribe(api, topics=["Sport/Soccer"])
    again = subscribe(api, topics=["Sport/Soccer"], sub_user_data="hello")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["subscriptions"][0]["sub_user_data"] == "hello"
    assert "location" not in again.headers
    with BrokerClient(api.qm, user_id="otto") as client:
        assert client.publish("Sport/Soccer", "1-0").ok  # type: ignore[union-attr]
    assert [p.text for p in drain(api.qm, "SCORES")] == ["1-0"]


def test_refused_topics_are_listed_as_warnings(api: Api, router: ServiceThread) -> None:
    api.qm.define_queue("SCORES")
    deny(api.qm, "otto", "Sport/Tennis")
    response = subscribe(api, topics=["Sport/Soccer", "Sport/Tennis"])
    assert response.status_code == 201
    body = response.json()
    assert body["completion"] == "warning"
    assert [s["topic"] for s in body["subscriptions"]] == ["Sport/Soccer"]
    assert body["warnings"] == [
        {"reason": 3081, "reason_name": "MQRCCF_NOT_AUTHORIZED", "topic": "Sport/Tennis", "parameter": None}
    ]


def test_broker_errors_map_to_problems(api: Api, router: ServiceThread) -> None:
    api.qm.define_queue("SCORES")
    deny(api.qm, "otto", "Secret")
    refused = assert_problem(subscribe(api, topics=["Secret/x"]), 403, "MQRCCF_NOT_AUTHORIZED")
    assert refused["topic"] == "Secret/x"
    no_queue = assert_problem(subscribe(api, topics=["a"], queue="NO.SUCH.QUEUE"), 404, "MQRCCF_Q_NAME_ERROR")
    assert (no_queue["parameter"], no_queue["detail"]) == (
        "QName",
        "the broker answered: error; MQRCCF_Q_NAME_ERROR (3076) [QName]: queue NO.SUCH.QUEUE does not exist",
    )
    assert_problem(subscribe(api, topics=["a"], qmgr="ELSEWHERE"), 404, "MQRCCF_Q_MGR_NAME_ERROR")
    assert subscribe(api, topics=["mine"], user_id="alice").status_code == 201
    assert_problem(subscribe(api, topics=["mine/too"]), 409, "MQRCCF_DUPLICATE_IDENTITY")
    named = subscribe(api, topics=["a", "b"], sub_name="both", user_id="alice")
    assert_problem(named, 409, "MQRCCF_SUB_NAME_ERROR")  # valid, refused by the broker
    with api.qm.reading() as conn:
        topics = [s.key.topic for _, s in store.list_subscriptions(conn, store.SubscriptionFilter())]
    assert topics == ["mine"]


def test_invalid_bodies_never_reach_the_broker(api: Api) -> None:
    for body in (
        {"topics": [], "queue": "Q"},
        {"topics": [""], "queue": "Q"},
        {"topics": ["a\x00b"], "queue": "Q"},
        {"topics": ["a"], "queue": "BAD QUEUE"},
        {"topics": ["a"], "queue": "Q", "user_id": "far too long a name"},
        {"topics": ["a"], "queue": "Q", "persistence": "sometimes"},
        {"topics": ["a"], "queue": "Q", "correl_id": "01"},
        {"topics": ["a"], "queue": "Q", "inform_if_retaned": True},
    ):
        assert_problem(api.post(SUBS, json=body), 422)
    assert [q.name for q in api.qm.list_queues()] == [DEAD_LETTER_QUEUE]  # not even a reply queue


def test_without_a_live_router_nothing_is_sent(api: Api) -> None:
    api.qm.define_queue("SCORES")
    problem = assert_problem(subscribe(api, topics=["a"]), 503)
    assert (problem["type"], problem["title"]) == ("/problems/no-broker", "No broker is routing commands")
    assert "nothing was sent" in problem["detail"]
    assert not api.qm.list_queues(CONTROL_QUEUE)


def test_a_router_that_does_not_answer_in_time_is_503(qm: QueueManager) -> None:
    routing = service(qm)
    routing.heartbeat()  # reported alive, but never routes
    qm.define_queue("SCORES")
    with start_api(qm, command_timeout=0.2) as api:
        problem = assert_problem(subscribe(api, topics=["a"]), 503)
        assert "still queued" in problem["detail"]
    assert qm.depth(CONTROL_QUEUE) == 1


def test_listing_filters_and_pages_by_keyset(api: Api, router: ServiceThread) -> None:
    for queue in ("Q1", "Q2"):
        api.qm.define_queue(queue)
    for topic in ("Sport/Soccer", "Sport/Tennis", "News/World", "Sport/#"):
        assert subscribe(api, topics=[topic], queue="Q1").status_code == 201
    assert subscribe(api, topics=["Sport/Soccer"], queue="Q2", user_id="bob").status_code == 201

    def topics(**params: Any) -> list[tuple[str, str]]:
        page = api.get(SUBS, "viewer", params=params).json()
        return [(s["topic"], s["queue"]) for s in page["items"]]

    assert topics(queue="Q2") == [("Sport/Soccer", "Q2")]
    # A subscription's own wildcard levels are compared as text: "+" matches the level "#".
    assert topics(user="otto", topic="Sport/+") == [
        ("Sport/Soccer", "Q1"),
        ("Sport/Tennis", "Q1"),
        ("Sport/#", "Q1"),
    ]
    assert topics(topic="News/#") == [("News/World", "Q1")]
    assert topics(topic="Sport/Soccer") == [("Sport/Soccer", "Q1"), ("Sport/Soccer", "Q2")]
    first = api.get(SUBS, params={"limit": 2}).json()
    second = api.get(SUBS, params={"limit": 2, "after": first["next_after"]}).json()
    last = api.get(SUBS, params={"limit": 2, "after": second["next_after"]}).json()
    ids = [s["id"] for page in (first, second, last) for s in page["items"]]
    assert len(ids) == 5 and ids == sorted(ids)
    assert last["next_after"] is None
    assert_problem(api.get(SUBS, params={"limit": 0}), 422)
    assert_problem(api.get(f"{SUBS}/999"), 404)


def test_listing_by_protocol(api: Api, router: ServiceThread) -> None:
    """An MQTT session's subscriptions deliver to its SYSTEM.MQTT. queue; every other is MQRFH2."""
    device = mqtt.queue_for("device")
    for queue in ("Q1", device):
        api.qm.define_queue(queue)
        assert subscribe(api, topics=["Sport/#"], queue=queue).status_code == 201

    def queues(protocol: str) -> list[str]:
        return [s["queue"] for s in api.get(SUBS, "viewer", params={"protocol": protocol}).json()["items"]]

    assert (queues("mqtt"), queues("mqrfh2")) == ([device], ["Q1"])
    assert_problem(api.get(SUBS, params={"protocol": "amqp"}), 422)


def test_delete_deregisters_through_the_broker(api: Api, router: ServiceThread) -> None:
    api.qm.define_queue("SCORES")
    api.qm.define_queue("BOBS")
    mine = subscribe(api, topics=["Sport/#"], correl_id="01" * 24).json()["subscriptions"][0]
    assert (mine["correl_id"], mine["options"]) == ("01" * 24, ["CorrelAsId"])
    bobs = subscribe(api, topics=["News"], queue="BOBS", user_id="bob").json()["subscriptions"][0]

    assert api.delete(f"{SUBS}/{mine['id']}", "operator").status_code == 204
    assert_problem(api.get(f"{SUBS}/{mine['id']}"), 404)
    assert_problem(api.delete(f"{SUBS}/{bobs['id']}", "operator"), 409, "MQRCCF_WRONG_USER")
    assert api.delete(f"{SUBS}/{bobs['id']}", "operator", params={"user_id": "bob"}).status_code == 204
    assert api.get(SUBS).json()["items"] == []
    assert_problem(api.delete(f"{SUBS}/{bobs['id']}"), 404)
