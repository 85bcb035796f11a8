"""A browser MQTT client: MQTT.js (its browser bundle, ``assets/mqtt.min.js``) in Chromium,
headless, driven by Playwright, connected over WebSockets to a real ``broker serve --mqtt-ws``
on each database, talking with an MQRFH2 application (``broker.client.BrokerClient``) on the
same topic tree: what a web dashboard of the broker's publications does."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from broker.client import BrokerClient
from broker.protocol.options import PubOpt
from queues.message import MQPER_PERSISTENT
from tests.broker.service.mqtt.clients import PASSWORD, MqttBroker
from tests.e2e.processes import Brokers, free_port

CHROMIUM = "/usr/bin/chromium"  # the system's: Playwright's own browsers are never downloaded
MQTT_JS = Path(__file__).with_name("assets") / "mqtt.min.js"
TIMEOUT_MS = 20_000

# The page's client: connects, subscribes, and keeps what arrives in window.received.
CONNECT = """([url, username, password]) => new Promise((resolve, reject) => {
    window.received = [];
    const client = mqtt.connect(url, {username, password, clientId: "dashboard", reconnectPeriod: 0});
    window.client = client;
    client.on("message", (topic, payload, packet) => window.received.push(
        {topic, text: new TextDecoder().decode(payload), qos: packet.qos, retain: packet.retain}));
    client.on("error", reject);
    client.on("connect", () => client.subscribe("Scores/#", {qos: 1},
        (error, granted) => error ? reject(error) : resolve(granted.map((g) => g.qos))));
})"""
PUBLISH = """([topic, text]) => new Promise((resolve, reject) =>
    window.client.publish(topic, text, {qos: 1}, (error) => error ? reject(error) : resolve(true)))"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield launched
        launched.close()


def received(page: Page, count: int) -> list[dict[str, Any]]:
    page.wait_for_function(f"window.received.length >= {count}", timeout=TIMEOUT_MS)
    found: list[dict[str, Any]] = page.evaluate("window.received")
    return found


def test_mqtt_js_in_a_browser_and_an_mqrfh2_application_share_the_topic_tree(
    brokers: Brokers, browser: Browser
) -> None:
    ws = free_port()
    broker = MqttBroker(brokers, BROKER_MQTT_WS_LISTEN=f"127.0.0.1:{ws}")
    broker.qm.define_queue("REPLIES")
    with BrokerClient(broker.qm, user_id="scorer") as app:
        assert app.publish("Scores/Rome", b"2-1", options=PubOpt.RetainPub).ok
        assert app.subscribe("Scores/Replies/#", "REPLIES").ok
        page = browser.new_page()
        try:
            page.set_content("<!doctype html><title>dashboard</title>")
            page.add_script_tag(path=str(MQTT_JS))
            assert page.evaluate(CONNECT, [f"ws://127.0.0.1:{ws}/mqtt", "alice", PASSWORD]) == [1]
            retained = received(page, 1)[0]
            assert (retained["topic"], retained["text"], retained["retain"]) == ("Scores/Rome", "2-1", True)
            assert app.publish("Scores/Paris", b"0-0", persistence=MQPER_PERSISTENT).ok  # at QoS 1 granted
            assert received(page, 2)[1] == {"topic": "Scores/Paris", "text": "0-0", "qos": 1, "retain": False}
            assert page.evaluate(PUBLISH, ["Scores/Replies/alice", "seen"]) is True
            reply = app.receive("REPLIES", wait=10)
        finally:
            page.close()
    assert (reply.topic, reply.body) == ("Scores/Replies/alice", b"seen")
    users = {e["client_id"]: e["user"] for e in broker.process.lines("mqtt client connected")}
    assert users == {"dashboard": "alice"}
