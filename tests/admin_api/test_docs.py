"""The API's own pages and transport: ``/docs`` under the console's Content-Security-Policy, what
the README says is open without a token, and Strict-Transport-Security over HTTPS."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

from admin_api.console.pages import CSP
from tests.admin_api.conftest import Api

ROOT = Path(__file__).resolve().parents[2]
OPEN = ("/health", "/ready", "/openapi.json", "/docs")


def test_docs_carry_the_consoles_policy_and_run_no_inline_script(api: Api) -> None:
    page = api.get("/docs", None)
    assert page.status_code == 200
    assert page.headers["content-security-policy"] == CSP
    assert "frame-ancestors 'none'" in CSP and "unsafe-inline" not in CSP
    assert page.headers["x-content-type-options"] == "nosniff"
    assert re.search(r"<script(?![^>]*\bsrc=)", page.text) is None  # every script is a file
    assert re.search(r"\son[a-z]+\s*=|\sstyle\s*=|<style", page.text) is None
    scripts = re.findall(r'<script src="([^"]+)"', page.text)
    assert scripts[0] == "/static/swagger-ui/swagger-ui-bundle.js"
    for script in scripts:
        assert api.get(script, None).status_code == 200, script


def test_the_readme_names_every_path_that_needs_no_token(api: Api) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(r"Every endpoint except (.+?) needs a bearer token", readme, re.S)
    assert found is not None
    named = set(re.findall(r"`(/[a-z.]+)`", found.group(1)))
    assert named == set(OPEN)
    for path in OPEN:
        assert api.get(path, None).status_code == 200, path
    assert api.get("/api/v1/queues", None).status_code == 401
    assert "`/docs`" in api.app.description and "`/openapi.json`" in api.app.description


def test_https_responses_tell_browsers_to_stay_on_https(api: Api) -> None:
    with TestClient(api.app, base_url="https://testserver") as https:
        for path in ("/health", "/docs", "/console/signin", "/api/v1/queues"):
            assert https.get(path).headers["strict-transport-security"] == "max-age=31536000", path
    assert "strict-transport-security" not in api.get("/health", None).headers  # not over http
