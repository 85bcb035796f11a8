"""The console's network, security, tokens and audit pages in Chromium against a real
``broker serve --api --mqtt`` on each database, signed in as an admin: what the page shows after
each step, and what the database then holds.

A neighbour is added (nothing answers at its URL, so the cycle check is skipped), altered, its
channel stopped (messages put for it stay on its transmission queue: the running broker honours
the stop) and started (the broker's channel agent then takes them and retries against the
neighbour that is not there), and removed after a confirmation page; a rule is added and the
effective permission check names it; a token is created, its secret shown once, used, and
revoked after a confirmation page; the audit log is filtered down to those token changes.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import httpx
from playwright.sync_api import Page, expect

from broker import store
from broker.admin import accounts
from broker.core.effects import Put
from broker.core.neighbours import transmission
from broker.network import links
from queues import Message, QueueManager, UnknownObject
from tests.e2e.processes import Brokers, free_port, wait_until
from tests.e2e.test_console import browser  # noqa: F401 (the browser fixture)
from tests.e2e.test_console_pages import console  # noqa: F401 (signed in as admin ada)

TOKEN = "link-token-e2e-console-0123456789"
NEW_TOKEN = "link-token-e2e-altered-0123456789"


def link(qm: QueueManager) -> links.Link | None:
    with qm.reading() as conn:
        return links.get_link(conn, "QMB")


def note(page: Page) -> str:
    return page.locator("p.note").inner_text()


def test_an_admin_runs_the_network_security_token_and_audit_pages(
    console: tuple[Page, str, list[str]],  # noqa: F811
    brokers: Brokers,
) -> None:
    page, base, errors = console
    qm = brokers.qm
    nowhere, moved = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"

    # Network: add a neighbour.
    page.goto(base + "/console/network")
    form = page.locator("#add-neighbour")
    form.locator("input[name=name]").fill("QMB")
    form.locator("input[name=url]").fill(nowhere)
    form.locator("input[name=token]").fill(TOKEN)
    form.locator("input[name=skip_check]").check()
    form.locator("button[type=submit]").click()
    expect(page.locator("p.note")).to_have_text("Neighbour QMB added")
    expect(page.locator("tr[data-neighbour=QMB] .state")).to_contain_text("running")
    added = link(qm)
    assert added is not None and (added.url, added.token, added.stopped) == (nowhere, TOKEN, False)
    assert qm.inquire_queue("QMB").usage == "xmitq"

    # Alter its URL and token, on its own page.
    page.click("tr[data-neighbour=QMB] >> a >> text=QMB")
    expect(page.locator("h1")).to_have_text("Neighbour QMB")
    page.click("summary >> text=Alter")
    page.fill("form.alter input[name=url]", moved)
    page.fill("form.alter input[name=token]", NEW_TOKEN)
    page.click("form.alter button[type=submit]")
    expect(page.locator("p.note")).to_have_text("Neighbour QMB altered; change the token on its side too")
    expect(page.locator("dd.url")).to_have_text(moved)
    altered = link(qm)
    assert altered is not None and (altered.url, altered.token) == (moved, NEW_TOKEN)
    assert NEW_TOKEN not in page.content()

    # Stop the channel: what is put for the neighbour stays on its transmission queue.
    page.click("button >> text=Stop channel")
    expect(page.locator("p.note")).to_have_text("Channel to QMB stopped: 0 messages wait for it")
    expect(page.locator("dd.state")).to_contain_text("stopped since")
    stopped = link(qm)
    assert stopped is not None and stopped.stopped
    qm.put_many(transmission(Put("APP.IN", Message(f"m{n}".encode()), "QMB")) for n in range(2))
    page.wait_for_timeout(3000)  # the broker's channel agent looks every second
    page.reload()
    expect(page.locator("dd.backlog")).to_have_text("2")
    with qm.reading() as conn:
        assert links.outbox_depth(conn) == {}
    assert qm.depth("QMB") == 2

    # Start it: the broker's agent takes the messages and tries the neighbour, which is not there.
    page.click("button >> text=Start channel")
    expect(page.locator("p.note")).to_have_text("Channel to QMB started: it sends the 2 messages waiting")
    started = link(qm)
    assert started is not None and not started.stopped

    def tried() -> bool:
        current = link(qm)
        with qm.reading() as conn:
            flying = links.outbox_depth(conn).get("QMB", 0)
        return current is not None and current.last_error is not None and flying == 2

    wait_until(tried, 30, "the started channel to take the messages and try to send them")
    page.reload()
    expect(page.locator("dd.state")).to_have_text(re.compile(r"^retrying"))
    expect(page.locator("dd.error")).to_contain_text("QMB unreachable")

    # Remove it, after the confirmation page, discarding what waits for it.
    page.click("a.button >> text=Remove")
    expect(page.locator("h1")).to_have_text("Remove neighbour QMB?")
    assert link(qm) is not None  # asking changes nothing
    page.check("form.confirm input[name=purge]")
    page.click("button >> text=Yes, remove QMB")
    expect(page.locator("p.note")).to_have_text("Neighbour QMB removed")
    expect(page.locator("#neighbours")).to_contain_text("No neighbours are defined.")
    assert link(qm) is None
    try:
        qm.inquire_queue("QMB")
        raise AssertionError("the transmission queue is still defined")
    except UnknownObject:
        pass

    # Security: a rule, and the effective permission it decides.
    page.goto(base + "/console/security")
    rule = page.locator("form.define").first
    rule.locator("input[name=principal]").fill("alice")
    rule.locator("input[name=topic]").fill("Sport/Tennis")
    rule.locator("select[name=allow]").select_option("deny")
    rule.locator("button[type=submit]").click()
    expect(page.locator("p.note")).to_have_text("Rule 1 added")
    page.fill("#check input[name=user]", "alice")
    page.select_option("#check select[name=permission]", "publish")
    page.fill("#check input[name=topic]", "Sport/Tennis/Final")
    page.click("#check button[type=submit]")
    expect(page.locator("#verdict")).to_contain_text(
        "alice may not publish on Sport/Tennis/Final: decided by rule #1 "
        "(deny publish on Sport/Tennis for user alice)"
    )
    expect(page.locator("tr.decided")).to_have_attribute("data-rule", "1")
    with qm.reading() as conn:
        rules = store.list_acl_rules(conn)
    assert [(r.rule_id, r.principal, r.pattern, r.allow) for r in rules] == [
        (1, "alice", "Sport/Tennis", False)
    ]

    # Tokens: create one, see its secret once, use it, revoke it after the confirmation page.
    page.click("nav >> text=Tokens")
    page.select_option("#create-token select[name=role]", "operator")
    page.fill("#create-token input[name=principal]", "deploy")
    page.click("#create-token button[type=submit]")
    expect(page.locator("h1")).to_have_text(re.compile(r"^Token \d+ created$"))
    secret = page.locator("#secret").inner_text()
    with qm.reading() as conn:
        issued = accounts.authenticate(conn, secret)
    assert issued is not None and (str(issued.role), issued.principal) == ("operator", "deploy")
    api = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {secret}"}, timeout=30)
    with api:
        assert api.get("/api/v1/queues").status_code == 200
        page.click("text=Back to the tokens")
        row = page.locator(f"tr[data-token='{issued.token_id}']")
        expect(row).to_contain_text("deploy")
        assert secret not in page.content()
        row.locator("a >> text=Revoke").click()
        expect(page.locator("h1")).to_have_text(f"Revoke token {issued.token_id}?")
        page.click(f"button >> text=Yes, revoke token {issued.token_id}")
        expect(page.locator("p.note")).to_contain_text(f"Token {issued.token_id} revoked")
        expect(row.locator(".revoked")).not_to_be_empty()
        assert api.get("/api/v1/queues").status_code == 401
    with qm.reading() as conn:
        assert accounts.get_token(conn, issued.token_id).revoked_at is not None  # type: ignore[union-attr]

    # Audit log: filtered down to the token changes, as the database holds them.
    page.click("nav >> text=Audit log")
    page.fill("#audit-filters input[name=principal]", "ada")
    page.fill("#audit-filters input[name=action]", "tokens")
    page.click("#audit-filters button[type=submit]")
    expect(page.locator("#audit tbody tr")).to_have_count(2)
    paths = page.locator("#audit .path").all_inner_texts()
    assert paths == [f"/console/tokens/{issued.token_id}/revoke", "/console/tokens"]
    with qm.reading() as conn:
        logged = accounts.list_audit(conn, where=accounts.AuditFilter(principal="ada", action="tokens"))
    assert [e.path for e in logged] == paths
    assert [e.summary.get("role") for e in logged] == [None, "operator"]
    assert secret not in page.content()
    later = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S")
    page.fill("#audit-filters input[name=since]", later)
    page.click("#audit-filters button[type=submit]")
    expect(page.locator("#audit tbody")).to_have_text("No entry matches.")
    assert errors == []
