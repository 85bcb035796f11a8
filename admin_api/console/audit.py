"""The audit log in the console (admin role only): every change made through the API, the
console and the token CLI, newest first, 50 a page, filtered by principal, method, what it
acted on and a time range, through the admin API's own handler.

Times are UTC, as every console page shows them; the range's inputs are the browser's
``datetime-local`` fields, read as UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse

from admin_api.console.pages import PREFIX, render
from admin_api.console.params import RowCursor
from admin_api.console.sessions import Admin
from admin_api.models import XML_TEXT
from admin_api.routers import audit as api
from admin_api.services import Svc

router = APIRouter(prefix=f"{PREFIX}/audit", include_in_schema=False)

PAGE = 50
METHODS = ("POST", "PUT", "PATCH", "DELETE", "CLI")
Text = Annotated[str, Query(max_length=200, pattern=XML_TEXT)]
Method = Annotated[str, Query(pattern=r"^$|^[A-Z]{1,8}$")]
Moment = Annotated[str, Query(pattern=r"^$|^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}(:[0-9]{2})?$")]


def epoch_ms(name: str, moment: str) -> int | None:
    """A ``datetime-local`` value, read as UTC, in epoch milliseconds; None for nothing. A date
    that does not exist (February 30th) is the console's 400 page, as any address it never makes."""
    if not moment:
        return None
    try:
        return int(datetime.fromisoformat(moment).replace(tzinfo=UTC).timestamp() * 1000)
    except ValueError as exc:
        raise RequestValidationError(
            [{"loc": ("query", name), "msg": str(exc), "type": "value_error"}]
        ) from None


@router.get("")
def audit(
    request: Request,
    session: Admin,
    svc: Svc,
    principal: Text = "",
    method: Method = "",
    action: Text = "",
    since: Moment = "",
    until: Moment = "",
    before: RowCursor = 0,
) -> HTMLResponse:
    filters = {"principal": principal, "method": method, "action": action, "since": since, "until": until}
    page = api.list_audit(
        session.token,
        svc,
        before=before or None,
        limit=PAGE,
        principal=principal or None,
        method=method or None,
        action=action or None,
        since=epoch_ms("since", since),
        until=epoch_ms("until", until),
    )
    return render(
        request,
        "audit.html",
        session,
        entries=page.items,
        filters=filters,
        methods=METHODS,
        query=urlencode({k: v for k, v in filters.items() if v}),
        before=before,
        next_before=page.next_before,
    )
