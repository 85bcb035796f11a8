"""Publishing from the console: through the running broker as the signed-in principal, delivered,
retained, refused with the broker's reasons; viewers get no form (both dialects)."""

from __future__ import annotations

from broker import store
from broker.client import BrokerClient
from broker.core.authority import Permission
from tests.admin_api.console.conftest import Console
from tests.admin_api.console.test_messages import note
from tests.admin_api.test_subscriptions import deny
from tests.e2e.harness import ServiceThread, drain


def test_publish_reaches_subscribers_and_the_retained_store(console: Console, router: ServiceThread) -> None:
    qm = console.api.qm
    qm.define_queue("SCORES")
    with BrokerClient(qm) as client:
        assert client.subscribe("Sport/#", "SCORES").ok
    page = console.get("/console/publish").text
    assert '<form method="post" action="/console/publish" class="define publish">' in page
    assert 'href="/console/publish" class="current"' in page  # in the navigation
    done = console.post(
        "/console/publish",
        topic="Sport/Soccer",
        body="1-0\r\nfull time",
        retain="on",
        folder="<usr><Match>Team1 v Team2</Match></usr>\r\n",
    )
    assert str(done.url).endswith("/console/publish")
    assert note(done.text) == (False, "Published on Sport/Soccer (retained)")
    (delivered,) = drain(qm, "SCORES")
    assert (delivered.topic, delivered.text, delivered.folders) == (
        "Sport/Soccer",
        "1-0\nfull time",
        ("<usr><Match>Team1 v Team2</Match></usr>",),
    )
    with qm.reading() as conn:
        ((_, retained),) = store.list_retained(conn, "#", None, after_id=0, limit=10)
    assert (retained.topic, retained.message.user_id) == ("Sport/Soccer", "otto")
    assert note(console.post("/console/publish", topic="News", body="x").text) == (False, "Published on News")
    assert [p.topic for p in drain(qm, "SCORES")] == []  # not under Sport/#


def test_the_brokers_refusals_are_notes(console: Console, router: ServiceThread) -> None:
    deny(console.api.qm, "otto", "Secret", Permission.PUBLISH)
    for fields, why in (
        ({"topic": "Secret/Plans"}, "Refused: MQRCCF_NOT_AUTHORIZED (3081)"),
        ({"topic": "Sport/#"}, "Refused: MQRCCF_TOPIC_ERROR"),
        ({"topic": ""}, "Refused: topics.0: String should have at least 1 character"),
        ({"topic": "a", "folder": "<psc><Command>Publish</Command></psc>"}, "Refused: MQRC_RFH_PARM_ERROR"),
    ):
        refused, text = note(console.post("/console/publish", body="x", **fields).text)
        assert refused and text.startswith(why), text
    with console.api.qm.reading() as conn:
        assert store.list_retained(conn, "#", None, after_id=0, limit=10) == []


def test_a_viewer_sees_no_form_and_cannot_publish(console: Console, router: ServiceThread) -> None:
    console.sign_in("viewer")
    page = console.get("/console/publish").text
    assert "Publishing needs the operator role." in page and 'action="/console/publish"' not in page
    assert console.post("/console/publish", topic="a", body="x").status_code == 403
