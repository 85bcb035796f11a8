"""Signing in and out of the console, and where its address leads.

Signing in takes an admin API token (``broker token create``) in a form field, never in a
URL, checks it as a bearer token is checked, and keeps it in the session cookie
(``admin_api.console.sessions``). Signing out is a POST with the CSRF token, so another site
cannot sign anyone out either.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from admin_api import accounts
from admin_api.console.pages import PREFIX, redirect, render, sign_in_cookie, sign_out_cookie
from admin_api.console.sessions import FormValues, Signing, check_origin, field
from admin_api.services import Svc

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
    with svc.qm.reading() as conn:
        token = accounts.authenticate(conn, secret) if secret else None
    if token is None:
        return render(request, "signin.html", None, status=401, failed=True)
    response = redirect(f"{PREFIX}/", request=request)
    sign_in_cookie(response, secret, request)
    return response


@router.post(f"{PREFIX}/signout")
def sign_out(request: Request, _: Signing) -> Response:
    response = redirect(SIGN_IN, "Signed out", request=request)
    sign_out_cookie(response)
    return response
