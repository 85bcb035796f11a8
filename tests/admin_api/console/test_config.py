"""The console's Configuration page (both dialects): admins only; the export downloaded; an upload
dry-run first, its report and a confirmation that applies it; a bad file's problems listed with
nothing changed; the upload's CSRF token checked as every form's."""

from __future__ import annotations

import html
import re

import httpx
import pytest

from admin_api.console.config import multipart_fields
from admin_api.console.sessions import csrf_token
from tests.admin_api.console.conftest import Console

NOTE = re.compile(r'<p class="note[^"]*"[^>]*>(.*?)</p>', re.S)
ITEMS = re.compile(r"<li[^>]*>(.*?)</li>")


def upload(console: Console, text: bytes, *, csrf: str | None = None, **fields: str) -> httpx.Response:
    token = csrf if csrf is not None else csrf_token(console.api.secrets[console.role])
    files = {"file": ("broker.toml", text, "application/toml")}
    return console.api.client.post("/console/config/dry-run", data={"csrf": token, **fields}, files=files)


@pytest.fixture
def admin(console: Console) -> Console:
    return console.sign_in("admin")


def test_only_admins_see_the_page_and_its_link(console: Console) -> None:
    assert 'href="/console/config"' not in console.get("/console/queues").text
    for path in ("/console/config", "/console/config/export"):
        refused = console.get(path)
        assert refused.status_code == 403 and "needs the admin role" in refused.text
    assert upload(console, b"").status_code == 403
    console.sign_in("admin")
    assert 'href="/console/config"' in console.get("/console/queues").text
    page = console.get("/console/config")
    assert page.status_code == 200 and "<h1>Configuration</h1>" in page.text


def test_the_export_downloads_as_a_file(admin: Console) -> None:
    admin.api.qm.define_queue("APP.IN")
    download = admin.get("/console/config/export", params={"secrets": "true"})
    assert download.headers["content-disposition"] == 'attachment; filename="QM1-config.toml"'
    assert download.headers["cache-control"] == "no-store"
    assert '[[queue]]\nname = "APP.IN"' in download.text and "secrets = true" in download.text
    assert admin.get("/console/config/export", params={"retained": "maybe"}).status_code == 400


def test_an_upload_is_dry_run_then_applied_after_the_confirmation(admin: Console) -> None:
    text = admin.get("/console/config/export").text.replace(
        "[[system_queue]]", _QUEUE + "[[system_queue]]", 1
    )
    page = upload(admin, text.encode())
    assert page.status_code == 200
    assert ITEMS.findall(page.text) == ["create queue APP.NEW"]
    assert admin.api.qm.list_queues("APP.*") == []  # the dry run changed nothing
    carried = re.search(r'name="configuration" value="([^"]*)"', page.text)
    assert carried is not None and html.unescape(carried.group(1)) == text
    done = admin.post("/console/config/import", configuration=html.unescape(carried.group(1)))
    assert NOTE.findall(done.text) == ["Imported 1 change: create queue APP.NEW"]
    assert admin.api.qm.inquire_queue("APP.NEW").max_depth == 42
    again = upload(admin, text.encode())
    assert "No changes: the broker already has what the file says." in again.text
    assert 'action="/console/config/import"' not in again.text


def test_pruning_is_asked_for_and_its_deletions_are_shown_as_dangerous(admin: Console) -> None:
    admin.api.qm.define_queue("APP.OLD")
    left = upload(admin, b"")
    assert ITEMS.findall(left.text) == ["leave queue APP.OLD: not in the file"]
    pruned = upload(admin, b"", prune="on")
    assert ITEMS.findall(pruned.text) == ["delete queue APP.OLD"]
    assert 'class="danger">Apply these 1 change<' in pruned.text.replace("\n", "")
    assert '<input type="hidden" name="prune" value="on">' in pruned.text
    assert NOTE.findall(admin.post("/console/config/import", configuration="", prune="on").text) == [
        "Imported 1 change: delete queue APP.OLD"
    ]
    assert admin.api.qm.list_queues("APP.*") == []


def test_a_bad_file_lists_every_problem_and_changes_nothing(admin: Console) -> None:
    page = upload(admin, b'[[queue]]\nname = "A B"\ncolour = 1\n' + _QUEUE.encode())
    assert page.status_code == 409
    assert [html.unescape(item) for item in ITEMS.findall(page.text)] == [
        "line 2: queue 1 (A B): name: 'A B' is not a queue name: use 1-48 characters of A-Z a-z 0-9 . / _ %, "
        "not . or ..",
        "line 3: queue 1 (A B): colour: unknown key (the keys are name, description, max_depth, "
        "max_msg_length, "
        "backout_threshold, backout_requeue_q, def_priority, def_persistence, put_enabled, get_enabled, "
        "usage, "
        "definition_type, index_type)",
    ]
    assert "2 problems. Nothing was changed." in page.text
    assert admin.api.qm.list_queues("APP.*") == []
    assert ITEMS.findall(upload(admin, b"\xff").text) == ["the file is not UTF-8 text"]
    refused = admin.post("/console/config/import", configuration="[[queue]\n")
    assert NOTE.findall(refused.text)[0].startswith(
        "Refused: MQRCCF_ATTR_VALUE_ERROR (4005): 1 problem: not TOML"
    )


def test_an_upload_without_the_console_s_csrf_token_is_refused(admin: Console) -> None:
    for token in ("", "0" * 64):
        refused = upload(admin, _QUEUE.encode(), csrf=token)
        assert refused.status_code == 403 and "CSRF" in refused.text
    assert admin.api.client.post("/console/config/dry-run", data={"csrf": "x"}).status_code == 403
    assert admin.api.qm.list_queues("APP.*") == []


def test_multipart_fields_are_read_by_name_and_nothing_else_is() -> None:
    request = httpx.Request(
        "POST",
        "http://console/",
        data={"csrf": "abc"},
        files={"file": ("c.toml", "é = 1\r\n".encode(), "text/plain")},
    )
    found = multipart_fields(request.headers["content-type"], request.read())
    assert found == {"csrf": b"abc", "file": "é = 1\r\n".encode()}
    assert multipart_fields("application/x-www-form-urlencoded", b"csrf=abc") == {}


_QUEUE = '[[queue]]\nname = "APP.NEW"\nmax_depth = 42\n\n'
