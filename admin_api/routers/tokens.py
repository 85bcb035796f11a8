"""API tokens (admin only): list, create (the secret is in this one response), revoke.

The same functions back ``broker token``; a revoked token is refused by every
API process from its next request. The audit entry of a creation names the
token and its role, never its secret.
"""

from __future__ import annotations

from fastapi import APIRouter, Path, Query, Request, Response

from admin_api.auditing import note
from admin_api.models import DEFAULT_LIMIT, MAX_ID, MAX_LIMIT, IssuedTokenOut, TokenIn, TokenOut, TokenPage
from admin_api.problems import not_found, responses
from admin_api.security import AdminToken
from admin_api.services import Svc
from broker.admin import accounts
from broker.admin.accounts import Token
from queues.errors import MQError
from queues.reasons import Reason

router = APIRouter(prefix="/api/v1/tokens", tags=["tokens"])


def token_out(token: Token) -> TokenOut:
    return TokenOut(
        id=token.token_id,
        prefix=token.prefix,
        role=str(token.role),
        principal=token.principal,
        created_at=token.created_at,
        revoked_at=token.revoked_at,
        expires_at=token.expires_at,
    )


@router.get("", response_model=TokenPage, summary="Tokens, oldest first")
def list_tokens(
    _: AdminToken,
    svc: Svc,
    after: int = Query(0, ge=0, le=MAX_ID, description="id of the last token of the previous page"),
    limit: int = Query(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT),
) -> TokenPage:
    with svc.qm.reading() as conn:
        page = accounts.list_tokens(conn, after_id=after, limit=limit)
    return TokenPage(
        items=[token_out(t) for t in page], next_after=page[-1].token_id if len(page) == limit else None
    )


@router.post(
    "",
    status_code=201,
    response_model=IssuedTokenOut,
    summary="Create a token; its secret is shown only in this response",
)
def create_token(
    _: AdminToken,
    svc: Svc,
    body: TokenIn,
    request: Request,
    response: Response,
) -> IssuedTokenOut:
    with svc.qm.unit_of_work() as uow:
        issued = accounts.create_token(uow.connection, body.role, body.principal, lifetime=body.expires_in)
    created = issued.token
    summary: dict[str, object] = {"token_id": created.token_id, "role": str(created.role)}
    summary["principal"] = created.principal
    if created.expires_at is not None:
        summary["expires_at"] = created.expires_at
    note(request.state, **summary)
    response.headers["Location"] = f"/api/v1/tokens/{created.token_id}"
    return IssuedTokenOut(**token_out(created).model_dump(), token=issued.secret)


@router.delete(
    "/{token_id}",
    status_code=204,
    response_class=Response,
    summary="Revoke a token (revoking it again changes nothing)",
    description="Refused (409) for the token making the request (revoke it with another admin token, or "
    "with 'broker token revoke') and for the last live admin token.",
    responses=responses(404, 409),
)
def revoke_token(
    caller: AdminToken,
    svc: Svc,
    token_id: int = Path(ge=1, le=MAX_ID),
) -> Response:
    if token_id == caller.token_id:
        raise MQError(
            Reason.MQRC_OBJECT_IN_USE,
            f"token {token_id} is the one making this request: revoke it with another admin token, "
            "or with 'broker token revoke'",
        )
    with svc.qm.unit_of_work() as uow:
        revoked = accounts.revoke_token(uow.connection, token_id)
    if revoked is None:
        raise not_found(f"token {token_id}")
    return Response(status_code=204)
