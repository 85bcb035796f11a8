"""The console's queues, subscriptions and topic tree in Chromium against a real ``broker serve
--api --mqtt`` on each database: an operator defines a queue with every attribute and alters it
(the database holds what the forms sent), sorts the list by depth, reads each row's description,
depth sparkline and open handles, deregisters a subscription after confirming, and reads the topic
tree's subscriber counts and a retained publication's age."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from broker import store
from broker.client import BrokerClient
from broker.protocol.options import PubOpt
from broker.store import SubscriptionFilter
from queues import Message
from tests.broker.service.mqtt.clients import Paho
from tests.e2e.processes import Brokers
from tests.e2e.test_console import browser  # noqa: F401 (the browser fixture)
from tests.e2e.test_console_pages import console  # noqa: F401 (a signed-in page on a real server)

Console = tuple[Page, str, list[str]]

EVERY = {
    "description": "orders from the shop",
    "max_depth": "500",
    "max_msg_length": "65536",
    "backout_threshold": "3",
    "backout_requeue_q": "APP.BACKOUT",
    "def_priority": "4",
}
CHOSEN = {
    "def_persistence": "1",
    "put_enabled": "0",
    "get_enabled": "1",
    "usage": "xmitq",
    "definition_type": "permdyn",
    "index_type": "correlid",
}


def rows(page: Page) -> list[str]:
    return page.locator("#queue-rows tr").evaluate_all("rows => rows.map(row => row.dataset.queue)")


def test_an_operator_defines_alters_and_sorts_queues(console: Console, brokers: Brokers) -> None:  # noqa: F811
    page, base, errors = console
    qm = brokers.qm
    page.goto(f"{base}/console/queues")
    define = page.locator("form.define")
    define.locator("input[name=name]").fill("APP.ORDERS")
    for name, value in EVERY.items():
        define.locator(f"input[name={name}]").fill(value)
    for name, value in CHOSEN.items():
        define.locator(f"select[name={name}]").select_option(value)
    define.locator("button[type=submit]").click()
    expect(page.locator(".note")).to_have_text("Queue APP.ORDERS defined")
    queue = qm.inquire_queue("APP.ORDERS")
    assert (queue.description, queue.max_depth, queue.max_msg_length) == ("orders from the shop", 500, 65536)
    assert (queue.backout_threshold, queue.backout_requeue_q, queue.def_priority) == (3, "APP.BACKOUT", 4)
    assert (queue.def_persistence, queue.put_enabled, queue.get_enabled) == (1, False, True)
    assert (queue.usage, queue.definition_type, queue.index_type) == ("xmitq", "permdyn", "correlid")

    page.goto(f"{base}/console/queues/APP.ORDERS")
    expect(page.locator("dd[data-attribute=max_msg_length]")).to_have_text("65536")
    expect(page.locator("dd[data-attribute=usage]")).to_have_text("transmission")
    page.locator("details:has(form.alter) > summary").click()
    alter = page.locator("form.alter")
    alter.locator("input[name=max_depth]").fill("900")
    alter.locator("input[name=description]").fill("orders, EU")
    alter.locator("select[name=put_enabled]").select_option("1")
    alter.locator("select[name=usage]").select_option("normal")
    alter.locator("button[type=submit]").click()
    expect(page.locator(".note")).to_have_text(
        "Queue APP.ORDERS altered: description, max_depth, put_enabled, usage"
    )
    queue = qm.inquire_queue("APP.ORDERS")
    assert (queue.max_depth, queue.description, queue.put_enabled, queue.usage) == (
        900,
        "orders, EU",
        True,
        "normal",
    )
    assert (queue.index_type, queue.backout_requeue_q) == ("correlid", "APP.BACKOUT")  # left as they were

    qm.define_queue("APP.DEEP")
    qm.define_queue("APP.SOME")
    page.goto(f"{base}/console/queues?pattern=APP.*")
    assert rows(page) == ["APP.DEEP", "APP.ORDERS", "APP.SOME"]
    for name, depth in (("APP.DEEP", 5), ("APP.SOME", 2)):
        for n in range(depth):
            qm.put(name, Message(body=f"message {n}".encode()))
    page.click("th >> text=Depth")
    expect(page.locator("th[aria-sort=descending]")).to_contain_text("Depth")
    assert rows(page) == ["APP.DEEP", "APP.SOME", "APP.ORDERS"]
    page.click("th >> text=Depth")
    assert rows(page) == ["APP.ORDERS", "APP.SOME", "APP.DEEP"]
    expect(page.locator("tr[data-queue='APP.ORDERS'] .description")).to_have_text("orders, EU")
    # The rows refresh themselves: the sparkline gains the samples and keeps the sort.
    deep = page.locator("tr[data-queue='APP.DEEP'] svg.sparkline")
    expect(deep.locator("title")).to_have_text("depth over the last minute: now 5, lowest 0, highest 5")
    qm.put("APP.DEEP", Message(body=b"one more"))
    expect(deep.locator("title")).to_have_text(
        "depth over the last minute: now 6, lowest 0, highest 6", timeout=15_000
    )
    assert rows(page) == ["APP.ORDERS", "APP.SOME", "APP.DEEP"]

    # The router holds its stream open: the API would refuse the delete, so the button says why.
    page.goto(f"{base}/console/queues?pattern=SYSTEM.BROKER.*")
    stream = page.locator("tr[data-queue='SYSTEM.BROKER.DEFAULT.STREAM']")
    expect(stream.locator(".handles")).not_to_have_text("0")
    delete = stream.locator("button:has-text('Delete')")
    expect(delete).to_be_disabled()
    expect(delete).to_have_attribute("title", re.compile(r"MQRC_OBJECT_IN_USE .*routes from it"))
    expect(stream.locator("a:has-text('Purge')")).to_have_count(1)
    assert errors == []


def test_an_operator_reads_subscribers_and_the_topic_tree_and_deregisters(
    console: Console,  # noqa: F811
    brokers: Brokers,
) -> None:
    page, base, errors = console
    qm = brokers.qm
    qm.define_queue("SCORES")
    mqtt_port = brokers.processes[0].mqtt_port
    assert mqtt_port is not None
    meter = Paho(mqtt_port, "meter-9")
    assert meter.connect() == (0, False)
    assert meter.subscribe(("tariff/#", 1)) == [1]
    with BrokerClient(qm, timeout=30) as client:
        made = client.subscribe("Sport/Soccer", "SCORES", sub_name="scores", sub_user_data="the board")
        assert made.completion == "ok"
        published = client.publish(["Sport/Soccer"], "1-0", options=PubOpt.RetainPub)
        assert published is not None and published.completion == "ok"

    page.goto(f"{base}/console/topics")
    expect(page.locator("li[data-topic=Sport] .counts").first).to_have_text("0 here, 1 below")
    expect(page.locator("li[data-topic=tariff] .counts").first).to_have_text("0 here, 1 below")
    page.click("li[data-topic=Sport] summary")
    soccer = page.locator("li[data-topic='Sport/Soccer']")
    expect(soccer.locator(".counts")).to_have_text("1 here")
    expect(soccer.locator(".retained")).to_contain_text(re.compile(r"retained [0-9]+ s ago: 1-0"))

    page.goto(f"{base}/console/subscriptions")
    device = page.locator("#subscriptions tr", has_text="tariff/#")
    expect(device.locator(".client")).to_have_text("meter-9")
    scores = page.locator("#subscriptions tr", has_text="Sport/Soccer")
    expect(scores.locator(".sub-name")).to_have_text("scores")
    expect(scores.locator(".user-data")).to_have_text("the board")
    scores.locator("a:has-text('Deregister')").click()
    expect(page.locator("h1")).to_contain_text("Deregister subscription")
    with qm.reading() as conn:
        assert (
            store.list_subscriptions(conn, SubscriptionFilter(queue="SCORES")) != []
        )  # asking changed nothing
    page.click("button:has-text('Yes, deregister')")
    expect(page.locator(".note")).to_contain_text("deregistered")
    with qm.reading() as conn:
        assert store.list_subscriptions(conn, SubscriptionFilter(queue="SCORES")) == []
    expect(page.locator("#subscriptions tr", has_text="Sport/Soccer")).to_have_count(0)
    page.locator("#subscriptions tr", has_text="tariff/#").locator(".queue a").click()
    expect(page.locator("h1")).to_contain_text("Queue SYSTEM.MQTT.")
    expect(page.locator("#handles")).to_contain_text("MQTT client meter-9, connected")
    meter.close()
    assert errors == []
