"""API tokens in the console (admin role only): the list, a new token with its role and
principal, and revocation after a confirmation page, each through the admin API's own handler
(its rules, its refusals, its audit entry, which never holds a secret).

A new token's secret is shown once, on the page that answers the creation (never stored, never
in a URL or a cookie, and ``no-store``, so the browser keeps no copy); no page shows it again.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse

from admin_api.console.pages import PREFIX, REFUSALS, outcome, redirect, refused, render
from admin_api.console.params import RowCursor, RowId
from admin_api.console.sessions import Admin, Administering, FormValues, field
from admin_api.models import TokenIn
from admin_api.problems import not_found
from admin_api.routers import tokens as api
from admin_api.services import Svc
from broker.admin import accounts
from queues.ids import now_ms

router = APIRouter(prefix=f"{PREFIX}/tokens", include_in_schema=False)

PAGE = 50
BACK = f"{PREFIX}/tokens"
DAY = 86_400  # seconds: the console's new tokens expire after whole days


@router.get("")
def list_tokens(request: Request, session: Admin, svc: Svc, after: RowCursor = 0) -> HTMLResponse:
    page = api.list_tokens(session.token, svc, after=after, limit=PAGE)
    return render(
        request,
        "tokens.html",
        session,
        tokens=page.items,
        after=after,
        next_after=page.next_after,
        now=now_ms(),
    )


@router.post("")
def create_token(request: Request, session: Administering, svc: Svc, values: FormValues) -> Response:
    """The page that follows a creation is the only one that shows the secret."""
    try:
        days = field(values, "expires_days")
        body = TokenIn.model_validate(
            {
                "role": field(values, "role"),
                "principal": field(values, "principal"),
                "expires_in": int(days) * DAY if days else None,
            }
        )
        issued = api.create_token(session.token, svc, body, request, Response())
    except REFUSALS as exc:
        return redirect(BACK, refused(exc), request=request)
    return render(request, "token_created.html", session, issued=issued, status=201)


@router.get("/{token_id}/revoke")
def confirm_revoke(request: Request, session: Admin, svc: Svc, token_id: RowId) -> Response:
    with svc.qm.reading() as conn:
        token = accounts.get_token(conn, token_id)
    if token is None:
        return redirect(BACK, refused(not_found(f"token {token_id}")), request=request)
    return render(request, "confirm_token.html", session, token=api.token_out(token))


@router.post("/{token_id}/revoke")
def revoke_token(request: Request, session: Administering, svc: Svc, token_id: RowId) -> Response:
    def revoke() -> str:
        api.revoke_token(session.token, svc, token_id)
        return f"Token {token_id} revoked: the API and the console refuse it from now on"

    return outcome(request, BACK, revoke)
