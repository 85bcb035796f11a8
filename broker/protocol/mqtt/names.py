"""Topic names and topic filters: the rules the specifications give for the strings a
PUBLISH is sent to and a SUBSCRIBE asks for. The decoder applies them to every packet it
reads; a session that builds names of its own (a will, a mapped MQ topic) applies the same.
The errors carry MQTT 5.0's Topic Name invalid and Topic Filter invalid reason codes.

The strings reaching these functions are already well-formed UTF-8 (the decoder refuses
anything else); U+0000 is checked again for callers that hold a string from elsewhere.
"""

from __future__ import annotations

from broker.protocol.mqtt.errors import MqttProtocolError
from broker.protocol.mqtt.v5.reasons import ReasonCode

MAX_STRING_BYTES = 65_535  # a UTF-8 string's length prefix is two bytes
SHARE_PREFIX = "$share/"


def _problem(text: str, what: str) -> str | None:
    if not text:
        return f"empty {what}"
    if "\x00" in text:
        return f"{what} contains U+0000"
    if len(text) * 4 > MAX_STRING_BYTES and len(text.encode("utf-8")) > MAX_STRING_BYTES:
        return f"{what} longer than {MAX_STRING_BYTES} bytes"
    return None


def validate_topic_name(name: str) -> None:
    """A name publications are sent to: at least one character, no wildcard anywhere."""
    if (problem := _problem(name, "topic name")) is not None:
        raise MqttProtocolError(problem, ReasonCode.TOPIC_NAME_INVALID)
    if "+" in name or "#" in name:
        raise MqttProtocolError(f"wildcard in topic name {name!r}", ReasonCode.TOPIC_NAME_INVALID)


def validate_filter(text: str) -> None:
    """A subscription's filter: ``+`` only as a whole level, ``#`` only as the whole last level."""
    if (problem := _problem(text, "topic filter")) is not None:
        raise MqttProtocolError(problem, ReasonCode.TOPIC_FILTER_INVALID)
    if "+" not in text and "#" not in text:
        return
    levels = text.split("/")
    for index, level in enumerate(levels):
        if "#" in level and (level != "#" or index != len(levels) - 1):
            problem = f"'#' not alone in the last level of filter {text!r}"
        elif "+" in level and level != "+":
            problem = f"'+' not a whole level of filter {text!r}"
        else:
            continue
        raise MqttProtocolError(problem, ReasonCode.TOPIC_FILTER_INVALID)


def shared_subscription(text: str) -> tuple[str, str] | None:
    """The (share name, topic filter) of a valid filter of the form ``$share/{ShareName}/{filter}``
    (MQTT 5.0 section 4.8.2), None for any other filter. A share name that is empty or holds
    ``+`` or ``#``, or no filter after it, is Topic Filter invalid [MQTT-4.8.2-1, -2]."""
    if not text.startswith(SHARE_PREFIX):
        return None
    share, slash, rest = text[len(SHARE_PREFIX) :].partition("/")
    if not share or "+" in share or "#" in share or not slash or not rest:
        raise MqttProtocolError(
            f"shared subscription {text!r} is not $share/{{ShareName}}/{{filter}}",
            ReasonCode.TOPIC_FILTER_INVALID,
        )
    return share, rest
