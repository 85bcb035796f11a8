"""The configuration backup in the console (admins only): the export downloaded as a TOML file,
and a file uploaded, dry-run first (the page lists what the import would create, alter, delete
and leave, or every problem of the file with its place), then applied after a confirmation.

Both go through the admin API's handlers (``admin_api.routers.config``), so the checks, the
problems and the audit entries are the API's. The upload is the console's one multipart form:
it is read here (the standard library's MIME parser) and its CSRF token checked as every
other form's is. The confirmation carries the file's text on to the import, which compares
it with the broker again, so it applies what the broker needs then.
"""

from __future__ import annotations

from email import policy
from email.parser import BytesParser
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import HTMLResponse

from admin_api.console.pages import HEADERS, PREFIX, outcome, render
from admin_api.console.sessions import Admin, Administering, FormValues, acting
from admin_api.problems import status_of
from admin_api.routers import config as api
from admin_api.services import Svc
from broker.admin.accounts import Role
from broker.admin.config_file import InvalidConfiguration

router = APIRouter(prefix=f"{PREFIX}/config", include_in_schema=False)

PAGE = f"{PREFIX}/config"
FILE_FIELD = "file"
TEXT_FIELD = "configuration"
Upload = dict[str, bytes]


async def uploaded(request: Request) -> Upload:
    """The fields of a ``multipart/form-data`` POST, each as bytes (the first of a name)."""
    content_type = request.headers.get("content-type", "")
    return multipart_fields(content_type, await request.body())


def multipart_fields(content_type: str, body: bytes) -> Upload:
    """What a multipart body holds, by field name; nothing for any other body."""
    head = b"Content-Type: " + content_type.encode("latin-1", "replace") + b"\r\n\r\n"
    message = BytesParser(policy=policy.HTTP).parsebytes(head + body)
    if not message.is_multipart():
        return {}
    found: Upload = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if isinstance(name, str) and name not in found:
            payload = part.get_payload(decode=True)
            found[name] = payload if isinstance(payload, bytes) else b""
    return found


@router.get("")
def configuration(request: Request, session: Admin) -> HTMLResponse:
    return render(request, "config.html", session)


@router.get("/export")
def export(
    request: Request, session: Admin, svc: Svc, retained: bool = False, secrets: bool = False
) -> Response:
    response = api.export_configuration(session.token, svc, request, retained=retained, secrets=secrets)
    response.headers.update(HEADERS)
    return response


@router.post("/dry-run")
def dry_run(
    request: Request, session: Admin, svc: Svc, fields: Annotated[Upload, Depends(uploaded)]
) -> HTMLResponse:
    """The report of an import that changes nothing, with the form that makes it."""
    form = {name: [value.decode("utf-8", "replace")] for name, value in fields.items() if name != FILE_FIELD}
    acting(Role.ADMIN)(request, session, form)  # the origin and the CSRF token, as every form's
    prune, body = "prune" in form, fields.get(FILE_FIELD, b"")
    try:
        report = api.import_text(svc, request, body, dry_run=True, prune=prune)
    except InvalidConfiguration as exc:
        return render(request, "config.html", session, status=status_of(exc), problems=exc.problems)
    return render(request, "config.html", session, report=report, text=body.decode("utf-8"), prune=prune)


@router.post("/import")
def apply(request: Request, session: Administering, svc: Svc, values: FormValues) -> Response:
    text, prune = values.get(TEXT_FIELD, [""])[0], "prune" in values

    def import_it() -> str:
        report = api.import_text(svc, request, text.encode("utf-8"), dry_run=False, prune=prune)
        if not report.changes:
            return "Imported: no changes"
        count = len(report.changes)
        return f"Imported {count} change{'s' if count != 1 else ''}: " + "; ".join(
            c.line for c in report.changes
        )

    return outcome(request, PAGE, import_it)
