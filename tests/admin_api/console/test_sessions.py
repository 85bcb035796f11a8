"""Signing in and out of the console, its cookie, CSRF checks and security headers, through
FastAPI's TestClient on both dialects."""

from __future__ import annotations

import re

import pytest

from admin_api.console.pages import CSP
from admin_api.console.sessions import COOKIE, CSRF_HEADER, csrf_token
from broker.admin import accounts
from tests.admin_api.conftest import Api

PAGES = (
    "/console/",
    "/console/overview/live",
    "/console/queues",
    "/console/queues/SYSTEM.DEAD.LETTER.QUEUE",
    "/console/dead-letters",
    "/console/subscriptions",
    "/console/topics",
    "/console/topics/children?under=A",
    "/console/network",
    "/console/security",
)


def sign_in(api: Api, role: str) -> None:
    response = api.client.post("/console/signin", data={"token": api.secrets[role]}, follow_redirects=False)
    assert response.status_code == 303, response.text


@pytest.mark.parametrize("page", PAGES)
def test_every_page_sends_a_stranger_to_the_sign_in_page(api: Api, page: str) -> None:
    response = api.client.get(page, follow_redirects=False)
    assert (response.status_code, response.headers["location"]) == (303, "/console/signin")
    htmx = api.client.get(page, headers={"HX-Request": "true"}, follow_redirects=False)
    assert (htmx.status_code, htmx.headers["HX-Redirect"]) == (401, "/console/signin")


def test_the_root_leads_to_the_console_and_a_bad_token_signs_nobody_in(api: Api) -> None:
    assert api.client.get("/", follow_redirects=False).headers["location"] == "/console/"
    refused = api.client.post("/console/signin", data={"token": "mqa_wrong"}, follow_redirects=False)
    assert refused.status_code == 401
    assert "set-cookie" not in refused.headers
    assert "unknown or revoked" in refused.text


def test_the_session_cookie_is_http_only_strict_and_never_in_a_url(api: Api) -> None:
    response = api.client.post(
        "/console/signin", data={"token": api.secrets["viewer"]}, follow_redirects=False
    )
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}={api.secrets['viewer']};")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert api.secrets["viewer"] not in response.headers["location"]
    page = api.client.get("/console/")
    assert page.status_code == 200
    assert api.secrets["viewer"] not in page.text  # the page holds the CSRF token, not the secret
    assert csrf_token(api.secrets["viewer"]) in page.text


@pytest.mark.parametrize("page", PAGES)
def test_pages_forbid_inline_script_and_style(api: Api, page: str) -> None:
    sign_in(api, "admin")
    response = api.client.get(page)
    assert response.status_code == 200, response.text
    assert response.headers["content-security-policy"] == CSP
    assert "unsafe-inline" not in CSP and "script-src 'self'" in CSP and "style-src 'self'" in CSP
    assert response.headers["x-content-type-options"] == "nosniff"
    html = response.text
    assert re.search(r"<script(?![^>]*\bsrc=)", html) is None  # every script is a file
    assert re.search(r"\son[a-z]+\s*=", html) is None  # no event handler attributes
    assert re.search(r"\sstyle\s*=|<style", html) is None


def test_a_change_needs_the_csrf_token_of_the_session(api: Api) -> None:
    sign_in(api, "operator")
    api.qm.define_queue("APP.Q")
    purge = "/console/queues/APP.Q/purge"
    assert api.client.post(purge, follow_redirects=False).status_code == 403
    assert api.client.post(purge, data={"csrf": "0" * 64}, follow_redirects=False).status_code == 403
    other = csrf_token(api.secrets["admin"])  # a real token, of another session
    assert api.client.post(purge, data={"csrf": other}, follow_redirects=False).status_code == 403
    good = csrf_token(api.secrets["operator"])
    assert api.client.post(purge, data={"csrf": good}, follow_redirects=False).status_code == 303
    by_header = api.client.post(purge, headers={CSRF_HEADER: good}, follow_redirects=False)
    assert by_header.status_code == 303


def test_a_viewer_sees_no_write_control_and_cannot_change_anything(api: Api) -> None:
    sign_in(api, "viewer")
    api.qm.define_queue("APP.Q")
    for page in ("/console/queues", "/console/queues/APP.Q", "/console/security"):
        html = api.client.get(page).text
        assert 'method="post"' not in html.split("</header>", 1)[1]
    assert api.client.get("/console/queues/APP.Q/purge").status_code == 403
    viewer_csrf = csrf_token(api.secrets["viewer"])
    refused = api.client.post("/console/queues/APP.Q/delete", data={"csrf": viewer_csrf})
    assert refused.status_code == 403
    assert "needs the operator role" in refused.text
    assert api.qm.inquire_queue("APP.Q").name == "APP.Q"


def test_changes_are_audited_as_the_signed_in_token(api: Api) -> None:
    sign_in(api, "operator")
    api.client.post("/console/queues", data={"name": "AUDITED", "csrf": csrf_token(api.secrets["operator"])})
    with api.qm.reading() as conn:
        entry = accounts.list_audit(conn, limit=1)[0]
    assert (entry.principal, entry.method, entry.path, entry.status) == (
        "otto",
        "POST",
        "/console/queues",
        303,
    )
    assert entry.summary["queue"] == "AUDITED"


def test_revoking_the_token_ends_the_session_and_sign_out_forgets_it(api: Api) -> None:
    sign_in(api, "operator")
    assert api.client.get("/console/", follow_redirects=False).status_code == 200
    out = api.client.post(
        "/console/signout", data={"csrf": csrf_token(api.secrets["operator"])}, follow_redirects=False
    )
    assert out.headers["location"] == "/console/signin"
    assert f'{COOKIE}=""' in out.headers["set-cookie"] and "Max-Age=0" in out.headers["set-cookie"]
    assert api.client.get("/console/", follow_redirects=False).status_code == 303
    sign_in(api, "operator")
    with api.qm.unit_of_work() as uow, api.qm.reading() as conn:
        token = accounts.authenticate(conn, api.secrets["operator"])
        assert token is not None
        accounts.revoke_token(uow.connection, token.token_id)
    assert api.client.get("/console/", follow_redirects=False).headers["location"] == "/console/signin"


def test_the_console_is_not_part_of_the_api_document(api: Api) -> None:
    paths = api.get("/openapi.json").json()["paths"]
    assert not [path for path in paths if not path.startswith(("/api/v1/", "/health", "/ready", "/metrics"))]


def test_posts_from_another_site_are_refused(api: Api) -> None:
    elsewhere = {"Origin": "https://evil.example"}
    planted = api.client.post("/console/signin", data={"token": api.secrets["admin"]}, headers=elsewhere)
    assert planted.status_code == 403 and "set-cookie" not in planted.headers
    sign_in(api, "operator")
    api.qm.define_queue("APP.Q")
    good = {"csrf": csrf_token(api.secrets["operator"])}
    refused = api.client.post("/console/queues/APP.Q/purge", data=good, headers=elsewhere)
    assert refused.status_code == 403 and "not from this console" in refused.text
    same = api.client.post("/console/queues/APP.Q/purge", data=good, headers={"Origin": "http://testserver"})
    assert same.status_code == 200 and "Purged 0 messages" in same.text
