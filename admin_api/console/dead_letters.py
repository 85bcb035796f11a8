"""The dead-letter queue in the console: each message with its MQDLH reason in words, where
it was going and how long ago it arrived, and a page of its own with the MQDLH decoded above the
message it carries; retried (put back on its original queue, as runmqdlq's RETRY does),
forwarded to another queue without its MQDLH (runmqdlq's FWD) or discarded, one or many at a
time, through the admin API's handlers. Discarding asks first, on a page showing what goes."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse

from admin_api.console.messages import MsgIdPath, MsgIds, each_selected, found, nothing_selected
from admin_api.console.notes import refusal
from admin_api.console.pages import PREFIX, redirect, render
from admin_api.console.params import MessageCursor
from admin_api.console.sessions import FormValues, Operating, Operator, Viewing, field
from admin_api.models import Destination
from admin_api.routers import queues as api
from admin_api.services import Svc
from queues import DEAD_LETTER_QUEUE

router = APIRouter(prefix=f"{PREFIX}/dead-letters", include_in_schema=False)

PAGE = 50
BACK = f"{PREFIX}/dead-letters"
WHAT = "dead letters"


@router.get("")
def list_dead_letters(
    request: Request, session: Viewing, svc: Svc, after: MessageCursor = ""
) -> HTMLResponse:
    page = svc.qm.browse(DEAD_LETTER_QUEUE, after=api.cursor(after or None), limit=PAGE)
    return render(
        request,
        "dead_letters.html",
        session,
        letters=[api.dead_letter(found) for found in page],
        next_after=api.next_cursor(page, PAGE),
    )


@router.post("/retry")
def retry(request: Request, session: Operating, svc: Svc, values: FormValues) -> Response:
    return each_selected(
        request, BACK, values, WHAT, "Retried", lambda msg_id: api.retry(session.token, svc, request, msg_id)
    )


@router.post("/forward")
def forward(request: Request, session: Operating, svc: Svc, values: FormValues) -> Response:
    queue = field(values, "queue")

    def forward_one(msg_id: str) -> object:
        return api.forward(session.token, svc, Destination(queue=queue), request, msg_id)

    return each_selected(request, BACK, values, WHAT, "Forwarded", forward_one, f" to {queue}")


@router.get("/discard")
def confirm_discard(
    request: Request,
    session: Operator,
    svc: Svc,
    msg_id: MsgIds = [],  # noqa: B006
) -> Response:
    if not msg_id:
        return redirect(BACK, nothing_selected(WHAT), request=request)
    letters = found(svc, DEAD_LETTER_QUEUE, list(dict.fromkeys(msg_id)))
    if not letters:
        return redirect(
            BACK, refusal("none of those dead letters is on the dead-letter queue now"), request=request
        )
    return render(
        request,
        "confirm_messages.html",
        session,
        heading=f"Discard {len(letters)} dead letters?",
        explanation="This removes the dead letters below. They cannot be recovered.",
        action=f"{BACK}/discard",
        button=f"Yes, discard {len(letters)} dead letters",
        cancel=BACK,
        messages=letters,
    )


@router.post("/discard")
def discard(request: Request, session: Operating, svc: Svc, values: FormValues) -> Response:
    return each_selected(
        request,
        BACK,
        values,
        WHAT,
        "Discarded",
        lambda msg_id: api.discard(session.token, svc, request, msg_id),
    )


@router.get("/{msg_id}")
def show_dead_letter(request: Request, session: Viewing, svc: Svc, msg_id: MsgIdPath) -> Response:
    letter = found(svc, DEAD_LETTER_QUEUE, [msg_id])
    if not letter:
        return redirect(
            BACK, refusal(f"dead letter {msg_id} is not on the dead-letter queue"), request=request
        )
    return render(request, "dead_letter.html", session, m=letter[0])
