"""Signing in and out of the console, and where its address leads.

Signing in takes an admin API token (``broker token create``) in a form field, never in a
URL, checks it as a bearer token is checked (under the sign-in throttle, ``admin_api.signins``),
and keeps it in the session cookie
(``admin_api.console.sessions``). Signing out is a POST with the CSRF token, so another site
cannot sign anyone out either.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from admin_api.console.pages import PREFIX, redirect, render, sign_in_cookie, sign_out_cookie
from admin_api.console.sessions import FormValues, Signing, check_origin, field
from admin_api.services import Svc
from admin_api.signins import SIGN_IN as DOOR
from admin_api.signins import Throttled

router = APIRouter(include_in_schema=False)

SIGN_IN = f"{PREFIX}/signin"


@router.get("/")
def root() -> RedirectResponse:
    return RedirectResponse(f"{PREFIX}/", status_code=307)


@router.get(SIGN_IN)
def sign_in_page(request: Request) -> HTMLResponse:
    return render(request, "signin.html", None)


@router.post(SIGN_IN)
def sign_in(request: Request, svc: Svc, values: FormValues) -> Response:
    check_origin(request)
    secret = field(values, "token")
    try:
        token = svc.signins.check(request, secret, DOOR) if secret else None
    except Throttled as exc:
        throttled = render(request, "signin.html", None, status=429, throttled=exc.seconds)
        throttled.headers["Retry-After"] = str(exc.seconds)
        return throttled
    if token is None:
        return render(request, "signin.html", None, status=401, failed=True)
    response = redirect(f"{PREFIX}/", request=request)
    sign_in_cookie(response, secret, request)
    return response


@router.post(f"{PREFIX}/signout")
def sign_out(request: Request, _: Signing) -> Response:
    response = redirect(SIGN_IN, request=request)  # no note: the sign-in page has no session to show one
    sign_out_cookie(response)
    return response
