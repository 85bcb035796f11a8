"""One queue's messages by MsgId: got (destructively, the message in the answer), deleted,
moved or copied to another queue, as MQ Explorer and dmpmqmsg do.

A get is under syncpoint: the message leaves the queue in the unit of work that makes the
answer holding it. A move or copy of several messages is one unit of work
(``queues.transfers``): a target that is not defined (2085), inhibits puts (2051), is full
(2053) or cannot take a message's length (2030), or a message that is not there (2033), refuses
them all, and every message stays where it was. What the body names and is missing is a 409:
the queue the path names exists (a 404 says it does not). A copy keeps the MsgId, as MQ
Explorer's and dmpmqmsg's copies do (``docs/decisions.md``, "Web console").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fastapi import APIRouter, Request, Response

from admin_api.auditing import note
from admin_api.models import MessageOut, MessageSelection, Transferred
from admin_api.problems import NamedInBody, responses
from admin_api.routers.queues import MsgIdPath, QueuePath
from admin_api.security import OperatorToken
from admin_api.services import Svc
from queues import Message, MQError, QueueManager, UnitOfWork, transfers
from queues.formatting import message_json

router = APIRouter(prefix="/api/v1/queues", tags=["queues"])

Transfer = Callable[[QueueManager, str, Sequence[bytes], str], None]


def _taken(uow: UnitOfWork, request: Request, name: str, msg_id: str) -> Message:
    message = uow.get(name, msg_id=bytes.fromhex(msg_id))
    note(request.state, body_length=len(message.body))
    return message


@router.post(
    "/{name:name}/messages/{msg_id}/get",
    response_model=MessageOut,
    summary="Get one message by MsgId: it leaves the queue, and the answer holds it",
    responses=responses(404, 409),
)
def get_message(
    _: OperatorToken,
    svc: Svc,
    request: Request,
    name: str = QueuePath,
    msg_id: str = MsgIdPath,
) -> MessageOut:
    with svc.qm.unit_of_work() as uow:
        return MessageOut(**message_json(_taken(uow, request, name, msg_id)))


@router.delete(
    "/{name:name}/messages/{msg_id}",
    status_code=204,
    response_class=Response,
    summary="Delete one message by MsgId",
    responses=responses(404, 409),
)
def delete_message(
    _: OperatorToken,
    svc: Svc,
    request: Request,
    name: str = QueuePath,
    msg_id: str = MsgIdPath,
) -> Response:
    with svc.qm.unit_of_work() as uow:
        _taken(uow, request, name, msg_id)
    return Response(status_code=204)


def _transfer(how: Transfer, svc: Svc, body: MessageSelection, request: Request, name: str) -> Transferred:
    msg_ids = list(dict.fromkeys(msg_id.lower() for msg_id in body.msg_ids))
    note(request.state, target=body.target, msg_ids=msg_ids)
    svc.qm.inquire_queue(name)  # 2085 (404) for the queue the path names
    try:
        how(svc.qm, name, [bytes.fromhex(msg_id) for msg_id in msg_ids], body.target)
    except MQError as exc:
        raise NamedInBody(exc) from None
    return Transferred(queue=name, target=body.target, msg_ids=msg_ids)


@router.post(
    "/{name:name}/move",
    response_model=Transferred,
    summary="Move messages by MsgId to another queue, all in one unit of work",
    responses=responses(404, 409),
)
def move(
    _: OperatorToken,
    svc: Svc,
    body: MessageSelection,
    request: Request,
    name: str = QueuePath,
) -> Transferred:
    return _transfer(transfers.move, svc, body, request, name)


@router.post(
    "/{name:name}/copy",
    response_model=Transferred,
    summary="Copy messages by MsgId to another queue, their MQMD (MsgId too) kept",
    responses=responses(404, 409),
)
def copy(
    _: OperatorToken,
    svc: Svc,
    body: MessageSelection,
    request: Request,
    name: str = QueuePath,
) -> Transferred:
    return _transfer(transfers.copy, svc, body, request, name)
