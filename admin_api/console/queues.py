"""Queues in the console: the paged list, one queue's attributes and messages, and the
changes (define, alter, purge, delete), each made by the admin API's own handler, so the
rules, the errors and the audit entries are the API's.

Purge and delete ask first: the GET of ``.../purge`` or ``.../delete`` is a page that says
what will go, and only its form's POST does it.

Put and get rates come from the queues' counters, sampled each time a queue is shown
(``admin_api.console.rates.QueueRates``); the list's rows refresh themselves every few
seconds (``?live=1``: the rows alone), so an open list shows the rates of the last minute.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse

from admin_api.console.pages import PREFIX, outcome, render, segment
from admin_api.console.params import MessageCursor, NameCursor, QueueName, QueuePattern
from admin_api.console.rates import QueueRate, QueueRates
from admin_api.console.sessions import FormValues, Operating, Operator, Viewing, field
from admin_api.models import QueueAttributes, QueueCreate
from admin_api.routers import queues as api
from admin_api.services import Svc
from broker.protocol.decoded import decode_message
from queues import Browsed, QueueDefinition, dlh
from queues.errors import MQError
from queues.formatting import body_text, hexdump, message_json, mqmd_fields
from queues.ids import now_ms
from queues.message import MQFMT_DEAD_LETTER_HEADER, Message
from queues.reasons import reason_name

router = APIRouter(prefix=f"{PREFIX}/queues", include_in_schema=False)

PAGE = 50
BROWSE_PAGE = 20
NUMBERS = ("max_depth", "max_msg_length", "backout_threshold", "def_priority", "def_persistence")


def _back(name: str) -> str:
    return f"{PREFIX}/queues/{segment(name)}"


def attributes(values: FormValues) -> dict[str, Any]:
    """The attributes filled in on a define or alter form, typed as the API's bodies want them."""
    changes: dict[str, Any] = {}
    for name in NUMBERS:
        if field(values, name):
            changes[name] = int(field(values, name))
    if "description" in values:
        changes["description"] = field(values, "description")
    for flag in ("put_enabled", "get_enabled"):
        if f"{flag}_shown" in values:  # the form had the checkbox: unchecked means disabled
            changes[flag] = flag in values
    return changes


# The MQMD as MQ Explorer names its fields, beside the words the console uses.
MQMD_NAMES = {
    "msg_id": "MsgId",
    "correl_id": "CorrelId",
    "format": "Format",
    "encoding": "Encoding",
    "ccsid": "CodedCharSetId",
    "msg_type": "MsgType",
    "report": "Report",
    "reply_to_q": "ReplyToQ",
    "reply_to_qmgr": "ReplyToQMgr",
    "user_id": "UserIdentifier",
    "persistence": "Persistence",
    "priority": "Priority",
    "expiry": "Expiry",
    "put_appl_type": "PutApplType",
    "put_appl_name": "PutApplName",
    "put_date": "PutDate",
    "put_time": "PutTime",
    "backout_count": "BackoutCount",
}
DUMP_BYTES = 4096  # of a body shown as a hex dump; the rest is counted


def shown(found: Browsed) -> dict[str, Any]:
    """A browsed message as the console shows it: every MQMD field, a dead letter's MQDLH
    decoded, the MQRFH2 folders and the ``<psc>`` command decoded
    (``broker.protocol.decoded``), the body as text and as a hex dump with offsets."""
    message = found.message
    dead_letter, message = _dead_letter(message)
    decoded = decode_message(message)
    text = body_text(message.body)
    return {
        "mqmd": message_json(found.message),
        "fields": [(MQMD_NAMES[name], value) for name, value in mqmd_fields(found.message).items()],
        "put_at": found.put_at,
        "dead_letter": dead_letter,
        "rfh2": decoded.as_json() if decoded is not None else None,
        "body_text": text,
        "dump": hexdump(message.body[:DUMP_BYTES]),
        "dump_more": max(0, len(message.body) - DUMP_BYTES),
    }


def _dead_letter(message: Message) -> tuple[dict[str, Any] | None, Message]:
    """A dead letter's MQDLH as the console shows it, and the original message it carries
    (described by the header, so that its MQRFH2 is decoded too); (None, the message) for
    any other message, or one whose header cannot be read."""
    if message.format != MQFMT_DEAD_LETTER_HEADER:
        return None, message
    try:
        header, original = dlh.unwrap(message)
    except MQError:
        return None, message
    return {
        "reason": f"{reason_name(header.reason)} ({header.reason})",
        "destination": f"{header.dest_q_name} on {header.dest_q_mgr_name or '(this queue manager)'}",
        "put_by": f"{header.put_appl_name} (type {header.put_appl_type})",
        "put_at": f"{header.put_date} {header.put_time}",
        "format": header.format.rstrip() or "(none)",
    }, original


def rates(request: Request, shown: list[QueueDefinition]) -> dict[str, QueueRate]:
    sampler: QueueRates = request.app.state.console_queue_rates
    return sampler.observe(now_ms(), shown)


@router.get("")
def list_queues(
    request: Request,
    session: Viewing,
    svc: Svc,
    pattern: QueuePattern = "*",
    after: NameCursor = "",
    live: bool = False,
) -> HTMLResponse:
    page = svc.qm.queue_page(pattern or "*", after=after, limit=PAGE)
    last = page[-1].definition.name if len(page) == PAGE else None
    return render(
        request,
        "_queue_rows.html" if live else "queues.html",
        session,
        page=page,
        rates=rates(request, [head.definition for head in page]),
        pattern=pattern,
        after=after,
        next_after=last,
    )


@router.post("")
def define_queue(request: Request, session: Operating, svc: Svc, values: FormValues) -> Response:
    name = field(values, "name")

    def define() -> str:
        body = QueueCreate.model_validate({"name": name, **attributes(values)})
        api.define_queue(session.token, svc, body, request, Response())
        return f"Queue {name} defined"

    return outcome(request, f"{PREFIX}/queues?pattern={segment(name)}", define)


@router.get("/{name:name}")
def show_queue(
    request: Request, session: Viewing, svc: Svc, name: QueueName, after: MessageCursor = ""
) -> HTMLResponse:
    definition = svc.qm.inquire_queue(name)
    page = svc.qm.browse(name, after=api.cursor(after or None), limit=BROWSE_PAGE)
    return render(
        request,
        "queue.html",
        session,
        queue=definition,
        rate=rates(request, [definition])[name],
        messages=[shown(found) for found in page],
        next_after=api.next_cursor(page, BROWSE_PAGE),
    )


@router.post("/{name:name}/alter")
def alter_queue(
    request: Request, session: Operating, svc: Svc, values: FormValues, name: QueueName
) -> Response:
    def alter() -> str:
        api.alter_queue(session.token, svc, QueueAttributes.model_validate(attributes(values)), request, name)
        return f"Queue {name} altered"

    return outcome(request, _back(name), alter)


@router.get("/{name:name}/purge")
def confirm_purge(request: Request, session: Operator, svc: Svc, name: QueueName) -> HTMLResponse:
    return render(request, "confirm.html", session, action="purge", queue=svc.qm.inquire_queue(name))


@router.post("/{name:name}/purge")
def purge(request: Request, session: Operating, svc: Svc, name: QueueName) -> Response:
    def purge_it() -> str:
        purged = api.purge(session.token, svc, request, name)
        return f"Purged {purged.purged} messages from {name}"

    return outcome(request, _back(name), purge_it)


@router.get("/{name:name}/delete")
def confirm_delete(request: Request, session: Operator, svc: Svc, name: QueueName) -> HTMLResponse:
    return render(request, "confirm.html", session, action="delete", queue=svc.qm.inquire_queue(name))


@router.post("/{name:name}/delete")
def delete_queue(
    request: Request, session: Operating, svc: Svc, values: FormValues, name: QueueName
) -> Response:
    def delete() -> str:
        api.delete_queue(session.token, svc, request, name, purge="purge" in values, force="force" in values)
        return f"Queue {name} deleted"

    return outcome(request, f"{PREFIX}/queues", delete)
