"""Subscriptions and the topic tree in the console, against a routing service (both dialects)."""

from __future__ import annotations

import re

from broker.admin import accounts
from broker.client import BrokerClient
from broker.core.effects import AddSubscription
from broker.store import mqtt
from tests.admin_api.conftest import Api
from tests.admin_api.console.conftest import Console
from tests.admin_api.test_retained import retain
from tests.broker.store.records import Process, sub
from tests.e2e.harness import ServiceThread


def subscribe(api: Api, topic: str, queue: str, **fields: object) -> int:
    made = api.post("/api/v1/subscriptions", "operator", json={"topics": [topic], "queue": queue, **fields})
    assert made.status_code == 201, made.text
    return int(made.json()["subscriptions"][0]["id"])


def test_filter_and_deregister(console: Console, router: ServiceThread) -> None:
    api = console.api
    for queue in ("Q1", "Q2"):
        api.qm.define_queue(queue)
    soccer = subscribe(api, "Sport/Soccer", "Q1")
    subscribe(api, "News/Today", "Q2")
    html = console.get("/console/subscriptions", params={"topic": "Sport/#"}).text
    assert '<td class="topic">Sport/Soccer</td>' in html and "News/Today" not in html
    assert "News/Today" in console.get("/console/subscriptions", params={"queue": "Q2"}).text
    assert "No subscription matches" in console.get("/console/subscriptions", params={"origin": "proxy"}).text
    mqtt_only = console.get("/console/subscriptions", params={"protocol": "mqtt"}).text
    assert "No subscription matches" in mqtt_only
    by_protocol = console.get("/console/subscriptions", params={"protocol": "mqrfh2"}).text
    assert "Sport/Soccer" in by_protocol and '<option value="mqrfh2" selected>' in by_protocol
    back = "/console/subscriptions?queue=Q1"
    listed = console.get(back).text
    asking = f"/console/subscriptions/{soccer}/deregister?back=%2Fconsole%2Fsubscriptions%3Fqueue%3DQ1"
    assert f'href="{asking}"' in listed
    confirm = console.get(asking).text  # asking changes nothing
    assert (
        f"Deregister subscription {soccer}?" in confirm
        and f"Yes, deregister subscription {soccer}" in confirm
    )
    assert f'<input type="hidden" name="back" value="{back}">' in confirm
    assert len(api.get("/api/v1/subscriptions").json()["items"]) == 2
    done = console.post(f"/console/subscriptions/{soccer}/deregister", back=back)
    assert f"Subscription {soccer} deregistered" in done.text
    assert str(done.url).endswith(back)
    outside = console.post(f"/console/subscriptions/{soccer}/deregister", back="//elsewhere.example/")
    assert str(outside.url).endswith("/console/subscriptions") and "Refused: Not Found" in outside.text
    gone = console.get(f"/console/subscriptions/{soccer}/deregister")
    assert str(gone.url).endswith("/console/subscriptions") and "is not registered" in gone.text


def test_each_subscription_shows_its_names_its_mqtt_client_and_links_its_queue(
    console: Console, router: ServiceThread
) -> None:
    api = console.api
    device = mqtt.queue_for("sensor/1")
    for queue in ("Q1", device):
        api.qm.define_queue(queue)
    with api.qm.unit_of_work() as uow:
        session = mqtt.StoredSession("sensor/1", device, "alice", False, 4, "10.0.0.5:4711", 1, 1)
        mqtt.save_session(uow.connection, session)
    named = subscribe(
        api,
        "Sport/#",
        "Q1",
        sub_name="scores",
        sub_identity="app-7",
        sub_user_data="for the scoreboard",
        join_shared=True,
    )
    with BrokerClient(api.qm, timeout=30) as client:
        assert client.subscribe("Sensors/#", device, user_id="sensor1").completion == "ok"
    html = console.get("/console/subscriptions").text
    row = re.search(rf'<tr data-subscription="{named}">.*?</tr>', html, re.S)
    assert row is not None
    for cell in (
        '<td class="sub-name">scores</td>',
        '<td class="sub-identity">app-7</td>',
        '<td class="user-data">for the scoreboard</td>',
        '<td class="client"></td>',
        '<td class="queue"><a href="/console/queues/Q1">Q1</a></td>',
    ):
        assert cell in row.group(0)
    device_row = re.search(
        r'<tr data-subscription="\d+">\s*<td>\d+</td><td class="topic">Sensors/#</td>.*?</tr>', html, re.S
    )
    assert device_row is not None and '<td class="client">sensor/1</td>' in device_row.group(0)
    assert f'<a href="/console/queues/{device}">{device}</a>' in device_row.group(0)


def test_the_tree_counts_subscriptions_and_shows_and_deletes_retained(
    console: Console, router: ServiceThread
) -> None:
    api = console.api
    api.qm.define_queue("Q1")
    subscribe(api, "Sport/#", "Q1")
    subscribe(api, "Sport/Soccer", "Q1")
    retain(api, "Sport/Soccer", "1-0")
    root = console.get("/console/topics").text
    assert re.search(
        r'<span class="level-name">Sport</span> <span class="counts"[^>]*>0 here, 2 below</span>', root
    )
    level = console.get("/console/topics/children", params={"under": "Sport"}).text
    assert '<li data-topic="Sport/Soccer">' in level and "<code>1-0</code>" in level
    assert re.search(r"retained [0-9]+ s ago: <code>1-0</code>", level)
    assert re.search(r'<span class="level-name">Soccer</span> <span class="counts"[^>]*>1 here</span>', level)
    assert '<li data-topic="Sport/#">' in level
    retained_id = api.get("/api/v1/retained").json()["items"][0]["id"]
    deleted = console.post(f"/console/retained/{retained_id}/delete", back="/console/topics")
    assert f"Retained publication {retained_id} deleted" in deleted.text
    assert api.get("/api/v1/retained").json()["items"] == []


def test_an_operator_deregisters_the_subscriptions_of_every_user(
    console: Console, router: ServiceThread
) -> None:
    """Those of the CLI's user, of an MQTT device, of another token: the console acts as the
    broker's administrator, as a forced queue delete does."""
    api = console.api
    device = mqtt.queue_for("sensor-1")
    for queue in ("Q1", "Q2", device):
        api.qm.define_queue(queue)
    with BrokerClient(api.qm, timeout=30) as client:
        for topic, queue, user in (("Sport/#", "Q1", "root"), ("Sensors/#", device, "sensor1")):
            assert client.subscribe(topic, queue, user_id=user).completion == "ok"
    admins = subscribe(api, "News/#", "Q2")  # by the admin token's principal, ada
    for listed in api.get("/api/v1/subscriptions").json()["items"]:
        done = console.post(
            f"/console/subscriptions/{listed['id']}/deregister", back="/console/subscriptions"
        )
        assert f"Subscription {listed['id']} deregistered" in done.text, done.text
        assert '<p class="note" role="status">' in done.text
    assert api.get("/api/v1/subscriptions").json()["items"] == []
    with api.qm.reading() as conn:
        entry = accounts.list_audit(conn, limit=1)[0]
    assert (entry.principal, entry.path) == ("otto", f"/console/subscriptions/{admins}/deregister")
    assert entry.summary["user_id"] == api.app.state.services.settings.admin_group


def test_proxy_subscriptions_have_no_deregister_button_and_are_refused(console: Console) -> None:
    """The network manages them: the neighbour that registered one removes it."""
    Process(console.api.qm.engine).write(
        AddSubscription(sub("Sport/#", "SYSTEM.BROKER.INTER.BROKER.COMMUNICATIONS", origin="QMB", seq=1))
    )
    proxy = console.api.get("/api/v1/subscriptions").json()["items"][0]
    assert proxy["origin"] == "QMB"
    for page in ("/console/subscriptions", "/console/network"):
        html = console.get(page).text
        assert "proxy from QMB" in html and "Deregister" not in html
    confirm = console.get(f"/console/subscriptions/{proxy['id']}/deregister").text
    assert "is a proxy subscription of neighbour QMB: the network manages it" in confirm
    assert "Yes, deregister" not in confirm
    refused = console.post(f"/console/subscriptions/{proxy['id']}/deregister")
    assert "Refused: subscription" in refused.text and "QMB" in refused.text
    assert len(console.api.get("/api/v1/subscriptions").json()["items"]) == 1
