"""Who is signed in to the console, and proof that a change comes from the console's own pages.

The session cookie holds the API token itself (HttpOnly, SameSite=Strict, Secure over
HTTPS): it is looked up on every request exactly as a bearer token is, so revoking the token
ends every console session at once and no session table is needed. Script cannot read the
cookie and other sites cannot send it.

Every state-changing request must also carry the CSRF token, an HMAC of the secret: a page
of the console has it (a form field, or the ``X-CSRF-Token`` header htmx sends), another
site cannot compute it, and nothing has to be stored to check it.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import parse_qs

from fastapi import Depends, Request

from admin_api.services import Svc
from admin_api.signins import SESSION, Throttled
from broker.admin.accounts import Role, Token

COOKIE = "broker_console"
CSRF_FIELD = "csrf"
CSRF_HEADER = "X-CSRF-Token"
_CSRF_CONTEXT = b"broker console csrf v1"

Form = dict[str, list[str]]


class SignInNeeded(Exception):
    """No valid session: the console answers with its sign-in page."""


class Refused(Exception):
    """A request the console will not carry out (a forged or under-privileged change)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def csrf_token(secret: str) -> str:
    return hmac.new(secret.encode(), _CSRF_CONTEXT, hashlib.sha256).hexdigest()


@dataclass(frozen=True, slots=True)
class Session:
    token: Token
    csrf: str

    @property
    def operator(self) -> bool:
        return self.token.role.allows(Role.OPERATOR)

    @property
    def admin(self) -> bool:
        return self.token.role.allows(Role.ADMIN)


def secure(request: Request) -> bool:
    return request.url.scheme == "https"


def check_origin(request: Request) -> None:
    """Refuse a POST a browser says came from another site (its ``Origin`` header): besides the
    CSRF token for changes, this keeps other sites from signing a browser in with their token."""
    origin = request.headers.get("origin")
    if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
        raise Refused(403, f"the request came from {origin}, not from this console")


def signed_in(request: Request, svc: Svc) -> Session:
    """The session of the request's cookie; the token goes on ``request.state`` as the API's
    bearer check leaves it, so the audit log records what it does."""
    secret = request.cookies.get(COOKIE)
    if not secret:
        raise SignInNeeded
    try:
        token = svc.signins.check(request, secret, SESSION)
    except Throttled:
        raise SignInNeeded from None
    if token is None:
        raise SignInNeeded
    request.state.token = token
    return Session(token, csrf_token(secret))


async def form(request: Request) -> Form:
    """The urlencoded form of a POST (the console's forms send nothing else)."""
    return parse_qs((await request.body()).decode("utf-8", "replace"), keep_blank_values=True)


def field(values: Form, name: str, default: str = "") -> str:
    return values.get(name, [default])[0].strip()


def permitted(role: Role) -> Callable[..., Session]:
    """A dependency for a page only ``role`` and above may see (a confirmation page)."""

    def check(session: Session = Depends(signed_in)) -> Session:  # noqa: B008 (a closure: no Annotated)
        if not session.token.role.allows(role):
            raise Refused(403, f"this needs the {role} role; you are signed in as {session.token.role}")
        return session

    return check


def acting(role: Role) -> Callable[..., Session]:
    """A dependency for a change: a session of ``role`` or above whose CSRF token checks out."""

    needed = permitted(role)

    def check(
        request: Request,
        session: Session = Depends(needed),  # noqa: B008 (annotations are strings: no closure in them)
        values: Form = Depends(form),  # noqa: B008
    ) -> Session:
        check_origin(request)
        sent = request.headers.get(CSRF_HEADER) or field(values, CSRF_FIELD)
        if not hmac.compare_digest(sent.encode(), session.csrf.encode()):
            raise Refused(403, "the request did not come from a console page (missing or wrong CSRF token)")
        return session

    return check


Viewing = Annotated[Session, Depends(signed_in)]
Operator = Annotated[Session, Depends(permitted(Role.OPERATOR))]
Admin = Annotated[Session, Depends(permitted(Role.ADMIN))]
Operating = Annotated[Session, Depends(acting(Role.OPERATOR))]
Administering = Annotated[Session, Depends(acting(Role.ADMIN))]
Signing = Annotated[Session, Depends(acting(Role.VIEWER))]
FormValues = Annotated[Form, Depends(form)]
