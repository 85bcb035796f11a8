"""The console's MQTT pages in Chromium against a real ``broker serve --api --mqtt`` on each
database, as an operator used to MQ Explorer, RabbitMQ's management UI or EMQX's dashboard uses
them: a paho-mqtt client with keepalive 30 and a subscription is listed with its protocol
version, keepalive and the bytes its listener counted; its own page shows its subscription; an
admin adds a principal, sets its password (a paho-mqtt client then logs in with the new one,
not the old), and removes it after a confirmation (and then nobody logs in as it)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, expect

from tests.broker.service.mqtt.clients import MqttBroker, Paho
from tests.e2e.processes import Brokers, free_port, wait_until
from tests.e2e.test_console import TIMEOUT_MS, browser, sign_in, token  # noqa: F401 (the browser fixture)

BAD_CREDENTIALS = 134  # paho's name for CONNACK return code 4


@pytest.fixture
def console(brokers: Brokers, database_url: str, browser: Browser) -> Iterator[tuple[Page, str, MqttBroker]]:  # noqa: F811
    """An admin signed in to the console of a broker serving MQTT; no script or console error."""
    port = free_port()
    broker = MqttBroker(brokers, api_port=port)
    base = f"http://127.0.0.1:{port}"
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(f"{page.url}: {error}"))

    def logged(message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            errors.append(f"{page.url}: {message.type}: {message.text}")

    page.on("console", logged)
    sign_in(page, base, token(database_url, "admin", "ada"))
    yield page, base, broker
    page.close()
    assert errors == []


def logs_in(broker: MqttBroker, user: str, password: str) -> int:
    """The CONNACK a paho-mqtt client logging in as ``user`` gets (0: accepted)."""
    client = Paho(broker.port, f"login-{user}", user=user, password=password)
    code, _ = client.connect()
    if code:
        client.client.loop_stop()  # refused: paho would try again on its own
    else:
        client.close()
    return code


def test_a_client_is_listed_with_its_version_keepalive_bytes_and_subscription(
    console: tuple[Page, str, MqttBroker],
) -> None:
    page, base, broker = console
    meter = Paho(broker.port, "meter/7", clean=False, keepalive=30)
    assert meter.connect() == (0, False)
    assert meter.subscribe(("tariff/#", 1)) == [1]

    page.click("nav >> text=MQTT")
    row = page.locator('tr[data-client="meter/7"]')
    expect(row.locator(".state")).to_have_text("connected")
    expect(row.locator(".version")).to_have_text("3.1.1")
    expect(row.locator(".keepalive")).to_have_text("30 s")

    def counted() -> bool:  # the listener writes each connection's bytes every 5 seconds
        page.reload()
        return "0" not in (row.locator(".bytes-in").inner_text(), row.locator(".bytes-out").inner_text())

    wait_until(counted, 20, "the client's bytes on the MQTT page")
    expect(row.locator(".bytes-in")).to_have_text(re.compile(r"^[1-9][0-9,]*$"))
    expect(row.locator(".bytes-out")).to_have_text(re.compile(r"^[1-9][0-9,]*$"))

    row.locator("a", has_text="meter/7").click()
    expect(page.locator("h1")).to_have_text("MQTT client meter/7")
    expect(page).to_have_url(f"{base}/console/mqtt/clients/meter%2F7")
    expect(page.locator("dd.version")).to_have_text("MQTT 3.1.1")
    expect(page.locator("dd.keepalive")).to_have_text("30 s")
    expect(page.locator("dd.queued")).to_contain_text("0 on its queue")
    expect(page.locator('#mqtt-subscriptions tr[data-filter="tariff/#"] .qos')).to_have_text("1")
    expect(page.locator("main button:has-text('Disconnect')")).to_have_count(1)
    meter.close()


def test_an_admin_adds_a_principal_sets_its_password_and_removes_it(
    console: tuple[Page, str, MqttBroker],
) -> None:
    page, base, broker = console
    page.goto(f"{base}/console/mqtt")
    page.click("text=MQTT principals")
    expect(page.locator("h1")).to_have_text("MQTT principals")
    add = page.locator("#add-principal")
    add.locator("input[name=user]").fill("sensor1")
    add.locator("input[name=password]").fill("first secret")
    add.locator("input[name=again]").fill("first secret")
    add.locator("button").click()
    expect(page.locator(".note")).to_have_text("MQTT principal sensor1 added")
    assert logs_in(broker, "sensor1", "first secret") == 0

    row = page.locator("tr[data-user=sensor1]")
    row.locator("input[name=password]").fill("second secret")
    row.locator("input[name=again]").fill("second secret")
    row.locator("button:has-text('Set password')").click()
    expect(page.locator(".note")).to_contain_text("Password of MQTT principal sensor1 set")
    assert "second secret" not in page.content()
    assert logs_in(broker, "sensor1", "second secret") == 0
    assert logs_in(broker, "sensor1", "first secret") == BAD_CREDENTIALS

    page.locator("tr[data-user=sensor1] >> text=Remove").click()
    expect(page.locator("h1")).to_have_text("Remove the MQTT principal sensor1?")
    page.click("button:has-text('Yes, remove sensor1')")
    expect(page.locator(".note")).to_have_text("MQTT principal sensor1 removed")
    expect(page.locator("tr[data-user=sensor1]")).to_have_count(0)
    assert logs_in(broker, "sensor1", "second secret") == BAD_CREDENTIALS
