"""The note after a change: sealed for its session, shown once, refusals in the error style; a
note another page of the host planted is never shown (both dialects for the pages)."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from admin_api.console.notes import COOKIE, MAX_TEXT, Note, opened, refusal, seal
from tests.admin_api.console.conftest import Console

SECRET = "mqa_" + "s" * 43
PLANTED = "Your token has expired. Paste it at http://127.0.0.1:9999/renew"


@given(st.text(max_size=400), st.booleans())
def test_a_sealed_note_opens_with_its_session_only(text: str, refused: bool) -> None:
    value = seal(SECRET, Note(text, refused))
    assert opened(SECRET, value) == Note(text[:MAX_TEXT], refused)
    assert opened(SECRET + "x", value) is None
    assert value.isascii() and ";" not in value and "," not in value and " " not in value


@pytest.mark.parametrize(
    "value",
    [
        quote(PLANTED),  # as an unsealed note was stored
        "",
        "done",
        "done..",
        "refused.00.x",
        "done.é.x",
        seal(SECRET, Note("Queue Q defined")).replace("done.", "refused.", 1),  # its kind changed
        seal(SECRET, Note("Queue Q defined"))[:-1] + "X",  # its text changed
    ],
)
def test_anything_else_does_not_open(value: str) -> None:
    assert opened(SECRET, value) is None


def test_a_refusal_says_so() -> None:
    assert refusal("MQRC_Q_FULL (2053)") == Note("Refused: MQRC_Q_FULL (2053)", refused=True)


def test_a_note_planted_by_another_page_of_the_host_is_not_shown(console: Console) -> None:
    other = seal(console.api.secrets["admin"], Note(PLANTED))  # sealed, but for another session
    for value in (quote(PLANTED), other):
        for page in ("/console/queues", "/console/signin"):
            console.api.client.cookies.set(COOKIE, value, path="/console")
            response = console.get(page)
            assert response.status_code == 200
            assert "Your token has expired" not in response.text
            assert 'class="note' not in response.text
            assert f'{COOKIE}=""' in response.headers["set-cookie"]  # and it is gone


def test_a_change_is_noted_once_and_a_refusal_in_the_error_style(console: Console) -> None:
    done = console.post("/console/queues", name="APP.Q")
    assert '<p class="note" role="status">Queue APP.Q defined</p>' in done.text
    assert "Queue APP.Q defined" not in console.get("/console/queues").text  # once
    refused = console.post("/console/queues", name="APP.Q")
    assert '<p class="note refused" role="alert">Refused: MQRCCF_OBJECT_ALREADY_EXISTS' in refused.text
