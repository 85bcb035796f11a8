"""The audit log page (admin only, both dialects): newest first, 50 a page, filtered by
principal, method, action and a UTC time range, as ``GET /api/v1/audit`` filters."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from sqlalchemy import update

from broker.admin.schema import api_audit
from tests.admin_api.console.conftest import Console


def shown(page: str) -> list[tuple[str, str, str]]:
    """(principal, method, path) of each entry the page shows, top down."""
    cells = r'<td class="principal">([^<]*)</td><td>[^<]*</td>'
    cells += r'<td class="method">([^<]*)</td><td class="path">([^<]*)</td>'
    rows = re.findall(cells, page)
    return [tuple(row) for row in rows]


def moment(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


@pytest.fixture
def history(console: Console) -> Console:
    """Four changes by two principals, dated 2026-01-01 10:00, 11:00, 12:00 and 13:00 UTC."""
    api = console.api
    api.post("/api/v1/queues", "operator", json={"name": "SCORES"})
    api.post("/api/v1/queues", json={"name": "TICKS"})
    api.delete("/api/v1/queues/TICKS")
    api.post("/api/v1/tokens", json={"role": "viewer", "principal": "bot"})
    with api.qm.engine.begin() as conn:
        for entry_id in range(1, 5):
            at = moment(f"2026-01-01T{9 + entry_id}:00:00")
            conn.execute(update(api_audit).where(api_audit.c.id == entry_id).values(at=at))
    console.sign_in("admin")
    return console


def test_the_log_newest_first_with_who_what_and_how_it_ended(history: Console) -> None:
    page = history.get("/console/audit").text
    assert shown(page) == [
        ("ada", "POST", "/api/v1/tokens"),
        ("ada", "DELETE", "/api/v1/queues/TICKS"),
        ("ada", "POST", "/api/v1/queues"),
        ("otto", "POST", "/api/v1/queues"),
    ]
    assert '<tr data-entry="4"><td>4</td><td>2026-01-01 13:00:00</td>' in page
    assert '<td class="num status">201</td>' in page
    assert '"principal": "bot"' in page  # the summary, as the API gives it


def test_filters_narrow_the_entries(history: Console) -> None:
    def filtered(**params: str) -> list[tuple[str, str, str]]:
        page = history.get("/console/audit", params=params)
        assert page.status_code == 200, page.text
        return shown(page.text)

    assert filtered(principal="otto") == [("otto", "POST", "/api/v1/queues")]
    assert filtered(principal="ada", method="POST") == [
        ("ada", "POST", "/api/v1/tokens"),
        ("ada", "POST", "/api/v1/queues"),
    ]
    assert filtered(action="ticks") == [("ada", "DELETE", "/api/v1/queues/TICKS")]
    assert filtered(since="2026-01-01T11:00", until="2026-01-01T12:30:00") == [
        ("ada", "DELETE", "/api/v1/queues/TICKS"),
        ("ada", "POST", "/api/v1/queues"),
    ]
    assert filtered(principal="nobody") == []
    kept = history.get("/console/audit", params={"principal": "ada", "method": "DELETE"}).text
    assert 'value="ada"' in kept and "<option selected>DELETE</option>" in kept  # the form keeps them
    assert "No entry matches" in history.get("/console/audit", params={"until": "2025-12-31T00:00"}).text


def test_the_log_pages_backwards_keeping_the_filters(history: Console) -> None:
    with history.api.qm.engine.begin() as conn:
        conn.execute(update(api_audit).values(principal="ada"))
    for n in range(60):
        history.api.post("/api/v1/queues", json={"name": f"Q{n}"})
    first = history.get("/console/audit", params={"principal": "ada"}).text
    assert len(shown(first)) == 50
    older = re.search(r'<a rel="next" href="(/console/audit\?principal=ada&amp;before=\d+)">Older</a>', first)
    assert older is not None
    second = history.get(older.group(1).replace("&amp;", "&")).text
    assert len(shown(second)) == 64 - 50  # the 4 changes, all ada's now, and 60 queues
    assert shown(second)[-1] == ("ada", "POST", "/api/v1/queues")
    assert 'href="/console/audit?principal=ada">Newest</a>' in second and "Older" not in second


def test_only_admins_read_the_log(console: Console) -> None:
    for role in ("viewer", "operator"):
        console.sign_in(role)
        refused = console.get("/console/audit")
        assert refused.status_code == 403 and "needs the admin role" in refused.text


@pytest.mark.parametrize(
    "params",
    [
        {"since": "2026-02-30T10:00"},
        {"until": "yesterday"},
        {"method": "post"},
        {"action": "\x00"},
        {"before": "-1"},
    ],
)
def test_a_filter_edited_by_hand_is_a_400_page(history: Console, params: dict[str, str]) -> None:
    answer = history.get("/console/audit", params=params)
    assert answer.status_code == 400 and "Not a console address" in answer.text
    assert next(iter(params)) in answer.text
