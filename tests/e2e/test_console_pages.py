"""Every page of the web console in Chromium against a real ``broker serve --api --mqtt`` on each
database: no script error and no console error on any page (the queue pages, the charts, the
forms' patterns included); the define form's name pattern is one the browser compiles, so it
checks names before they are sent; the rate charts' time axis shows today, not another year;
Purge is styled as the dangerous action Delete is; and the tables fit a phone's 375 px."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from html import escape as html_escape
from html import unescape as html_unescape

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Route, expect

from tests.broker.service.mqtt.clients import MqttBroker
from tests.e2e.processes import Brokers, free_port
from tests.e2e.test_console import browser, shot, sign_in, token  # noqa: F401 (the browser fixture)

RATES = re.compile(r"data-rates='([^']*)'")
PAGES = (
    "/console/",
    "/console/queues",
    "/console/queues?sort=-depth",
    "/console/queues/SYSTEM.BROKER.DEFAULT.STREAM",
    "/console/queues/SYSTEM.DEAD.LETTER.QUEUE",
    "/console/subscriptions",
    "/console/topics",
    "/console/publish",
    "/console/dead-letters",
    "/console/mqtt",
    "/console/mqtt/principals",
    "/console/network",
    "/console/security",
    "/console/security?user=alice&permission=publish&topic=Sport%2FTennis",
    "/console/tokens",
    "/console/audit",
    "/console/config",
)


@pytest.fixture
def console(brokers: Brokers, database_url: str, browser: Browser) -> Iterator[tuple[Page, str, list[str]]]:  # noqa: F811
    port = free_port()
    MqttBroker(brokers, api_port=port)
    base = f"http://127.0.0.1:{port}"
    admin = token(database_url, "admin", "ada")
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(f"{page.url}: {error}"))

    def logged(message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            errors.append(f"{page.url}: {message.type}: {message.text}")

    page.on("console", logged)
    sign_in(page, base, admin)
    yield page, base, errors
    page.close()


# The pages whose pictures docs/operations.md shows beside test_console.py's, saved by the SQLite run.
PICTURED = {
    "/console/publish": "publish",
    "/console/tokens": "tokens",
    "/console/audit": "audit",
    "/console/config": "config",
    "/console/mqtt/principals": "mqtt-principals",
}


def test_no_page_has_a_script_or_console_error(
    console: tuple[Page, str, list[str]], database_url: str
) -> None:
    page, base, errors = console
    for path in PAGES:
        page.goto(base + path)
        expect(page.locator("h1").first).to_be_visible()
        page.wait_for_timeout(300)  # the scripts run after the page has loaded
        if path in PICTURED:
            shot(page, PICTURED[path], database_url.startswith("sqlite"))
    assert errors == []


def test_the_define_form_checks_a_queue_name_in_the_browser(console: tuple[Page, str, list[str]]) -> None:
    page, base, errors = console
    page.goto(base + "/console/queues")
    name = page.locator("form input[name=name]")
    name.fill("NOT A NAME")
    assert name.evaluate("input => input.checkValidity()") is False
    name.fill("APP.ORDERS/EU")
    assert name.evaluate("input => input.checkValidity()") is True
    assert errors == []


@pytest.mark.parametrize("points", [0, 1, 2])
def test_the_rate_charts_show_today_however_few_samples_there_are(
    console: tuple[Page, str, list[str]], points: int
) -> None:
    """A fresh broker's overview has no sample yet, or one: the time axis still shows the last
    minute, not a span of years."""
    page, base, errors = console

    def fewer(route: Route) -> None:
        response = route.fetch()
        html = response.text()
        series = json.loads(html_unescape(RATES.search(html).group(1)))  # type: ignore[union-attr]
        kept = {name: values[-points:] if points else [] for name, values in series.items()}
        replaced = RATES.sub(lambda _: f"data-rates='{html_escape(json.dumps(kept))}'", html)
        route.fulfill(response=response, body=replaced)

    page.route(base + "/console/", fewer)
    page.goto(base + "/console/")
    chart = page.locator("figure.chart[data-from]").first
    expect(chart).to_be_visible()
    now = time.time()
    shown = float(chart.get_attribute("data-from") or 0), float(chart.get_attribute("data-to") or 0)
    assert now - 3600 < shown[0] <= shown[1] < now + 60, (now, shown)  # within the last hour
    assert errors == []


def test_purge_is_styled_as_dangerous_as_delete(console: tuple[Page, str, list[str]]) -> None:
    page, base, _ = console
    page.goto(base + "/console/queues/SYSTEM.DEAD.LETTER.QUEUE")
    purge = page.get_by_role("link", name="Purge").or_(page.get_by_role("button", name="Purge")).first
    delete = page.get_by_role("link", name="Delete").or_(page.get_by_role("button", name="Delete")).first
    colour = "element => getComputedStyle(element).color + ' ' + getComputedStyle(element).backgroundColor"
    assert purge.evaluate(colour) == delete.evaluate(colour)


def test_the_tables_fit_a_phone(console: tuple[Page, str, list[str]]) -> None:
    page, base, _ = console
    page.set_viewport_size({"width": 375, "height": 800})
    for path in ("/console/queues", "/console/subscriptions", "/console/mqtt", "/console/dead-letters"):
        page.goto(base + path)
        wide = page.evaluate("document.documentElement.scrollWidth")
        assert wide <= 375, (path, wide)
