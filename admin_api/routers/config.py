"""The broker's configuration as a TOML file, exported and imported as ``broker config`` does
(``broker.admin.config_backup``; ``docs/configuration.md`` describes the file).

Admins only: the file names every principal and rule, holds the MQTT principals' password
hashes and, with ``secrets``, the links' tokens. An import is audited as every change is; an
export is audited here, since it reads all of that. A file that cannot be imported changes
nothing: it is refused as the queue manager refuses (409, MQRCCF_ATTR_VALUE_ERROR), and the
problem's ``errors`` list every problem of it with its place.
"""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Body, Query, Request, Response
from fastapi.responses import JSONResponse

from admin_api.auditing import note, where
from admin_api.models import ConfigChange, ConfigReport, FieldError
from admin_api.problems import problem_response, responses, status_of
from admin_api.security import AdminToken
from admin_api.services import Services, Svc
from broker.admin import accounts, config_backup
from broker.admin.accounts import Token
from broker.admin.config_backup import Report
from broker.admin.config_changes import Change
from broker.admin.config_file import InvalidConfiguration, Problem

router = APIRouter(prefix="/api/v1/config", tags=["configuration"])

MEDIA_TYPE = "application/toml"
_NOT_IN_FILE_NAMES = re.compile(r"[^A-Za-z0-9._-]")

TomlFile = Annotated[
    bytes,
    Body(media_type=MEDIA_TYPE, description="a file of GET /api/v1/config (UTF-8 TOML)"),
]


@router.get(
    "",
    response_class=Response,
    summary="Export the configuration as a TOML file",
    responses={200: {"description": "The configuration file", "content": {MEDIA_TYPE: {}}}},
)
def export_configuration(
    token: AdminToken,
    svc: Svc,
    request: Request,
    retained: bool = Query(False, description="include the retained publications"),
    secrets: bool = Query(False, description="include the neighbours' link tokens"),
) -> Response:
    text = config_backup.export_text(svc.qm, retained=retained, secrets=secrets)
    _audit_export(svc, token, request, retained=retained, secrets=secrets)
    filename = _NOT_IN_FILE_NAMES.sub("_", f"{svc.qm.name}-config.toml")
    disposition = {"Content-Disposition": f'attachment; filename="{filename}"'}
    return Response(text, media_type=MEDIA_TYPE, headers=disposition)


@router.post(
    "",
    response_model=ConfigReport,
    summary="Import a configuration file: create and alter what it says (dry_run: only report it)",
    description="Objects the file leaves out are left as they are unless `prune`, which deletes them "
    "(system queues never). The file is sent as `application/toml` or `text/plain`. A file that cannot be "
    "imported changes nothing: the 409 problem (MQRCCF_ATTR_VALUE_ERROR) lists every problem in `errors`, "
    "each with its line, table, entry and key.",
    responses=responses(409, 422),
    openapi_extra={"requestBody": {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
def import_configuration(
    _: AdminToken,
    svc: Svc,
    request: Request,
    body: TomlFile = b"",
    dry_run: bool = Query(False, description="report what would change, change nothing"),
    prune: bool = Query(False, description="delete what the file leaves out"),
) -> ConfigReport | JSONResponse:
    try:
        return import_text(svc, request, body, dry_run=dry_run, prune=prune)
    except InvalidConfiguration as exc:
        return _refused(request, exc)


def import_text(svc: Services, request: Request, body: bytes, *, dry_run: bool, prune: bool) -> ConfigReport:
    """The import of the file ``body``, as the console makes it too; :class:`InvalidConfiguration`
    when the file cannot be imported (nothing changed)."""
    note(request.state, dry_run=dry_run, prune=prune)
    try:
        report = config_backup.import_text(svc.qm, _text(body), dry_run=dry_run, prune=prune)
    except InvalidConfiguration as exc:
        note(request.state, problems=[str(problem) for problem in exc.problems])
        raise
    note(request.state, changes=[change.line() for change in report.changes])
    return config_report(report)


def config_report(report: Report) -> ConfigReport:
    def change(found: Change) -> ConfigChange:
        return ConfigChange(action=found.action, kind=found.kind.noun, name=found.name, line=found.line())

    return ConfigReport(
        dry_run=report.dry_run,
        changes=[change(found) for found in report.changes],
        left=[change(found) for found in report.left],
        lines=report.lines(),
    )


def _text(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidConfiguration([Problem("the file is not UTF-8 text")]) from None


def _refused(request: Request, exc: InvalidConfiguration) -> JSONResponse:
    """The problem every MQ refusal is (a 409 naming the reason), with the file's problems in
    ``errors``: the request matched its schema, a string, and the broker refused what it says."""
    errors = [
        FieldError(loc=problem.location() or ["file"], msg=str(problem), type="configuration")
        for problem in exc.problems
    ]
    title, kind = f"{exc.reason_name} ({exc.reason})", f"/problems/mq/{exc.reason_name}"
    return problem_response(
        request,
        status_of(exc),
        kind,
        title,
        exc.detail,
        reason=exc.reason,
        reason_name=exc.reason_name,
        errors=errors,
    )


def _audit_export(svc: Services, token: Token, request: Request, *, retained: bool, secrets: bool) -> None:
    """An export reads every principal, hash and (with ``secrets``) token: it is recorded as
    a change would be."""
    path, resource = where(request.scope)
    with svc.qm.unit_of_work() as uow:
        accounts.record(
            uow.connection,
            token_id=token.token_id,
            principal=token.principal,
            method=request.method,
            path=path,
            resource=resource,
            summary={"retained": retained, "secrets": secrets},
            status=200,
        )
