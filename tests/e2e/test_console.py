"""The web console in a real browser (Chromium, headless, driven by Playwright) against a real
``broker serve --api`` on each database: what an operator does after the README's quick start.

An operator signs in, sees a publication on the overview and on the subscriber queue, reads its
topic in the decoded MQRFH2, purges the queue after confirming, retries the dead letter the full
queue caused and sees it delivered, and signs out; a viewer sees no write control, and a write
forged with the viewer's cookie is refused with or without a wrong CSRF token. The queue list shows
put and get rates as it refreshes itself. With ``broker serve --api --mqtt`` and real paho-mqtt
clients, the MQTT page disconnects one (its will is published) and deletes another's session. The
SQLite runs also save the screenshots of the pages that docs/operations.md and the README show.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from admin_api.console.sessions import csrf_token
from broker.client import BrokerClient
from broker.protocol.options import PubOpt
from broker.store import mqtt
from queues import DEAD_LETTER_QUEUE, Message
from queues.ids import now_ms
from tests.broker.service.mqtt.clients import PASSWORD, Paho, stays_down
from tests.e2e.processes import BROKER, Brokers, child_environment, free_port, wait_until

CHROMIUM = "/usr/bin/chromium"  # the system's: Playwright's own browsers are never downloaded
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "console"
TIMEOUT_MS = 20_000  # the routers publish their counters every few seconds; the machine is shared
expect.set_options(timeout=TIMEOUT_MS)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield launched
        launched.close()


def token(url: str, role: str, principal: str) -> str:
    created = subprocess.run(
        [str(BROKER), "--db", url, "token", "create", "--role", role, "--principal", principal, "--json"],
        capture_output=True,
        text=True,
        env=child_environment(),
        check=True,
    )
    return str(json.loads(created.stdout)["token"])


def sign_in(page: Page, base: str, secret: str) -> None:
    page.goto(f"{base}/")
    expect(page).to_have_url(re.compile(r"/console/signin$"))
    page.fill("input[name=token]", secret)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_contain_text("Overview")


def shot(page: Page, name: str, keep: bool) -> None:
    if keep:
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def test_an_operator_and_a_viewer_use_the_console(
    brokers: Brokers, database_url: str, browser: Browser
) -> None:
    keep = database_url.startswith("sqlite")
    port = free_port()
    brokers.start(api_port=port)
    base = f"http://127.0.0.1:{port}"
    operator = token(database_url, "operator", "otto")
    viewer = token(database_url, "viewer", "vera")
    qm = brokers.qm
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {operator}"}, timeout=30) as api:
        wait_until(lambda: api.get("/api/v1/status").json()["routers"] != [], 30, "the router's report")
        qm.define_queue("SCORES", max_depth=1)
        made = api.post("/api/v1/subscriptions", json={"topics": ["Sport/#"], "queue": "SCORES"})
        assert made.status_code == 201, made.text

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(TIMEOUT_MS)
    blocked: list[str] = []  # what the Content-Security-Policy refused: the pages need none of it
    page.on(
        "console",
        lambda message: blocked.append(message.text) if "Content Security" in message.text else None,
    )
    sign_in(page, base, operator)
    cookie = next(c for c in page.context.cookies() if c["name"] == "broker_console")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["value"] == operator

    # A publication: the overview's totals and the subscriber queue's depth follow, without a reload.
    with BrokerClient(qm, timeout=30) as client:
        assert client.publish(["Sport/Soccer"], "1-0").completion == "ok"
    expect(page.locator("[data-rate=publications] + .total")).to_have_text("total 1")
    expect(page.locator("#depths [data-queue=SCORES]")).to_have_text("1")
    expect(page.locator("figure.chart[data-series=publications] canvas")).to_have_count(1)
    shot(page, "overview", keep)

    # Put and get rates: the list samples the queues' counters as its rows refresh themselves.
    qm.define_queue("TICKS")
    page.click("nav >> text=Queues")
    expect(page.locator("tr[data-queue=SCORES] .depth")).to_have_text("1")
    qm.put_many([("TICKS", Message(body=b"tick")) for _ in range(40)])
    qm.get("TICKS")
    expect(page.locator("tr[data-queue=TICKS] .put-rate")).to_have_text(re.compile(r"^[1-9][0-9.]*$"))
    expect(page.locator("tr[data-queue=TICKS] .get-rate")).not_to_have_text(re.compile(r"^(0\.0)?$"))
    expect(page.locator("tr[data-queue=TICKS] .depth")).to_have_text("39")
    shot(page, "queues", keep)
    page.click("tr[data-queue=SCORES] >> text=SCORES")
    expect(page.locator("article.message .command")).to_have_text("Publish")
    expect(page.locator("article.message .topics")).to_have_text("Sport/Soccer")
    expect(page.locator("article.message pre.body")).to_have_text("1-0")
    shot(page, "browse", keep)

    # The queue is full now: the next delivery is dead-lettered (MQRC_Q_FULL, bound for SCORES).
    with BrokerClient(qm, timeout=30) as client:
        assert client.publish(["Sport/Tennis"], "6-4", options=PubOpt.RetainPub).completion == "ok"
    wait_until(lambda: qm.depth(DEAD_LETTER_QUEUE) == 1, 30, "the dead letter of the full queue")

    page.click("text=Purge")
    expect(page.locator("h1")).to_contain_text("Purge queue SCORES?")
    page.click("button:has-text('Yes, purge SCORES')")
    expect(page.locator(".note")).to_contain_text("Purged 1 messages from SCORES")
    expect(page.locator("#depth")).to_have_text("0")

    page.click("nav >> text=Dead letters")
    expect(page.locator("td.destination")).to_have_text("SCORES at QM1")
    expect(page.locator(".reason")).to_have_text("q full")
    shot(page, "dead-letters", keep)
    page.check("input.select-all")
    page.click("button:has-text('Retry selected')")
    expect(page.locator(".note")).to_contain_text("Retried 1 of 1 dead letters")
    assert qm.depth(DEAD_LETTER_QUEUE) == 0
    page.goto(f"{base}/console/queues/SCORES")
    expect(page.locator("article.message .topics")).to_have_text("Sport/Tennis")

    for name, path in (("subscriptions", "subscriptions"), ("network", "network"), ("security", "security")):
        page.goto(f"{base}/console/{path}")
        shot(page, name, keep)
    page.goto(f"{base}/console/topics")
    expect(page.locator("li[data-topic=Sport] .counts").first).to_have_text("0 here, 1 below")
    page.click("li[data-topic=Sport] summary")
    expect(page.locator("li[data-topic='Sport/Tennis'] .retained")).to_contain_text("6-4")
    expect(page.locator("li[data-topic='Sport/#'] .counts")).to_have_text("1 here")
    shot(page, "topics", keep)
    assert blocked == []

    page.click("button:has-text('Sign out')")
    expect(page).to_have_url(re.compile(r"/console/signin$"))
    page.goto(f"{base}/console/queues")
    expect(page).to_have_url(re.compile(r"/console/signin$"))

    # A viewer: every page, no write control; a write forged with its cookie is refused.
    sign_in(page, base, viewer)
    page.goto(f"{base}/console/queues")
    expect(page.locator("tr[data-queue=SCORES]")).to_have_count(1)
    for path in ("queues", "queues/SCORES", "dead-letters", "subscriptions", "topics", "security"):
        page.goto(f"{base}/console/{path}")
        expect(page.locator("main form[method=post]")).to_have_count(0)
        expect(page.locator("main a.button, main input[name=msg_id], main details form")).to_have_count(0)
    depth = qm.depth("SCORES")
    for sent in ({}, {"csrf": "0" * 64}, {"csrf": csrf_token(viewer)}):  # the last: its role refuses
        forged = page.request.post(f"{base}/console/queues/SCORES/purge", form=sent)
        assert forged.status == 403, forged.text()
    assert qm.depth("SCORES") == depth == 1
    page.close()


def test_an_operator_disconnects_mqtt_clients_and_deletes_a_session(
    brokers: Brokers, database_url: str, browser: Browser
) -> None:
    """A real ``broker serve --api --mqtt`` and real paho-mqtt clients: the MQTT page lists them,
    its buttons disconnect one (its will is published) and delete another's session; the
    subscriptions page tells MQTT subscriptions apart; a viewer has no buttons and is refused."""
    keep = database_url.startswith("sqlite")
    port, mqtt_port = free_port(), free_port()
    brokers.start(api_port=port, mqtt_port=mqtt_port)
    base = f"http://127.0.0.1:{port}"
    with brokers.qm.unit_of_work() as uow:
        mqtt.set_password(uow.connection, "alice", PASSWORD.encode(), now_ms())
    operator = token(database_url, "operator", "otto")
    viewer = token(database_url, "viewer", "vera")
    watcher = Paho(mqtt_port, "watcher")
    watcher.connect()
    watcher.subscribe(("wills/#", 1))
    tablet = Paho(mqtt_port, "tablet", will=("wills/tablet", b"cut off", 1, False))
    tablet_gone = stays_down(tablet)
    tablet.connect()
    meter = Paho(mqtt_port, "meter-7", clean=False, will=("wills/meter-7", b"cut off", 1, False))
    meter_gone = stays_down(meter)
    meter.connect()
    meter.subscribe(("tariff/#", 1))

    page = browser.new_page(viewport={"width": 1280, "height": 700})
    page.set_default_timeout(TIMEOUT_MS)
    blocked: list[str] = []
    page.on(
        "console",
        lambda message: blocked.append(message.text) if "Content Security" in message.text else None,
    )
    sign_in(page, base, operator)
    expect(page.locator("#mqtt-clients")).to_contain_text("3 connected, 3 sessions")
    page.click("nav >> text=MQTT")
    expect(page.locator("tr[data-client=meter-7] .state")).to_have_text("connected")
    expect(page.locator("tr[data-client=tablet] .state")).to_have_text("connected, clean")
    shot(page, "mqtt", keep)

    page.click("tr[data-client=tablet] >> button:has-text('Disconnect')")
    expect(page.locator(".note")).to_contain_text("Disconnect of MQTT client tablet requested")
    assert tablet_gone.wait(10)
    assert watcher.receive(1)[0].payload == b"cut off"

    def tablet_ended() -> bool:  # after its socket closes and its will goes: a clean session ends with it
        with brokers.qm.unit_of_work() as uow:
            return mqtt.find_session(uow.connection, "tablet") is None

    wait_until(tablet_ended, 10, "the clean session of tablet to end")
    page.reload()
    expect(page.locator("tr[data-client=tablet]")).to_have_count(0)

    page.goto(f"{base}/console/subscriptions")
    page.select_option("select[name=protocol]", "mqtt")
    page.click("button:has-text('Filter')")
    rows = page.locator("#subscriptions tbody tr")
    expect(rows).to_have_count(2)
    expect(rows).to_contain_text(["wills/#", "tariff/#"])
    page.select_option("select[name=protocol]", "mqrfh2")
    page.click("button:has-text('Filter')")
    expect(rows).to_have_text("No subscription matches.")

    page.goto(f"{base}/console/mqtt")
    page.click("tr[data-client=meter-7] >> text=Delete session")
    expect(page.locator("h1")).to_contain_text("Delete the MQTT session of meter-7?")
    page.click("button:has-text('Yes, delete the session of meter-7')")
    expect(page.locator(".note")).to_contain_text("MQTT session meter-7 deleted")
    expect(page.locator("tr[data-client=meter-7]")).to_have_count(0)
    assert meter_gone.is_set() and watcher.receive(1)[0].topic == "wills/meter-7"
    assert Paho(mqtt_port, "meter-7", clean=False).connect() == (0, False)  # nothing of it is left

    page.click("button:has-text('Sign out')")
    sign_in(page, base, viewer)
    page.goto(f"{base}/console/mqtt")
    expect(page.locator("tr[data-client=watcher]")).to_have_count(1)
    expect(page.locator("main form[method=post], main a.button")).to_have_count(0)
    forged = page.request.post(
        f"{base}/console/mqtt/clients/watcher/disconnect", form={"csrf": csrf_token(viewer)}
    )
    assert forged.status == 403, forged.text()
    assert blocked == []
    watcher.close()
    page.close()
