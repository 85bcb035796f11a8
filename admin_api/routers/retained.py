"""Retained publications: listed and shown from the store, deleted by the broker (DeletePub).

A delete sends DeletePub for that publication's topic and subscription point,
so the broker checks the caller's publish authority, removes it at this broker
and, unless ``local=true``, passes the deletion on to its neighbours, exactly as
an application's DeletePub would.
"""

from __future__ import annotations

import base64

from fastapi import APIRouter, Path, Query, Request, Response

from admin_api.auditing import note
from admin_api.models import (
    DEFAULT_LIMIT,
    MAX_ID,
    MAX_LIMIT,
    MAX_SUB_POINT_LENGTH,
    MAX_TOPIC_LENGTH,
    USER_ID,
    XML_TEXT,
    MessageDescriptor,
    RetainedDetail,
    RetainedPage,
    RetainedSummary,
)
from admin_api.problems import not_found, responses
from admin_api.security import OperatorToken, ViewerToken
from admin_api.services import Services, Svc
from broker import store
from broker.client import BrokerClient, BrokerResponse
from broker.core.retained import RetainedPublication
from broker.protocol import rfh2
from broker.protocol.options import DelOpt
from queues.formatting import body_text, mqmd_fields

router = APIRouter(prefix="/api/v1/retained", tags=["retained publications"])

RetainedId = Path(ge=1, le=MAX_ID)


def _summary(retained_id: int, pub: RetainedPublication) -> RetainedSummary:
    payload = pub.rfh2.payload
    return RetainedSummary(
        id=retained_id,
        sub_point=pub.sub_point,
        topic=pub.topic,
        retained_at=pub.retained_at,
        expires_at=pub.expires_at,
        body_length=len(payload),
        body_text=body_text(payload),
    )


def _found(svc: Services, retained_id: int) -> RetainedPublication:
    with svc.qm.reading() as conn:
        pub = store.get_retained(conn, retained_id)
    if pub is None:
        raise not_found(f"retained publication {retained_id}")
    return pub


@router.get(
    "",
    response_model=RetainedPage,
    summary="Retained publications whose topic matches a pattern",
)
def list_retained(
    _: ViewerToken,
    svc: Svc,
    pattern: str = Query("#", min_length=1, max_length=MAX_TOPIC_LENGTH, pattern=XML_TEXT),
    sub_point: str | None = Query(None, max_length=MAX_SUB_POINT_LENGTH, pattern=XML_TEXT),
    after: int = Query(0, ge=0, le=MAX_ID, description="id of the last publication of the previous page"),
    limit: int = Query(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT),
) -> RetainedPage:
    with svc.qm.reading() as conn:
        page = store.list_retained(conn, pattern, sub_point, after_id=after, limit=limit)
    return RetainedPage(
        items=[_summary(i, p) for i, p in page], next_after=page[-1][0] if len(page) == limit else None
    )


@router.get(
    "/{retained_id}",
    response_model=RetainedDetail,
    summary="One retained publication, decoded",
    responses=responses(404),
)
def show_retained(
    _: ViewerToken,
    svc: Svc,
    retained_id: int = RetainedId,
) -> RetainedDetail:
    pub = _found(svc, retained_id)
    command = pub.publish
    return RetainedDetail(
        **_summary(retained_id, pub).model_dump(),
        topics=list(command.topics),
        pub_time=command.pub_time,
        seq_num=command.seq_num,
        folders=[f for f in pub.rfh2.folders if rfh2.folder_name(f) != "psc"],
        body_base64=base64.b64encode(pub.rfh2.payload).decode("ascii"),
        mqmd=MessageDescriptor(**mqmd_fields(pub.message)),
    )


@router.delete(
    "/{retained_id}",
    status_code=204,
    response_class=Response,
    summary="Delete it through the broker (DeletePub)",
    responses=responses(404, 409),
)
def delete_retained(
    token: OperatorToken,
    svc: Svc,
    request: Request,
    retained_id: int = RetainedId,
    local: bool = Query(False, description="delete it at this broker only (DelOpt Local)"),
    user_id: str | None = Query(None, pattern=USER_ID, description="act as this user"),
) -> Response:
    pub = _found(svc, retained_id)
    user = user_id or token.principal
    note(request.state, topic=pub.topic, sub_point=pub.sub_point, user_id=user, local=local)

    def delete_pub(client: BrokerClient) -> BrokerResponse:
        return client.delete_publication(
            pub.topic,
            options=DelOpt.Local if local else DelOpt(0),
            sub_point=pub.sub_point or None,
            user_id=user,
        )

    svc.commands.send(delete_pub)
    return Response(status_code=204)
