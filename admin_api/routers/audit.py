"""The audit log (admin only): every change made through the API, newest first, filtered by
who made it, its method, what it acted on and when."""

from __future__ import annotations

from fastapi import APIRouter, Query

from admin_api.models import DEFAULT_LIMIT, MAX_ID, MAX_LIMIT, XML_TEXT, AuditEntryOut, AuditPage
from admin_api.security import AdminToken
from admin_api.services import Svc
from broker.admin import accounts

router = APIRouter(prefix="/api/v1/audit", tags=["audit"])


@router.get(
    "",
    response_model=AuditPage,
    summary="Audit entries, newest first",
)
def list_audit(
    _: AdminToken,
    svc: Svc,
    before: int | None = Query(
        None, ge=1, le=MAX_ID, description="id of the last entry of the previous page"
    ),
    limit: int = Query(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT),
    principal: str | None = Query(
        None, max_length=64, pattern=XML_TEXT, description="only the entries of this principal"
    ),
    method: str | None = Query(
        None, pattern=r"^[A-Z]{1,8}$", description="only the entries of this method (POST, DELETE, CLI...)"
    ),
    action: str | None = Query(
        None,
        min_length=1,
        max_length=200,
        pattern=XML_TEXT,
        description="only the entries whose path or route contains this text, in any case "
        "(e.g. neighbours, purge)",
    ),
    since: int | None = Query(None, ge=0, le=MAX_ID, description="only the entries at or after (epoch ms)"),
    until: int | None = Query(None, ge=0, le=MAX_ID, description="only the entries before (epoch ms)"),
) -> AuditPage:
    where = accounts.AuditFilter(principal=principal, method=method, action=action, since=since, until=until)
    with svc.qm.reading() as conn:
        page = accounts.list_audit(conn, before_id=before, limit=limit, where=where)
    return AuditPage(
        items=[
            AuditEntryOut(
                id=e.entry_id,
                at=e.at,
                token_id=e.token_id,
                principal=e.principal,
                method=e.method,
                path=e.path,
                resource=e.resource,
                summary=e.summary,
                status=e.status,
            )
            for e in page
        ],
        next_before=page[-1].entry_id if len(page) == limit else None,
    )
