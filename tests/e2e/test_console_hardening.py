"""What another page of the host, an odd queue name or the API's own pages do to the console, in
Chromium against a real ``broker serve --api`` on each database.

A page served on another port of the same host sets the console's note cookie (a browser sends a
host's cookies to all its ports): the console never shows it, while its own refusals show in the
error style. Queues named with dots and slashes are reached through the console's links (``.`` and
``..``, which a browser takes for steps up the path, cannot be defined). ``/docs`` runs Swagger UI
under the console's Content-Security-Policy.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.e2e.processes import Brokers, free_port
from tests.e2e.test_console import CHROMIUM, TIMEOUT_MS, sign_in, token

PLANTED = "Your token has expired. Paste it at http://127.0.0.1:9999/renew"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield launched
        launched.close()


class Planter(BaseHTTPRequestHandler):
    """Another site of the host: it sets the console's note cookie, as any page may."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Set-Cookie", f"broker_console_note={quote(PLANTED)}; Path=/console")
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(b"<!doctype html><title>elsewhere</title><p>nothing to see</p>")

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def elsewhere() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Planter)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def console_page(browser: Browser) -> tuple[Page, list[str]]:
    """A page that records what the Content-Security-Policy refused."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(TIMEOUT_MS)
    blocked: list[str] = []
    page.on("console", lambda m: blocked.append(m.text) if "Content Security" in m.text else None)
    return page, blocked


def test_a_note_planted_from_another_port_is_not_shown(
    brokers: Brokers, database_url: str, browser: Browser, elsewhere: str
) -> None:
    port = free_port()
    brokers.start(api_port=port)
    base = f"http://127.0.0.1:{port}"
    page, blocked = console_page(browser)
    page.goto(elsewhere)
    page.goto(f"{base}/console/signin")
    expect(page.locator("h1")).to_have_text("Sign in")
    expect(page.locator(".note")).to_have_count(0)
    sign_in(page, base, token(database_url, "operator", "otto"))
    page.goto(elsewhere)
    planted = page.context.cookies(f"{base}/console/queues")
    assert any(c["name"] == "broker_console_note" for c in planted)  # the console's port gets it too
    page.goto(f"{base}/console/queues")
    expect(page.locator("h1")).to_have_text("Queues")
    expect(page.locator(".note")).to_have_count(0)

    page.fill("form.define input[name=name]", "APP.Q")
    page.click("form.define button[type=submit]")
    expect(page.locator(".note")).to_have_text("Queue APP.Q defined")
    expect(page.locator(".note")).to_have_attribute("role", "status")
    page.fill("form.define input[name=name]", "APP.Q")
    page.click("form.define button[type=submit]")
    refused = page.locator(".note.refused")
    expect(refused).to_contain_text("Refused: MQRCCF_OBJECT_ALREADY_EXISTS")
    expect(refused).to_have_attribute("role", "alert")
    expect(refused).to_have_css("color", "rgb(185, 28, 28)")  # --danger
    assert blocked == []
    page.close()


def test_queue_names_of_dots_and_slashes_are_reached_through_their_links(
    brokers: Brokers, database_url: str, browser: Browser
) -> None:
    port = free_port()
    brokers.start(api_port=port)
    base = f"http://127.0.0.1:{port}"
    page, blocked = console_page(browser)
    sign_in(page, base, token(database_url, "operator", "otto"))
    page.goto(f"{base}/console/queues")
    page.fill("form.define input[name=name]", "..")
    page.click("form.define button[type=submit]")
    expect(page.locator(".note.refused")).to_contain_text("Refused: name")
    names = ("...", "A/..", "./A", "%2E%2E", "A/%2e%2e")
    for name in names:
        brokers.qm.define_queue(name)
    for name in names:
        page.goto(f"{base}/console/queues")
        page.locator(f'tr[data-queue="{name}"] td a').first.click()
        expect(page.locator("h1")).to_have_text(f"Queue {name}")
    assert blocked == []
    page.close()


def test_the_api_docs_run_under_the_consoles_policy(brokers: Brokers, browser: Browser) -> None:
    port = free_port()
    brokers.start(api_port=port)
    page, blocked = console_page(browser)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"http://127.0.0.1:{port}/docs")
    expect(page.locator(".opblock-summary-path").first).to_have_text("/health")
    page.locator(".opblock-summary").first.click()
    page.click("button:has-text('Try it out')")
    page.click("button:has-text('Execute')")
    expect(page.locator(".live-responses-table tr.response td.response-col_status").first).to_have_text("200")
    assert (blocked, errors) == ([], [])
    page.close()
