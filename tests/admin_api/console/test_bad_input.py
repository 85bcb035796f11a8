"""Console addresses edited by hand: a 400 page in the console's style, never a 500 or the API's
JSON, and nothing in the server's log (both dialects: PostgreSQL refuses a NUL in text)."""

from __future__ import annotations

import logging

import pytest

from admin_api.console.pages import CSP
from tests.admin_api.conftest import assert_problem
from tests.admin_api.console.conftest import Console

PAGES = (
    "/console/dead-letters?after=abc",
    "/console/queues/SYSTEM.DEAD.LETTER.QUEUE?after=abc",
    "/console/queues/SYSTEM.DEAD.LETTER.QUEUE?after=1:9999999999999999999",
    "/console/subscriptions?after=abc",
    "/console/subscriptions?after=99999999999999999999",
    "/console/subscriptions?topic=%00",
    "/console/subscriptions?queue=%00",
    "/console/subscriptions?sub_point=%00",
    "/console/queues?live=maybe",
    "/console/queues?pattern=%00",
    "/console/queues?after=%00",
    "/console/queues/%00",
    "/console/mqtt?after=%00",
    "/console/topics/children",
    "/console/topics/children?under=%00",
)


@pytest.mark.parametrize("page", PAGES)
def test_a_bad_address_is_a_400_page(console: Console, page: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR):
        response = console.get(page)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["content-security-policy"] == CSP
    assert "<h1>Not a console address</h1>" in response.text
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


@pytest.mark.parametrize(
    ("path", "parameter"),
    [
        ("/console/subscriptions/{}/deregister", "subscription_id"),
        ("/console/retained/{}/delete", "retained_id"),
        ("/console/security/rules/{}/delete", "rule_id"),
    ],
)
def test_a_bad_id_in_a_change_is_a_400_page(console: Console, path: str, parameter: str) -> None:
    console.sign_in("admin")
    for bad in ("abc", "99999999999999999999"):
        response = console.post(path.format(bad))
        assert response.status_code == 400, response.text
        assert parameter in response.text


def test_strangers_still_sign_in_and_the_api_still_answers_with_problems(console: Console) -> None:
    console.api.client.cookies.clear()
    stranger = console.get("/console/dead-letters?after=abc", follow_redirects=False)
    assert (stranger.status_code, stranger.headers["location"]) == (303, "/console/signin")
    assert_problem(console.api.get("/api/v1/subscriptions?after=abc"), 422)
