"""Every error the API returns is an RFC 9457 problem (``application/problem+json``).

A problem carries ``type``, ``title``, ``status``, ``detail`` and ``instance`` (the
request path) and, when an MQ reason is behind it, ``reason`` and ``reason_name``
exactly as the CLI prints them, so a script can branch on ``MQRC_Q_FULL`` whichever
interface it uses. Broker refusals add the ``topic`` and ``parameter`` of the
``<pscr>`` response; validation problems list the offending fields in ``errors``.

Types are relative URIs naming the kind of problem: ``/problems/mq/<REASON_NAME>``
for MQ reasons, ``/problems/<slug>`` for the API's own, ``about:blank`` where the
HTTP status says it all (RFC 9457, 4.2). A failure that is not the caller's is
logged with its traceback and answered with a bare 500: stack traces never leave
the process.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterable, Mapping
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from admin_api.models import FieldError, Problem
from queues.errors import MQError
from queues.reasons import Reason

log = logging.getLogger("admin_api")

PROBLEM_MEDIA_TYPE = "application/problem+json"

# What an MQ reason means for an HTTP client. A request that passed its schema and is refused
# by the queue manager or the broker is in conflict with their state or rules (409); 422 is kept
# for requests that do not match their schema, so a client can tell "fix the request" from
# "the broker said no".
REASON_STATUS: Mapping[int, int] = {
    Reason.MQRC_UNKNOWN_OBJECT_NAME: 404,
    Reason.MQRC_NO_MSG_AVAILABLE: 404,
    Reason.MQRCCF_NOT_REGISTERED: 404,
    Reason.MQRCCF_Q_NAME_ERROR: 404,  # the subscriber queue is not defined (the name passed the schema)
    Reason.MQRCCF_Q_MGR_NAME_ERROR: 404,  # neither this broker nor a neighbour
    Reason.MQRC_NOT_AUTHORIZED: 403,
    Reason.MQRCCF_NOT_AUTHORIZED: 403,
    Reason.MQRC_OBJECT_ALREADY_EXISTS: 409,
    Reason.MQRCCF_OBJECT_ALREADY_EXISTS: 409,
    Reason.MQRC_Q_NOT_EMPTY: 409,
    Reason.MQRC_Q_FULL: 409,
    Reason.MQRC_PUT_INHIBITED: 409,
    Reason.MQRC_GET_INHIBITED: 409,
    Reason.MQRC_OBJECT_IN_USE: 409,
    Reason.MQRC_UNKNOWN_REMOTE_Q_MGR: 409,
    Reason.MQRCCF_UNKNOWN_BROKER: 409,  # a neighbour did not answer: the link cannot be verified now
    Reason.MQRC_LOOPING_PUBLICATION: 409,
    Reason.MQRCCF_DUPLICATE_IDENTITY: 409,
    Reason.MQRCCF_WRONG_USER: 409,
    Reason.MQRCCF_DUPLICATE_SUBSCRIPTION: 409,
    Reason.MQRCCF_SUBSCRIPTION_IN_USE: 409,
    Reason.MQRCCF_SUBSCRIPTION_LOCKED: 409,
    Reason.MQRC_MSG_TOO_BIG_FOR_Q: 409,  # too big for the queue's MAXMSGL, not for the API (413)
    Reason.MQRC_CONNECTION_BROKEN: 503,
    Reason.MQRC_Q_MGR_NOT_AVAILABLE: 503,
}
INVALID = 422
REFUSED = 409


class ApiProblem(Exception):
    """A problem of the API's own (authentication, a missing resource, no broker...)."""

    def __init__(
        self,
        status: int,
        slug: str | None,
        title: str,
        detail: str,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.type = f"/problems/{slug}" if slug else "about:blank"
        self.title = title
        self.detail = detail
        self.headers = dict(headers or {})


def not_found(what: str) -> ApiProblem:
    return ApiProblem(404, None, HTTPStatus.NOT_FOUND.phrase, f"{what} does not exist")


def status_for(reason: int) -> int:
    return REASON_STATUS.get(reason, REFUSED)


class NamedInBody(MQError):
    """An object the request's body names (a message to move, a queue to copy to) is not there:
    409, not 404, as the resource the path names exists; the MQ reason is the same."""

    def __init__(self, exc: MQError) -> None:
        super().__init__(exc.reason, exc.detail)


def status_of(exc: MQError) -> int:
    status = status_for(exc.reason)
    return 409 if status == 404 and isinstance(exc, NamedInBody) else status


def instance_of(request: Request) -> str:
    """The path as the client sent it (``%2F`` in a queue name included)."""
    raw = request.scope.get("raw_path")
    return raw.decode("latin-1").split("?", 1)[0] if raw else request.url.path


def problem_response(
    request: Request,
    status: int,
    type_: str,
    title: str,
    detail: str,
    *,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    content = Problem(
        type=type_, title=title, status=status, detail=detail, instance=instance_of(request), **extra
    ).model_dump(exclude_none=True)
    return JSONResponse(content, status_code=status, headers=headers, media_type=PROBLEM_MEDIA_TYPE)


async def _mq_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, MQError)
    return problem_response(
        request,
        status_of(exc),
        f"/problems/mq/{exc.reason_name}",
        f"{exc.reason_name} ({exc.reason})",
        exc.detail or exc.reason_name,
        reason=exc.reason,
        reason_name=exc.reason_name,
        topic=getattr(exc, "topic", None),
        parameter=getattr(exc, "parameter", None),
    )


async def _api_problem(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiProblem)
    return problem_response(request, exc.status, exc.type, exc.title, exc.detail, headers=exc.headers)


async def _http_exception(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    phrase = HTTPStatus(exc.status_code).phrase
    detail = exc.detail if isinstance(exc.detail, str) else phrase
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        allowed = allowed_methods(request)
        headers["Allow"] = ", ".join(allowed)
        detail = f"{request.method} is not allowed here; use {' or '.join(allowed)}"
    return problem_response(request, exc.status_code, "about:blank", phrase, detail, headers=headers)


def allowed_methods(request: Request) -> list[str]:
    """Every method the OpenAPI document gives the request's path: the contract, not whichever
    route happened to match first (each method of a path is a route of its own)."""
    path = request.scope["path"]
    return sorted(
        method.upper()
        for template, operations in request.app.openapi()["paths"].items()
        if _template(template).fullmatch(path)
        for method in operations
    )


@functools.cache
def _template(path: str) -> re.Pattern[str]:
    """A path template of the document as a pattern: ``{param}`` is one segment."""
    return re.compile(re.sub(r"\\{\w+\\}", "[^/]+", re.escape(path)))


def _field_errors(errors: Iterable[Any]) -> list[FieldError]:
    # Only location, message and type: pydantic's "input" and "ctx" would echo the caller's data back.
    return [
        FieldError(loc=[str(part) for part in error["loc"]], msg=error["msg"], type=error["type"])
        for error in errors
    ]


async def _validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = _field_errors(exc.errors())
    first = errors[0] if errors else None
    detail = f"{'.'.join(first.loc)}: {first.msg}" if first else "the request is not valid"
    return problem_response(
        request, INVALID, "/problems/validation", "Request is not valid", detail, errors=errors
    )


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error("request failed", exc_info=exc, extra={"method": request.method, "path": request.url.path})
    return problem_response(
        request,
        500,
        "/problems/internal",
        HTTPStatus.INTERNAL_SERVER_ERROR.phrase,
        "the request failed inside the server; the error is in the server's log",
    )


def install(app: FastAPI) -> None:
    app.add_exception_handler(MQError, _mq_error)
    app.add_exception_handler(ApiProblem, _api_problem)
    app.add_exception_handler(HTTPException, _http_exception)
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(Exception, _unexpected)


_DESCRIPTIONS = {
    400: "The request body is not JSON text (UTF-8)",
    401: "No bearer token, or one that is unknown or revoked",
    403: "The token's role may not do this, or the broker refused the caller's authority",
    404: "No such resource",
    409: "A valid request that the queue manager or the broker refused: the state of what it names "
    "(in use, not empty, full, a neighbour that does not answer) or the broker's rules; the MQ "
    "reason says which",
    413: "The request body is larger than the API takes",
    422: "The request does not match its schema; the field errors say where",
    429: "Too many unknown or revoked tokens from this address or with this token: the sign-in "
    "throttle refuses it unchecked until the Retry-After header's seconds have passed",
    503: "The database is unreachable, or no broker (or MQTT listener) is serving the request",
}


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the problems an operation can return."""
    return {
        status: {
            "description": _DESCRIPTIONS[status],
            "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in statuses
    }
