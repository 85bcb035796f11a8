"""Bearer-token authentication and role checks, as FastAPI dependencies.

Roles are cumulative: a viewer reads; an operator also puts, purges, defines,
alters and deletes queues, manages subscriptions and retained publications and
retries dead letters; an admin also manages ACL rules, groups, tokens and reads
the audit log. The token is looked up on every request (one indexed query), so
a revocation takes effect at once in every API process.

The authenticated token is left on ``request.state.token`` for the audit log. Tokens are
checked under the sign-in throttle (``admin_api.signins``): 429 while it refuses the caller.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from admin_api.problems import ApiProblem
from admin_api.services import Svc
from admin_api.signins import BEARER, Throttled
from broker.admin.accounts import Role, Token

_bearer = HTTPBearer(
    auto_error=False,
    description="A token from 'broker token create' or POST /api/v1/tokens",
)
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="broker"'}


def _unauthorized(detail: str) -> ApiProblem:
    return ApiProblem(401, "unauthorized", "Authentication required", detail, headers=_CHALLENGE)


def _throttled(exc: Throttled) -> ApiProblem:
    return ApiProblem(
        429, "throttled", "Too many failed sign-ins", str(exc), headers={"Retry-After": str(exc.seconds)}
    )


def authenticated(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    svc: Svc,
) -> Token:
    if credentials is None:
        raise _unauthorized("send 'Authorization: Bearer <token>'")
    try:
        token = svc.signins.check(request, credentials.credentials, BEARER)
    except Throttled as exc:
        raise _throttled(exc) from None
    if token is None:
        raise _unauthorized("the token is unknown or revoked")
    request.state.token = token
    return token


def require(role: Role) -> Callable[[Token], Token]:
    """A dependency that lets tokens of ``role`` or a higher role through."""

    def check(token: Annotated[Token, Depends(authenticated)]) -> Token:
        if not token.role.allows(role):
            raise ApiProblem(
                403,
                "forbidden",
                "Role not sufficient",
                f"this needs the {role} role; the token is {token.role}",
            )
        return token

    return check


viewer = require(Role.VIEWER)
operator = require(Role.OPERATOR)
admin = require(Role.ADMIN)

ViewerToken = Annotated[Token, Depends(viewer)]
OperatorToken = Annotated[Token, Depends(operator)]
AdminToken = Annotated[Token, Depends(admin)]
