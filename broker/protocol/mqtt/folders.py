"""An MQTT 5.0 publication's properties as MQRFH2 folders, and back: what lets them travel
through the one engine (which passes the publisher's folders to every subscriber) to MQTT 5.0
subscribers, MQRFH2 applications and neighbouring brokers alike.

- **User Properties** are the ``<usr>`` folder, MQ's place for application properties: one
  element per property, in order, repeats kept. A name that is not an XML name is written with
  ``_xHHHH_`` escapes for the characters XML refuses (``_xHHHHHHHH_`` past U+FFFF), as .NET's
  ``XmlConvert.EncodeName`` does, and an underscore that would read as one is ``_x005F_``; the
  empty name, which MQTT allows, is ``_x0000_`` (U+0000 is never in an MQTT string). A value with
  a character XML 1.0 cannot hold is written ``dt="bin.hex"``, its UTF-8 in hex. An MQRFH2
  application's ``<usr>`` properties reach MQTT 5.0 subscribers the same way back: each child
  element's name and text (a folder that is not XML, read with ``<psc>``'s hardened parser, is
  passed over: the publication goes without those properties, never refused for them).
- **Response Topic, Correlation Data, Content Type** and the **Payload Format Indicator** go in the
  ``<mqtt>`` folder beside the QoS (``rt``, ``cd`` in hex, ``ct``, ``pfi``). A Payload Format
  Indicator of 1 also makes the payload's format MQSTR, so an MQRFH2 application sees text; an
  MQSTR publication from one reaches MQTT 5.0 subscribers with the indicator set.
- **Message Expiry Interval** is the MQMD Expiry (tenths of a second), which the queues count
  down and the engine passes on as what is left: a subscriber is sent the seconds remaining,
  rounded up (section 3.3.2.3.3).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from lxml import etree

from broker.protocol.mqtt.packets import NO_PROPERTIES, Properties
from broker.protocol.psc import PscError, load_folder

QOS_FOLDER = "mqtt"
USER_FOLDER = "usr"
MQEI_UNLIMITED = -1
MAX_EXPIRY = 2**31 - 1  # tenths: the MQMD field is a signed 32-bit integer
BIN_HEX = "bin.hex"
EMPTY_NAME = "_x0000_"
_ESCAPE = re.compile(r"_x([0-9A-F]{8}|[0-9A-F]{4})_")
# What XML 1.0 lets an element's text hold (section 2.2), as a character class.
_XML_CHARS = re.compile("^[\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]*$")
_CARRIED = ("pfi", "ct", "rt", "cd")  # the <mqtt> elements that hold properties


def carries(properties: Properties) -> bool:
    """Whether ``properties`` hold anything a folder carries (most publications: nothing)."""
    return bool(
        properties.user_properties
        or properties.response_topic is not None
        or properties.correlation_data is not None
        or properties.content_type is not None
        or properties.payload_format_indicator
    )


def mqtt_elements(properties: Properties) -> str:
    """The ``<mqtt>`` folder's elements for ``properties`` (after the QoS and the origin)."""
    parts = []
    if properties.payload_format_indicator:
        parts.append("<pfi>1</pfi>")
    for tag, text in (("ct", properties.content_type), ("rt", properties.response_topic)):
        if text is not None:
            parts.append(_element(tag, text))
    if properties.correlation_data is not None:
        parts.append(f"<cd>{properties.correlation_data.hex()}</cd>")
    return "".join(parts)


def user_folder(properties: Properties) -> str | None:
    """The ``<usr>`` folder of the User Properties (None: there are none)."""
    if not properties.user_properties:
        return None
    inner = "".join(_element(encode_name(name), value) for name, value in properties.user_properties)
    return f"<{USER_FOLDER}>{inner}</{USER_FOLDER}>"


def expiry(properties: Properties) -> int:
    """The MQMD Expiry for a Message Expiry Interval (unlimited without one)."""
    seconds = properties.message_expiry_interval
    return MQEI_UNLIMITED if seconds is None else min(max(seconds, 1) * 10, MAX_EXPIRY)


def properties(folders: Sequence[str], payload_text: bool, remaining: int) -> Properties:
    """The properties a subscriber is sent for a publication with ``folders``, a payload in
    MQSTR format or not (``payload_text``) and ``remaining`` tenths of a second of MQMD Expiry
    left (-1: unlimited)."""
    user: tuple[tuple[str, str], ...] = ()
    carried: dict[str, str] = {}
    for folder in folders:
        if folder.startswith(f"<{USER_FOLDER}>"):
            user += _user_properties(folder)
        elif folder.startswith(f"<{QOS_FOLDER}>") and any(f"<{tag}>" in folder for tag in _CARRIED):
            carried = _carried(folder)
    seconds = None if remaining == MQEI_UNLIMITED else max(1, -(-remaining // 10))
    if not (user or carried or payload_text or seconds is not None):
        return NO_PROPERTIES
    data = carried.get("cd")
    correlation = None if data is None else _hex(data)
    return Properties(
        payload_format_indicator=1 if payload_text or carried.get("pfi") == "1" else None,
        message_expiry_interval=seconds,
        content_type=carried.get("ct"),
        response_topic=carried.get("rt"),
        correlation_data=correlation,
        user_properties=user,
    )


def encode_name(name: str) -> str:
    """``name`` as an XML element name (see the module's docstring)."""
    if not name:
        return EMPTY_NAME
    out = []
    for place, char in enumerate(name):
        allowed = _name_start(char) if place == 0 else _name_char(char)
        if char == "_" and _ESCAPE.match(name, place):
            out.append("_x005F_")
        elif allowed:
            out.append(char)
        else:
            out.append(f"_x{ord(char):04X}_" if ord(char) <= 0xFFFF else f"_x{ord(char):08X}_")
    return "".join(out)


def decode_name(name: str) -> str:
    """The property name an element name stands for (:func:`encode_name` reversed)."""
    if name == EMPTY_NAME:
        return ""
    return _ESCAPE.sub(lambda found: chr(int(found.group(1), 16)), name)


def _element(tag: str, text: str) -> str:
    """``<tag>text</tag>``, the text escaped, or in hex where XML cannot hold it."""
    if _XML_CHARS.match(text):
        element = etree.Element(tag)
        element.text = text
        written: str = etree.tostring(element, encoding="unicode")
        return written
    return f'<{tag} dt="{BIN_HEX}">{text.encode().hex()}</{tag}>'


def _hex(text: str) -> bytes:
    """Bytes written in hex (text that is not hex: its UTF-8, as an application wrote it)."""
    try:
        return bytes.fromhex(text)
    except ValueError:
        return text.encode()


def _text(element: etree._Element) -> str:
    text = element.text or ""
    if element.get("dt") != BIN_HEX:
        return text
    try:
        return bytes.fromhex(text).decode()
    except ValueError:  # not hex, or not UTF-8: the text as written
        return text


def _children(folder: str, root: str) -> list[etree._Element]:
    """The child elements of a folder (none if it is not XML)."""
    try:
        return [child for child in load_folder(folder, root) if isinstance(child.tag, str)]
    except PscError:
        return []


def _user_properties(folder: str) -> tuple[tuple[str, str], ...]:
    return tuple((decode_name(str(child.tag)), _text(child)) for child in _children(folder, USER_FOLDER))


def _carried(folder: str) -> dict[str, str]:
    return {str(child.tag): _text(child) for child in _children(folder, QOS_FOLDER) if child.tag in _CARRIED}


def _name_start(char: str) -> bool:
    """XML 1.0 NameStartChar, less the colon (namespaces give it a meaning)."""
    code = ord(char)
    return (
        (char.isascii() and (char.isalpha() or char == "_"))
        or 0xC0 <= code <= 0xD6
        or 0xD8 <= code <= 0xF6
        or 0xF8 <= code <= 0x2FF
        or 0x370 <= code <= 0x37D
        or 0x37F <= code <= 0x1FFF
        or 0x200C <= code <= 0x200D
        or 0x2070 <= code <= 0x218F
        or 0x2C00 <= code <= 0x2FEF
        or 0x3001 <= code <= 0xD7FF
        or 0xF900 <= code <= 0xFDCF
        or 0xFDF0 <= code <= 0xFFFD
        or 0x10000 <= code <= 0xEFFFF
    )


def _name_char(char: str) -> bool:
    """XML 1.0 NameChar, less the colon."""
    code = ord(char)
    return (
        _name_start(char)
        or (char.isascii() and (char.isdigit() or char in "-."))
        or code == 0xB7
        or 0x300 <= code <= 0x36F
        or 0x203F <= code <= 0x2040
    )
