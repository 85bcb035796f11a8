"""The dead-letter queue in the console: each message with its MQDLH reason in words, where
it was going and how long ago it arrived; retried (put back on its original queue, as
runmqdlq's RETRY does) or discarded, one or many at a time, through the admin API's handlers."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse

from admin_api.console.notes import Note
from admin_api.console.pages import PREFIX, outcome, render
from admin_api.console.params import MessageCursor
from admin_api.console.sessions import FormValues, Operating, Viewing
from admin_api.problems import ApiProblem
from admin_api.routers import queues as api
from admin_api.services import Svc
from queues import DEAD_LETTER_QUEUE
from queues.errors import MQError

router = APIRouter(prefix=f"{PREFIX}/dead-letters", include_in_schema=False)

PAGE = 50
BACK = f"{PREFIX}/dead-letters"


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


def _each(request: Request, values: FormValues, verb: str, one: Callable[[str], object]) -> Response:
    """``one`` for every selected MsgId; each is its own unit of work, so one that cannot be
    retried (its queue is full, say) stays on the dead-letter queue and the others go on."""

    def run() -> Note:
        chosen = values.get("msg_id", [])
        failed = []
        for msg_id in chosen:
            try:
                one(msg_id)
            except (MQError, ApiProblem) as exc:
                failed.append(f"{msg_id[:16]}...: {exc}")
        done = f"{verb} {len(chosen) - len(failed)} of {len(chosen)} dead letters"
        return Note("; ".join([done, *failed]), refused=bool(failed))

    return outcome(request, BACK, run)


@router.post("/retry")
def retry(request: Request, session: Operating, svc: Svc, values: FormValues) -> Response:
    return _each(request, values, "Retried", lambda msg_id: api.retry(session.token, svc, request, msg_id))


@router.post("/discard")
def discard(request: Request, session: Operating, svc: Svc, values: FormValues) -> Response:
    return _each(
        request, values, "Discarded", lambda msg_id: api.discard(session.token, svc, request, msg_id)
    )
