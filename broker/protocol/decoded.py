"""A message as an operator reads it: the MQRFH2 folders decoded, the ``<psc>`` command
summarised, the payload as text when it is text.

What rfhutil or MQ Explorer's message browser show, for the CLI's ``browse`` and ``get`` and
the admin API's browse: the raw body stays available beside it (a hex dump, base64), so
nothing is hidden by the decoding. A body that is not a well-formed MQRFH2 says why, with
the MQ reason the broker would have dead-lettered it for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from broker.protocol import psc, rfh2
from broker.protocol.options import option_names
from queues.errors import MQError
from queues.formatting import body_text
from queues.message import MQFMT_RF_HEADER_2, Message


@dataclass(frozen=True, slots=True)
class Decoded:
    folders: tuple[tuple[str, str], ...] = ()  # (root element name, the folder's XML)
    command: dict[str, Any] | None = None  # the <psc> command, summarised
    payload: bytes = b""
    payload_format: str = ""
    error: str | None = None  # why the body or its <psc> could not be read

    def as_json(self) -> dict[str, Any]:
        text = body_text(self.payload)
        return {
            "folders": [{"name": name, "xml": xml} for name, xml in self.folders],
            "command": self.command,
            "payload_format": self.payload_format,
            "payload_text": text,
            "payload_hex": None if text is not None else self.payload.hex(),
            "error": self.error,
        }

    def describe(self) -> str:
        lines = ["  MQRFH2, decoded:"]
        lines += [f"    folder {name:<8} {xml}" for name, xml in self.folders]
        if self.command is not None:
            summary = "  ".join(f"{key} {_text(value)}" for key, value in self.command.items() if value)
            lines.append(f"    {summary}")
        if self.error is not None:
            lines.append(f"    cannot be read: {self.error}")
            return "\n".join(lines)
        text = body_text(self.payload)
        shown = text if text is not None else f"(hex) {self.payload.hex()}"
        lines.append(
            f"    payload  {len(self.payload)} bytes, format {self.payload_format or '(none)'}: {shown}"
        )
        return "\n".join(lines)


def decode_message(message: Message) -> Decoded | None:
    """The decoded view of an MQRFH2 message; None for a message of another format."""
    if message.format != MQFMT_RF_HEADER_2:
        return None
    try:
        body = rfh2.decode(message.body, message.encoding, message.format)
    except MQError as exc:
        return Decoded(error=f"{exc.reason_name} ({exc.reason}): {exc.detail}")
    folders = tuple((_name(folder), folder) for folder in body.folders)
    command, error = None, None
    for folder in rfh2.find(body.folders, psc.FOLDER, strict=False)[0]:
        try:
            command = _summary(psc.parse(folder))
        except MQError as exc:
            error = f"<psc> {exc.reason_name} ({exc.reason}): {exc.detail}"
    return Decoded(folders, command, body.payload, body.payload_format.rstrip(), error)


def _name(folder: str) -> str:
    try:
        return rfh2.folder_name(folder)
    except MQError:
        return "?"  # not an XML element: shown as it is


def _summary(command: psc.Command) -> dict[str, Any]:
    return {
        "command": type(command).__name__,
        "topics": list(psc.topics_of(command)),
        "options": option_names(command.options),
        "sub_point": command.sub_point,
        "queue": command.q_name,
        "qmgr": command.q_mgr_name,
        "sub_name": getattr(command, "sub_name", None),
    }


def _text(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)
