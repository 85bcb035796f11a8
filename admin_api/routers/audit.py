"""The audit log (admin only): every change made through the API, newest first."""

from __future__ import annotations

from fastapi import APIRouter, Query

from admin_api.models import DEFAULT_LIMIT, MAX_ID, MAX_LIMIT, AuditEntryOut, AuditPage
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
) -> AuditPage:
    with svc.qm.reading() as conn:
        page = accounts.list_audit(conn, before_id=before, limit=limit)
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
