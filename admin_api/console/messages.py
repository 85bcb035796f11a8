"""A queue's messages in the console: put a test message (MQ Explorer's "Put test message"),
get one, delete one or a selection, move or copy a selection to another queue, each through the
admin API's own handler (``admin_api.routers.queues.put``, ``admin_api.routers.messages``), so
the rules, the MQ reasons and the audit entries are the API's.

A get and a delete lose the message, so each asks first: the GET of ``.../messages/get`` or
``.../messages/delete`` with the MsgIds is a page showing the messages, and only its form's POST
takes them. The get's answer is a page showing the message it took, from the API's answer: the
message left the queue in the unit of work that made that answer. The browse list's selection
form carries the CSRF token on its POST buttons only, so "Delete selected" (a GET to the
confirmation page) never puts it in an address.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import StringConstraints

from admin_api.console.notes import Note, refusal
from admin_api.console.pages import PREFIX, REFUSALS, outcome, redirect, refused, render, segment
from admin_api.console.params import QueueName
from admin_api.console.queues import shown
from admin_api.console.sessions import FormValues, Operating, Operator, field
from admin_api.models import MAX_SELECTION, MSG_ID, MessageDescriptor, MessageIn, MessageOut, MessageSelection
from admin_api.problems import ApiProblem
from admin_api.routers import messages as api
from admin_api.routers import queues as queues_api
from admin_api.routers.publications import checked_folder
from admin_api.services import Services, Svc
from broker.protocol import rfh2
from queues import Browsed, Message
from queues.errors import MQError
from queues.ids import mq_timestamp_ms
from queues.message import MQENC_NATIVE, MQFMT_RF_HEADER_2, MQFMT_STRING

router = APIRouter(prefix=f"{PREFIX}/queues", include_in_schema=False)

MsgIdText = Annotated[str, StringConstraints(pattern=MSG_ID)]
MsgIdPath = Annotated[str, Path(pattern=MSG_ID)]  # a dead letter's page
OneMsgId = Annotated[str, Query(pattern=MSG_ID)]
MsgIds = Annotated[list[MsgIdText], Query(max_length=MAX_SELECTION)]
NUMBERS = ("priority", "persistence", "expiry")
TEXTS = ("correl_id", "reply_to_q", "reply_to_qmgr")


def _back(name: str) -> str:
    return f"{PREFIX}/queues/{segment(name)}"


def nothing_selected(what: str) -> Note:
    return Note(f"No {what} selected: nothing was done", refused=True)


def selected(values: FormValues) -> list[str]:
    """The MsgIds a form sent, each once; ValueError (a refusal) for one that is not 48 hex digits."""
    chosen = list(dict.fromkeys(values.get("msg_id", [])))
    wrong = [msg_id for msg_id in chosen if not re.fullmatch(MSG_ID, msg_id)]
    if wrong:
        raise ValueError(f"not a MsgId of 48 hex digits: {', '.join(wrong)}")
    return chosen


def each_selected(
    request: Request,
    back: str,
    values: FormValues,
    what: str,
    verb: str,
    one: Callable[[str], object],
    where: str = "",
) -> Response:
    """``one`` for every selected MsgId, each its own unit of work, so one the queue manager or
    the broker refuses (gone, its queue full) is named in the note and the others go on; a
    form that does not check out refuses them all. With none selected nothing is done, and the
    note says so."""

    def run() -> Note:
        chosen = selected(values)
        if not chosen:
            return nothing_selected(what)
        failed = []
        for msg_id in chosen:
            try:
                one(msg_id)
            except (MQError, ApiProblem) as exc:
                failed.append(f"{msg_id[:16]}...: {refused(exc).text.removeprefix('Refused: ')}")
        done = f"{verb} {len(chosen) - len(failed)} of {len(chosen)} {what}{where}"
        return Note("; ".join([done, *failed]), refused=bool(failed))

    return outcome(request, back, run)


def found(svc: Services, queue: str, msg_ids: list[str]) -> list[dict[str, Any]]:
    """The messages of ``queue`` with these MsgIds that are still there, as the console shows them."""
    return [shown(b) for msg_id in msg_ids for b in svc.qm.browse(queue, msg_id=bytes.fromhex(msg_id))]


def message_in(values: FormValues) -> MessageIn:
    """The put form as the API's body: the text, the MQMD fields filled in and, for MQHRF2, the
    text as the payload (MQSTR) behind an MQRFH2 holding the form's folders."""
    text = values.get("body", [""])[0].replace("\r\n", "\n")  # a browser sends a textarea's lines so
    fields: dict[str, Any] = {name: int(field(values, name)) for name in NUMBERS if field(values, name)}
    fields |= {name: field(values, name) for name in TEXTS if field(values, name)}
    fields["format"] = field(values, "format")
    if fields["format"] != MQFMT_RF_HEADER_2.strip():
        return MessageIn.model_validate({**fields, "body_text": text})
    folders = tuple(checked_folder(folder) for folder in values.get("folder", []) if folder.strip())
    header = rfh2.RFH2Header(encoding=MQENC_NATIVE, format=MQFMT_STRING, folders=folders)
    body = rfh2.encode(rfh2.RFH2Body((header,), text.encode("utf-8")), MQENC_NATIVE)
    return MessageIn.model_validate({**fields, "body_base64": base64.b64encode(body).decode("ascii")})


@router.post("/{name:name}/messages")
def put(request: Request, session: Operating, svc: Svc, values: FormValues, name: QueueName) -> Response:
    def put_it() -> str:
        done = queues_api.put(session.token, svc, message_in(values), request, name)
        return f"Put message {done.msg_id} on {name}"

    return outcome(request, _back(name), put_it)


@router.get("/{name:name}/messages/get")
def confirm_get(request: Request, session: Operator, svc: Svc, name: QueueName, msg_id: OneMsgId) -> Response:
    messages = found(svc, name, [msg_id])[:1]
    if not messages:
        return redirect(_back(name), refusal(f"no message with MsgId {msg_id} on {name}"), request=request)
    return render(
        request,
        "confirm_messages.html",
        session,
        heading=f"Get a message from {name}?",
        explanation=f"This takes the message below off {name} and shows it. It cannot be put back as it was.",
        action=f"{_back(name)}/messages/get",
        button="Yes, get it",
        cancel=_back(name),
        messages=messages,
    )


def _as_message(out: MessageOut) -> Message:
    """The message an answer of the API describes, to be shown as a browsed one is."""
    descriptor = out.model_dump(include=set(MessageDescriptor.model_fields))
    return Message(
        **{
            **descriptor,
            "body": base64.b64decode(out.body_base64),
            "msg_id": bytes.fromhex(out.msg_id),
            "correl_id": bytes.fromhex(out.correl_id),
            "format": out.format.ljust(len(MQFMT_STRING)),
        }
    )


@router.post("/{name:name}/messages/get")
def get(request: Request, session: Operating, svc: Svc, values: FormValues, name: QueueName) -> Response:
    try:
        chosen = selected(values)
        if len(chosen) != 1:
            raise ValueError("a get takes one message")
        got = _as_message(api.get_message(session.token, svc, request, name, chosen[0]))
    except REFUSALS as exc:
        return redirect(_back(name), refused(exc), request=request)
    put_at = mq_timestamp_ms(got.put_date, got.put_time) or 0
    return render(request, "gotten.html", session, queue=name, m=shown(Browsed((0, 0), got, put_at)))


@router.get("/{name:name}/messages/delete")
def confirm_delete(
    request: Request,
    session: Operator,
    svc: Svc,
    name: QueueName,
    msg_id: MsgIds = [],  # noqa: B006
) -> Response:
    if not msg_id:
        return redirect(_back(name), nothing_selected("messages"), request=request)
    messages = found(svc, name, list(dict.fromkeys(msg_id)))
    if not messages:
        return redirect(_back(name), refusal(f"none of those messages is on {name} now"), request=request)
    return render(
        request,
        "confirm_messages.html",
        session,
        heading=f"Delete {len(messages)} messages from {name}?",
        explanation="This removes the messages below. They cannot be recovered.",
        action=f"{_back(name)}/messages/delete",
        button=f"Yes, delete {len(messages)} messages",
        cancel=_back(name),
        messages=messages,
    )


@router.post("/{name:name}/messages/delete")
def delete(request: Request, session: Operating, svc: Svc, values: FormValues, name: QueueName) -> Response:
    return each_selected(
        request,
        _back(name),
        values,
        "messages",
        "Deleted",
        lambda msg_id: api.delete_message(session.token, svc, request, name, msg_id),
    )


def _transfer(
    request: Request, values: FormValues, name: str, verb: str, how: Callable[[MessageSelection], object]
) -> Response:
    def run() -> str | Note:
        chosen = selected(values)
        if not chosen:
            return nothing_selected("messages")
        target = field(values, "target")
        how(MessageSelection(msg_ids=chosen, target=target))
        return f"{verb} {len(chosen)} messages from {name} to {target}"

    return outcome(request, _back(name), run)


@router.post("/{name:name}/messages/move")
def move(request: Request, session: Operating, svc: Svc, values: FormValues, name: QueueName) -> Response:
    return _transfer(
        request, values, name, "Moved", lambda chosen: api.move(session.token, svc, chosen, request, name)
    )


@router.post("/{name:name}/messages/copy")
def copy(request: Request, session: Operating, svc: Svc, values: FormValues, name: QueueName) -> Response:
    return _transfer(
        request, values, name, "Copied", lambda chosen: api.copy(session.token, svc, chosen, request, name)
    )
