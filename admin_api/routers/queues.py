"""Queues, their messages and the dead-letter queue: what runmqsc, amqsput, amqsbcg and
runmqdlq do, over HTTP.

Queue names may contain ``/`` (MQ allows it): a client encodes it (``APP%2FIN``) and
the name stays one path segment (``admin_api.object_names``). Browsing pages with the queue's browse
cursor (``after=priority:id``), so a page costs the same at any depth; the list
of queues pages with limit/offset, since a queue manager holds thousands of
queues, not millions.

Retrying a dead letter is one unit of work: get it from the dead-letter queue,
strip its MQDLH, restore the Format, Encoding and CodedCharSetId the header
kept, and put it to its DestQName with its original MsgId and context, as
runmqdlq's RETRY does. If the put fails (the queue is still full, say) nothing
moves. Forwarding is the same to a queue the caller names (runmqdlq's FWD).
"""

from __future__ import annotations

import base64
from dataclasses import asdict
from urllib.parse import quote

from fastapi import APIRouter, Path, Query, Request, Response

from admin_api.auditing import note
from admin_api.models import (
    CURSOR,
    DEFAULT_LIMIT,
    MAX_ID,
    MAX_LIMIT,
    MSG_ID,
    QUEUE_NAME,
    QUEUE_PATTERN,
    BrowsedMessage,
    BrowsePage,
    DeadLetter,
    DeadLetterHeader,
    DeadLetterPage,
    Destination,
    MessageIn,
    Purged,
    PutResult,
    Queue,
    QueueAttributes,
    QueueCreate,
    QueuePage,
    Retried,
)
from admin_api.problems import not_found, responses
from admin_api.security import OperatorToken, ViewerToken
from admin_api.services import Services, Svc
from broker.admin import subscriber_queues
from queues import DEAD_LETTER_QUEUE, Browsed, Message, NoMessageAvailable, UnitOfWork, dlh
from queues.definition import QueueDefinition
from queues.errors import MQError
from queues.formatting import body_text, message_json
from queues.message import ID_LENGTH, MQFMT_NONE, MQFMT_STRING, derive
from queues.reasons import Reason, reason_name

router = APIRouter(prefix="/api/v1", tags=["queues"])

QueuePath = Path(pattern=QUEUE_NAME, examples=["SCORES"])
Limit = Query(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT)
MsgIdPath = Path(pattern=MSG_ID, description="MsgId in 48 hex digits")
After = Query(None, pattern=CURSOR, description="the cursor of the last message of the previous page")


def _queue(definition: QueueDefinition) -> Queue:
    return Queue.model_validate(asdict(definition))


def _location(name: str) -> str:
    return f"/api/v1/queues/{quote(name, safe='')}"


def cursor(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    priority, _, row_id = text.partition(":")
    return int(priority), int(row_id)


def _padded_id(digits: str | None) -> bytes:
    """MsgId/CorrelId from hex digits, NUL-padded to 24 bytes as MQ pads a short id."""
    return bytes.fromhex(digits or "").ljust(ID_LENGTH, b"\x00")


def _browsed(found: Browsed) -> BrowsedMessage:
    priority, row_id = found.cursor
    return BrowsedMessage(**message_json(found.message), cursor=f"{priority}:{row_id}", put_at=found.put_at)


def next_cursor(page: list[Browsed], limit: int) -> str | None:
    if len(page) < limit:
        return None
    priority, row_id = page[-1].cursor
    return f"{priority}:{row_id}"


# -- messages (matched before the queue itself: see the module docstring) ----------------------


@router.get(
    "/queues/{name:name}/messages",
    response_model=BrowsePage,
    summary="Browse messages without removing them",
    responses=responses(404),
)
def browse(
    _: ViewerToken,
    svc: Svc,
    name: str = QueuePath,
    after: str | None = After,
    limit: int = Limit,
) -> BrowsePage:
    page = svc.qm.browse(name, after=cursor(after), limit=limit)
    return BrowsePage(items=[_browsed(found) for found in page], next_after=next_cursor(page, limit))


@router.post(
    "/queues/{name:name}/messages",
    status_code=201,
    response_model=PutResult,
    summary="Put a message",
    responses=responses(404, 409, 413),
)
def put(
    token: OperatorToken,
    svc: Svc,
    body: MessageIn,
    request: Request,
    name: str = QueuePath,
) -> PutResult:
    default_format = MQFMT_STRING if body.body_base64 is None else MQFMT_NONE
    message = Message(
        body=body.body(),
        msg_id=_padded_id(body.msg_id),
        correl_id=_padded_id(body.correl_id),
        format=(body.format if body.format is not None else default_format).ljust(8),
        encoding=body.encoding,
        ccsid=body.ccsid,
        msg_type=body.msg_type,
        report=body.report,
        reply_to_q=body.reply_to_q,
        reply_to_qmgr=body.reply_to_qmgr,
        user_id=body.user_id or token.principal,
        persistence=body.persistence,
        priority=body.priority,
        expiry=body.expiry,
    )
    note(request.state, body_length=len(message.body))
    msg_id = svc.qm.put(name, message).hex()
    note(request.state, msg_id=msg_id)
    return PutResult(queue=name, msg_id=msg_id)


@router.post(
    "/queues/{name:name}/purge",
    response_model=Purged,
    summary="Remove every message (CLEAR QLOCAL)",
    responses=responses(404),
)
def purge(
    _: OperatorToken,
    svc: Svc,
    request: Request,
    name: str = QueuePath,
) -> Purged:
    purged = svc.qm.purge_queue(name)
    note(request.state, purged=purged)
    return Purged(queue=name, purged=purged, deleted=False)


# -- queues ------------------------------------------------------------------------------------


@router.get(
    "/queues",
    response_model=QueuePage,
    summary="Queues with their depth and attributes",
)
def list_queues(
    _: ViewerToken,
    svc: Svc,
    pattern: str = Query("*", pattern=QUEUE_PATTERN, description="name pattern with * and ?"),
    limit: int = Limit,
    offset: int = Query(0, ge=0, le=MAX_ID),
) -> QueuePage:
    found = svc.qm.list_queues(pattern, offset=offset, limit=limit)
    return QueuePage(
        items=[_queue(q) for q in found],
        total=svc.qm.count_queues(pattern),
        offset=offset,
        limit=limit,
    )


@router.post(
    "/queues",
    status_code=201,
    response_model=Queue,
    summary="Define a local queue (DEFINE QLOCAL)",
    responses=responses(409),
)
def define_queue(
    _: OperatorToken,
    svc: Svc,
    body: QueueCreate,
    request: Request,
    response: Response,
) -> Queue:
    note(request.state, queue=body.name, replace=body.replace, attributes=body.changes())
    definition = svc.qm.define_queue(body.name, replace_existing=body.replace, **body.changes())
    response.headers["Location"] = _location(body.name)
    return _queue(definition)


@router.get(
    "/queues/{name:name}",
    response_model=Queue,
    summary="One queue's attributes and depth",
    responses=responses(404),
)
def show_queue(
    _: ViewerToken,
    svc: Svc,
    name: str = QueuePath,
) -> Queue:
    return _queue(svc.qm.inquire_queue(name))


@router.patch(
    "/queues/{name:name}",
    response_model=Queue,
    summary="Change a queue's attributes (ALTER QLOCAL)",
    responses=responses(404),
)
def alter_queue(
    _: OperatorToken,
    svc: Svc,
    body: QueueAttributes,
    request: Request,
    name: str = QueuePath,
) -> Queue:
    note(request.state, attributes=body.changes())
    return _queue(svc.qm.alter_queue(name, **body.changes()))


@router.delete(
    "/queues/{name:name}",
    response_model=Purged,
    summary="Delete a queue (DELETE QLOCAL)",
    description="Refused (409) while a running broker uses the queue (its streams, control queue, "
    "dead-letter queue, a neighbour's transmission queue), while it holds messages unless purge=true, "
    "and while subscriptions deliver to it unless force=true, which deregisters them through the "
    "broker first (503 when no broker runs).",
    responses=responses(404, 409, 503),
)
def delete_queue(
    _: OperatorToken,
    svc: Svc,
    request: Request,
    name: str = QueuePath,
    purge: bool = Query(False, description="remove its messages first"),
    force: bool = Query(False, description="deregister the subscriptions that deliver to it first"),
) -> Purged:
    admin = svc.settings.admin_group
    purged = subscriber_queues.delete_queue(
        svc.qm,
        name,
        purge=purge,
        force=force,
        deregister=lambda identity: svc.commands.send(subscriber_queues.deregistration(identity, admin)),
    )
    note(request.state, purged=purged)
    return Purged(queue=name, purged=purged, deleted=True)


# -- the dead-letter queue ---------------------------------------------------------------------


def dead_letter(found: Browsed) -> DeadLetter:
    message = found.message
    browsed = _browsed(found).model_dump()
    try:
        header, data = dlh.decode(message.body, message.encoding)
    except MQError:
        return DeadLetter(**browsed, dead_letter=None, data_text=None, data_base64=None)
    return DeadLetter(
        **browsed,
        dead_letter=DeadLetterHeader(**asdict(header), reason_name=reason_name(header.reason)),
        data_text=body_text(data),
        data_base64=base64.b64encode(data).decode("ascii"),
    )


def _take_dead_letter(uow: UnitOfWork, msg_id: str) -> Message:
    try:
        return uow.get(DEAD_LETTER_QUEUE, msg_id=bytes.fromhex(msg_id))
    except NoMessageAvailable:
        raise not_found(f"dead letter {msg_id}") from None


@router.get(
    "/dead-letters",
    response_model=DeadLetterPage,
    summary="Browse the dead-letter queue, each message with its decoded MQDLH",
    responses=responses(404),
)
def dead_letters(
    _: ViewerToken,
    svc: Svc,
    after: str | None = After,
    limit: int = Limit,
) -> DeadLetterPage:
    page = svc.qm.browse(DEAD_LETTER_QUEUE, after=cursor(after), limit=limit)
    return DeadLetterPage(items=[dead_letter(found) for found in page], next_after=next_cursor(page, limit))


@router.post(
    "/dead-letters/{msg_id}/retry",
    response_model=Retried,
    summary="Put a dead letter back on its destination queue, as it was before",
    responses=responses(404, 409, 413),
)
def retry(
    _: OperatorToken,
    svc: Svc,
    request: Request,
    msg_id: str = MsgIdPath,
) -> Retried:
    return _restore(svc, request, msg_id, None)


@router.post(
    "/dead-letters/{msg_id}/forward",
    response_model=Retried,
    summary="Put a dead letter's original message, without its MQDLH, on another queue",
    responses=responses(404, 409, 413),
)
def forward(
    _: OperatorToken,
    svc: Svc,
    body: Destination,
    request: Request,
    msg_id: str = MsgIdPath,
) -> Retried:
    return _restore(svc, request, msg_id, body.queue)


def _restore(svc: Services, request: Request, msg_id: str, queue: str | None) -> Retried:
    """The dead letter's original message (``dlh.unwrap``) put on ``queue``, or on the queue
    its MQDLH names when ``queue`` is None, in the unit of work that gets it."""
    with svc.qm.unit_of_work() as uow:
        message = _take_dead_letter(uow, msg_id)
        header, original = dlh.unwrap(message)
        target = queue or header.dest_q_name
        note(request.state, queue=target, reason=header.reason)
        if queue is None and header.dest_q_mgr_name not in ("", svc.qm.name):
            raise MQError(
                Reason.MQRC_UNKNOWN_REMOTE_Q_MGR,
                f"the message was bound for queue manager {header.dest_q_mgr_name}, not {svc.qm.name}",
            )
        uow.put(target, derive(original, backout_count=0))
    return Retried(msg_id=msg_id, queue=target, reason=header.reason, reason_name=reason_name(header.reason))


@router.delete(
    "/dead-letters/{msg_id}",
    status_code=204,
    response_class=Response,
    summary="Discard a dead letter (remove it from the dead-letter queue)",
    responses=responses(404),
)
def discard(
    _: OperatorToken,
    svc: Svc,
    request: Request,
    msg_id: str = MsgIdPath,
) -> Response:
    with svc.qm.unit_of_work() as uow:
        message = _take_dead_letter(uow, msg_id)
        note(request.state, body_length=len(message.body))
    return Response(status_code=204)
