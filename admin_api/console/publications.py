"""Publishing from the console: the topic, the body, RetainPub and extra MQRFH2 folders, sent
by the admin API's own handler (``admin_api.routers.publications.publish``) as a Publish
command on the broker's stream queue, so the router handles it as an application's
publication: the signed-in principal's authority, the retained store, the neighbours."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse

from admin_api.console.notes import Note
from admin_api.console.pages import PREFIX, outcome, render
from admin_api.console.sessions import FormValues, Operating, Viewing, field
from admin_api.models import PublicationIn
from admin_api.routers import publications as api
from admin_api.services import Svc

router = APIRouter(prefix=f"{PREFIX}/publish", include_in_schema=False)

BACK = f"{PREFIX}/publish"


@router.get("")
def publish_page(request: Request, session: Viewing) -> HTMLResponse:
    return render(request, "publish.html", session)


def publication_in(values: FormValues) -> PublicationIn:
    """The form as the API's body: a textarea's lines as a browser sends them (CRLF) become LF."""
    return PublicationIn.model_validate(
        {
            "topics": [field(values, "topic")],
            "body_text": values.get("body", [""])[0].replace("\r\n", "\n"),
            "retain": "retain" in values,
            "folders": [folder for folder in values.get("folder", []) if folder.strip()],
        }
    )


@router.post("")
def publish(request: Request, session: Operating, svc: Svc, values: FormValues) -> Response:
    def publish_it() -> Note:
        body = publication_in(values)
        done = api.publish(session.token, svc, body, request)
        retained = " (retained)" if body.retain else ""
        refused = [f"{w.topic}: {w.reason_name} ({w.reason})" for w in done.warnings]
        text = "; ".join([f"Published on {', '.join(done.topics)}{retained}", *refused])
        return Note(text, refused=bool(refused))

    return outcome(request, BACK, publish_it)
