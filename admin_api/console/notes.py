"""The one-shot note a console page shows after a change, sealed so that only the console can
have written it.

A browser sends a host's cookies to every port of it, so any page served on the same host may
set the note cookie. The note is therefore sealed with an HMAC keyed by the session's token, as
the CSRF token is (``docs/decisions.md``, Web console): a note another page wrote, or one
written for another session, does not open and is never shown.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from urllib.parse import quote, unquote

COOKIE = "broker_console_note"
MAX_TEXT = 300
_CONTEXT = b"broker console note v1"
_DONE, _REFUSED = "done", "refused"


@dataclass(frozen=True, slots=True)
class Note:
    """What a change did, or why it was refused (shown in the error style)."""

    text: str
    refused: bool = False


def refusal(why: str) -> Note:
    return Note(f"Refused: {why}", refused=True)


def _mac(secret: str, kind: str, text: str) -> bytes:
    message = b"\0".join((_CONTEXT, kind.encode(), text.encode()))
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest().encode()


def seal(secret: str, note: Note) -> str:
    """The cookie value of ``note`` for the session of ``secret``: its kind, its HMAC and its
    text (at most :data:`MAX_TEXT` characters), percent-encoded."""
    text = note.text[:MAX_TEXT]
    kind = _REFUSED if note.refused else _DONE
    return f"{kind}.{_mac(secret, kind, text).decode()}.{quote(text)}"


def opened(secret: str, value: str) -> Note | None:
    """The note ``value`` holds if the console sealed it for the session of ``secret``."""
    kind, _, rest = value.partition(".")
    mac, _, quoted = rest.partition(".")
    text = unquote(quoted)
    if kind not in (_DONE, _REFUSED) or not hmac.compare_digest(mac.encode(), _mac(secret, kind, text)):
        return None
    return Note(text, refused=kind == _REFUSED)
