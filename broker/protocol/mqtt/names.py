"""Topic names and topic filters: the rules both specifications give for the strings a
PUBLISH is sent to and a SUBSCRIBE asks for. The decoder applies them to every packet it
reads; a session that builds names of its own (a will, a mapped MQ topic) applies the same.

The strings reaching these functions are already well-formed UTF-8 (the decoder refuses
anything else); U+0000 is checked again for callers that hold a string from elsewhere.
"""

from __future__ import annotations

from broker.protocol.mqtt.errors import MqttProtocolError

MAX_STRING_BYTES = 65_535  # a UTF-8 string's length prefix is two bytes


def _check_text(text: str, what: str) -> None:
    if not text:
        raise MqttProtocolError(f"empty {what}")
    if "\x00" in text:
        raise MqttProtocolError(f"{what} contains U+0000")
    if len(text) * 4 > MAX_STRING_BYTES and len(text.encode("utf-8")) > MAX_STRING_BYTES:
        raise MqttProtocolError(f"{what} longer than {MAX_STRING_BYTES} bytes")


def validate_topic_name(name: str) -> None:
    """A name publications are sent to: at least one character, no wildcard anywhere."""
    _check_text(name, "topic name")
    if "+" in name or "#" in name:
        raise MqttProtocolError(f"wildcard in topic name {name!r}")


def validate_filter(text: str) -> None:
    """A subscription's filter: ``+`` only as a whole level, ``#`` only as the whole last level."""
    _check_text(text, "topic filter")
    if "+" not in text and "#" not in text:
        return
    levels = text.split("/")
    for index, level in enumerate(levels):
        if "#" in level and (level != "#" or index != len(levels) - 1):
            raise MqttProtocolError(f"'#' not alone in the last level of filter {text!r}")
        if "+" in level and level != "+":
            raise MqttProtocolError(f"'+' not a whole level of filter {text!r}")
