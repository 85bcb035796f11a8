"""Retained publications over HTTP: listed and decoded from the store, deleted by the broker."""

from __future__ import annotations

import base64

from broker.client import BrokerClient
from broker.core.authority import Permission
from broker.protocol.options import PubOpt
from tests.admin_api.conftest import Api, assert_problem
from tests.admin_api.test_subscriptions import deny
from tests.e2e.harness import ServiceThread

RETAINED = "/api/v1/retained"


def retain(api: Api, topic: str, body: str | bytes, **kwargs: object) -> None:
    with BrokerClient(api.qm, user_id="pub") as client:
        response = client.publish(topic, body, options=PubOpt.RetainPub, **kwargs)  # type: ignore[arg-type]
        assert response is not None and response.ok, response


def test_list_by_pattern_and_page(api: Api, router: ServiceThread) -> None:
    for topic in ("Sport/Soccer", "Sport/Tennis", "News/World"):
        retain(api, topic, f"on {topic}")
    page = api.get(RETAINED, "viewer", params={"pattern": "Sport/#"}).json()
    assert [(r["topic"], r["body_text"], r["body_length"]) for r in page["items"]] == [
        ("Sport/Soccer", "on Sport/Soccer", 15),
        ("Sport/Tennis", "on Sport/Tennis", 15),
    ]
    first = api.get(RETAINED, params={"limit": 2}).json()
    rest = api.get(RETAINED, params={"limit": 2, "after": first["next_after"]}).json()
    assert [r["topic"] for r in first["items"] + rest["items"]] == [
        "Sport/Soccer",
        "Sport/Tennis",
        "News/World",
    ]
    assert rest["next_after"] is None
    assert api.get(RETAINED, params={"sub_point": "Pounds"}).json()["items"] == []


def test_show_decodes_topics_body_folders_and_descriptor(api: Api, router: ServiceThread) -> None:
    retain(
        api,
        "Sport/Soccer",
        b"\x00\x01",
        pub_time="20260101120000",
        folders=["<usr><Match>Team1 v Team2</Match></usr>"],
        expiry=6000,
    )
    (listed,) = api.get(RETAINED).json()["items"]
    shown = api.get(f"{RETAINED}/{listed['id']}", "viewer").json()
    assert {k: shown[k] for k in ("topic", "topics", "sub_point", "pub_time", "body_text", "folders")} == {
        "topic": "Sport/Soccer",
        "topics": ["Sport/Soccer"],
        "sub_point": "",
        "pub_time": "20260101120000",
        "body_text": None,
        "folders": ["<usr><Match>Team1 v Team2</Match></usr>"],
    }
    assert base64.b64decode(shown["body_base64"]) == b"\x00\x01"
    assert (shown["mqmd"]["format"], shown["mqmd"]["user_id"]) == ("MQHRF2", "pub")
    # The retained copy keeps what was left of the Publish's 600 s when the broker took it.
    assert 590_000 <= shown["expires_at"] - shown["retained_at"] <= 600_000
    assert_problem(api.get(f"{RETAINED}/{listed['id'] + 1}"), 404)


def test_delete_is_a_deletepub_with_the_callers_authority(api: Api, router: ServiceThread) -> None:
    retain(api, "Sport/Soccer", "1-0")
    retain(api, "Secret/Plans", "x")
    soccer, secret = api.get(RETAINED).json()["items"]
    deny(api.qm, "otto", "Secret", Permission.PUBLISH)

    assert_problem(api.delete(f"{RETAINED}/{secret['id']}", "operator"), 403, "MQRCCF_NOT_AUTHORIZED")
    assert api.delete(f"{RETAINED}/{soccer['id']}", "operator").status_code == 204
    assert [r["topic"] for r in api.get(RETAINED).json()["items"]] == ["Secret/Plans"]
    assert (
        api.delete(f"{RETAINED}/{secret['id']}", params={"user_id": "pub", "local": True}).status_code == 204
    )
    assert api.get(RETAINED).json()["items"] == []
    assert_problem(api.delete(f"{RETAINED}/{secret['id']}"), 404)
