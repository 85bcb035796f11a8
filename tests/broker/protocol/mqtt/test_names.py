"""Tests for broker.protocol.mqtt.names: the topic name and filter rules, for callers outside
the decoder (the session checks names it builds with the same functions)."""

from __future__ import annotations

import pytest

from broker.protocol.mqtt import MqttProtocolError, validate_filter, validate_topic_name


@pytest.mark.parametrize("name", ["a", "/", "a/b", "/a/", "a//b", "$SYS/x", "ü/€/😀", " "])
def test_valid_topic_names(name: str) -> None:
    validate_topic_name(name)


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("", "empty topic name"),
        ("a/+", "wildcard"),
        ("#", "wildcard"),
        ("a\x00", "U\\+0000"),
        ("a" * 65536, "longer than 65535 bytes"),
        ("€" * 21846, "longer than 65535 bytes"),
    ],
)
def test_invalid_topic_names(name: str, match: str) -> None:
    with pytest.raises(MqttProtocolError, match=match):
        validate_topic_name(name)


def test_a_name_of_exactly_65535_bytes_is_valid() -> None:
    validate_topic_name("€" * 21845)


@pytest.mark.parametrize(
    "text", ["#", "+", "a/#", "+/+", "/+/", "a/+/#", "sport/tennis/player1/#", "/", "+/"]
)
def test_valid_filters(text: str) -> None:
    validate_filter(text)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "empty topic filter"),
        ("#/a", "'#' not alone"),
        ("a/#/", "'#' not alone"),
        ("a/b#", "'#' not alone"),
        ("a+/b", "'\\+' not a whole level"),
        ("a/+b", "'\\+' not a whole level"),
        ("\x00", "U\\+0000"),
    ],
)
def test_invalid_filters(text: str, match: str) -> None:
    with pytest.raises(MqttProtocolError, match=match):
        validate_filter(text)
