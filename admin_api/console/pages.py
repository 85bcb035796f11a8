"""How the console answers: pages from Jinja2 templates, with the security headers every
console response carries, one-shot notes after a change (``admin_api.console.notes``), and the
redirects.

The Content-Security-Policy allows scripts, styles and connections from this server only:
no inline script, no ``on*`` attributes, no inline styles, no framing. The pages are
rendered on the server; htmx (``/static/htmx``) refreshes parts of them and uPlot
(``/static/uplot``) draws the overview's charts, both vendored, never from a CDN.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape
from pydantic import ValidationError

from admin_api.console import notes
from admin_api.console.notes import Note, refusal
from admin_api.console.sessions import COOKIE, CSRF_FIELD, CSRF_HEADER, Form, Session, field, secure
from admin_api.problems import ApiProblem
from queues.definition import QueueDefinition
from queues.errors import MQError

PREFIX = "/console"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # "no-referrer" would make the browser send "Origin: null"
    "Cache-Control": "no-store",
}


def when(ms: int | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def age(ms: int | None) -> str:
    """How long ago, in the largest unit that fits (``3 s``, ``12 min``, ``5 h``, ``2 d``)."""
    if ms is None:
        return ""
    seconds = max(0.0, time.time() - ms / 1000)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def per_second(rate: float | None) -> str:
    """A rate for people: one decimal below 10 a second, whole numbers above; nothing while
    there is no rate yet (one sample)."""
    if rate is None:
        return ""
    return f"{rate:.1f}" if rate < 10 else f"{rate:,.0f}"


def inhibited(queue: QueueDefinition) -> str:
    """Which operations an administrator has inhibited on ``queue`` (``put, get``), if any."""
    flags = (("put", queue.put_enabled), ("get", queue.get_enabled))
    return ", ".join(operation for operation, enabled in flags if not enabled)


def words(reason_name: str) -> str:
    """An MQ reason name for people: ``MQRC_Q_FULL`` -> ``q full``."""
    return reason_name.split("_", 1)[-1].replace("_", " ").lower()


def segment(value: object) -> str:
    """A value as one path segment or query value: an MQ name's ``/`` encoded too (see
    ``admin_api.object_names``), as every other reserved character."""
    return quote(str(value), safe="")


templates = Environment(
    loader=FileSystemLoader(Path(__file__).resolve().parent / "templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)
templates.filters.update(
    when=when,
    age=age,
    words=words,
    segment=segment,
    q=segment,
    per_second=per_second,  # q: a query value
)
templates.globals.update(PREFIX=PREFIX, CSRF_FIELD=CSRF_FIELD, CSRF_HEADER=CSRF_HEADER, inhibited=inhibited)


def render(
    request: Request, name: str, session: Session | None, *, status: int = 200, **context: Any
) -> HTMLResponse:
    """The page ``name`` with the request's note (shown once, if the console sealed it for this
    session) and the session's role and CSRF token, so a template shows write controls only to
    those who may use them."""
    sealed = request.cookies.get(notes.COOKIE)
    secret = request.cookies.get(COOKIE)
    note = notes.opened(secret, sealed) if sealed and secret else None
    html = templates.get_template(name).render(
        request=request, session=session, note=note, path=request.url.path, **context
    )
    response = HTMLResponse(html, status_code=status, headers=HEADERS)
    if sealed is not None:
        response.delete_cookie(notes.COOKIE, path=PREFIX)
    return response


def redirect(url: str, note: Note | None = None, *, request: Request) -> Response:
    """303 to ``url`` (a GET), leaving ``note`` for that page to show once: sealed for the
    request's session, since only that session's pages show it."""
    response = RedirectResponse(url, status_code=303, headers=HEADERS)
    secret = request.cookies.get(COOKIE)
    if note is not None and secret:
        response.set_cookie(
            notes.COOKIE,
            notes.seal(secret, note),
            max_age=60,
            path=PREFIX,
            httponly=True,
            samesite="strict",
            secure=secure(request),
        )
    return response


def back_to(values: Form, default: str) -> str:
    """The console page a form came from (its ``back`` field), never a page elsewhere."""
    back = field(values, "back")
    return back if back.startswith(PREFIX + "/") and "//" not in back and "\\" not in back else default


def outcome(request: Request, back: str, action: Callable[[], str | Note]) -> Response:
    """Carry out ``action`` (it says what it did) and go back to ``back`` with that note, or
    with why the queue manager or the broker refused it (the MQ reason, as the API gives it)."""
    try:
        done = action()
    except REFUSALS as exc:
        return redirect(back, refused(exc), request=request)
    return redirect(back, done if isinstance(done, Note) else Note(done), request=request)


# What a change the API's handlers refuse raises (ValidationError is a ValueError).
REFUSALS = (MQError, ApiProblem, ValueError)


def refused(exc: Exception) -> Note:
    """Why a change was refused, as the API says it: the MQ reason, the problem, the fields."""
    if isinstance(exc, ApiProblem):
        return refusal(f"{exc.title}: {exc.detail}")
    if isinstance(exc, ValidationError):
        return refusal("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()))
    return refusal(str(exc))


def sign_in_cookie(response: Response, secret: str, request: Request) -> None:
    response.set_cookie(COOKIE, secret, path="/", httponly=True, samesite="strict", secure=secure(request))


def sign_out_cookie(response: Response) -> None:
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
