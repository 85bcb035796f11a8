from __future__ import annotations

import re
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queues.errors import MQError
from queues.names import (
    DEAD_LETTER_QUEUE,
    MAX_NAME_LENGTH,
    NAME_PATTERN,
    check_qmgr_name,
    check_queue_name,
    is_valid_name,
)

# IBM's character set for object names, written out independently of the module.
ALLOWED = string.ascii_uppercase + string.ascii_lowercase + string.digits + "._/%"
VALID = [
    "A",
    "Q1",
    "SYSTEM.BROKER.DEFAULT.STREAM",
    "a/b_c%d.e",
    "9",
    "X" * 48,
    ALLOWED[:48],
    "...",
    ".A",
    "A.",
    "A/..",
    "./A",
]
INVALID = ["", "X" * 49, "MY QUEUE", "Q-1", "Q!", "Qé", "Q\n", "\tQ", "Q*", "Q?", "Q:1", "Q\x00", ".", ".."]
DOTS = {".", ".."}  # a browser takes them (and %2E, %2E%2E) for the path's own segments


def test_max_name_length_is_mqs():
    assert MAX_NAME_LENGTH == 48


@pytest.mark.parametrize("name", VALID)
def test_valid_names_are_accepted_and_returned_unchanged(name):
    assert is_valid_name(name) is True
    assert check_queue_name(name) == name
    assert check_qmgr_name(name) == name


@pytest.mark.parametrize("name", INVALID)
def test_invalid_queue_names_raise_2152(name):
    assert is_valid_name(name) is False
    with pytest.raises(MQError) as caught:
        check_queue_name(name)
    assert caught.value.reason == 2152
    assert caught.value.reason_name == "MQRC_OBJECT_NAME_ERROR"
    assert repr(name) in caught.value.detail


@pytest.mark.parametrize("name", INVALID)
def test_invalid_qmgr_names_raise_2058(name):
    with pytest.raises(MQError) as caught:
        check_qmgr_name(name)
    assert caught.value.reason == 2058
    assert caught.value.reason_name == "MQRC_Q_MGR_NAME_ERROR"


def test_dead_letter_queue_has_ibms_name():
    assert DEAD_LETTER_QUEUE == "SYSTEM.DEAD.LETTER.QUEUE"
    assert is_valid_name(DEAD_LETTER_QUEUE)


@given(st.text(alphabet=ALLOWED, min_size=1, max_size=48).filter(lambda name: name not in DOTS))
def test_any_name_of_allowed_characters_up_to_48_but_dots_is_valid(name):
    assert is_valid_name(name)


@given(st.text(alphabet=ALLOWED + " *", max_size=50))
def test_the_pattern_the_api_schemas_use_agrees(name):
    assert (re.fullmatch(NAME_PATTERN, name) is not None) == is_valid_name(name)


@given(
    st.text(alphabet=ALLOWED, max_size=47),
    st.characters(blacklist_characters=ALLOWED),
    st.text(alphabet=ALLOWED, max_size=47),
)
def test_one_foreign_character_anywhere_makes_a_name_invalid(before, foreign, after):
    assert not is_valid_name(before + foreign + after)


@given(st.text(alphabet=ALLOWED, min_size=49, max_size=80))
def test_names_longer_than_48_are_invalid(name):
    assert not is_valid_name(name)
