"""Subscriptions: listed and shown from the state tables, created and deleted by the broker.

A create is the RegSub the CLI's ``broker subscribe`` sends, a delete the DeregSub
naming exactly that subscription (its identity, subscription point, topic and,
when it has them, CorrelId and VariableUserId), both with MQMD UserIdentifier =
``user_id`` if given (operators and admins only may act as someone else) else
the token's principal. The broker applies its own rules: authority per topic,
one user per identity, administrators (``admin_group``) acting for others.

Listings page by keyset (``after`` = the last id), so the millionth page costs
what the first does.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import JSONResponse

from admin_api.auditing import note
from admin_api.models import (
    DEFAULT_LIMIT,
    MAX_ID,
    MAX_LIMIT,
    MAX_SUB_POINT_LENGTH,
    MAX_TOPIC_LENGTH,
    QUEUE_NAME,
    USER_ID,
    XML_TEXT,
    Registered,
    ResponseItem,
    SubscriptionCreate,
    SubscriptionOut,
    SubscriptionPage,
)
from admin_api.problems import not_found, responses
from admin_api.security import OperatorToken, ViewerToken
from admin_api.services import Svc
from broker import store
from broker.client import BrokerClient, BrokerResponse
from broker.core.subscription import DEFAULT_SUB_POINT, Identity, Subscription, SubscriptionKey
from broker.protocol.options import RegOpt
from broker.store.listings import subscription_json
from queues.reasons import Reason, reason_name

router = APIRouter(prefix="/api/v1/subscriptions", tags=["subscriptions"])

SubscriptionId = Path(ge=1, le=MAX_ID)


def subscription_out(sub_id: int, sub: Subscription) -> SubscriptionOut:
    return SubscriptionOut.model_validate(subscription_json(sub_id, sub))


def warnings_of(response: BrokerResponse) -> list[ResponseItem]:
    return [
        ResponseItem(reason=i.reason, reason_name=reason_name(i.reason), topic=i.topic, parameter=i.parameter)
        for i in response.items
    ]


@router.get(
    "",
    response_model=SubscriptionPage,
    summary="Subscriptions, filtered and paged",
)
def list_subscriptions(
    _: ViewerToken,
    svc: Svc,
    topic: str | None = Query(
        None,
        min_length=1,
        max_length=MAX_TOPIC_LENGTH,
        pattern=XML_TEXT,
        description="an MQ topic pattern the subscription's topic must match",
    ),
    sub_point: str | None = Query(None, max_length=MAX_SUB_POINT_LENGTH, pattern=XML_TEXT),
    queue: str | None = Query(None, pattern=QUEUE_NAME),
    qmgr: str | None = Query(None, pattern=QUEUE_NAME),
    user: str | None = Query(None, pattern=USER_ID),
    protocol: Literal["mqrfh2", "mqtt"] | None = Query(
        None, description="mqtt: the subscriptions of MQTT sessions; mqrfh2: every other"
    ),
    after: int = Query(0, ge=0, le=MAX_ID, description="id of the last subscription of the previous page"),
    limit: int = Query(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT),
) -> SubscriptionPage:
    where = store.SubscriptionFilter(
        topic=topic, sub_point=sub_point, queue=queue, q_mgr=qmgr, user_id=user, protocol=protocol
    )
    with svc.qm.reading() as conn:
        page = store.list_subscriptions(conn, where, after_id=after, limit=limit)
    return SubscriptionPage(
        items=[subscription_out(i, s) for i, s in page],
        next_after=page[-1][0] if len(page) == limit else None,
    )


@router.get(
    "/{subscription_id}",
    response_model=SubscriptionOut,
    summary="One subscription",
    responses=responses(404),
)
def show_subscription(
    _: ViewerToken,
    svc: Svc,
    subscription_id: int = SubscriptionId,
) -> SubscriptionOut:
    with svc.qm.reading() as conn:
        sub = store.get_subscription(conn, subscription_id)
    if sub is None:
        raise not_found(f"subscription {subscription_id}")
    return subscription_out(subscription_id, sub)


@router.post(
    "",
    status_code=201,
    response_model=Registered,
    summary="Register subscriptions through the broker (RegSub)",
    description="201 when a subscription was created, 200 when existing ones were changed or left as"
    " they were; `warnings` lists the topics the broker refused (3081) or warned about.",
    responses={
        200: {"description": "Existing subscriptions re-registered", "model": Registered},
        **responses(404, 409),
    },
)
def create_subscription(
    token: OperatorToken,
    svc: Svc,
    body: SubscriptionCreate,
    request: Request,
) -> JSONResponse:
    user = body.user_id or token.principal
    correl_id = bytes.fromhex(body.correl_id) if body.correl_id else None
    identity = Identity(body.qmgr or svc.qm.name, body.queue, correl_id)
    sub_point = body.sub_point or DEFAULT_SUB_POINT
    keys = {topic: SubscriptionKey(identity, sub_point, topic, None) for topic in body.topics}
    note(request.state, topics=list(keys), queue=body.queue, user_id=user, options=int(body.options()))
    with svc.qm.reading() as conn:
        existed = {topic for topic, key in keys.items() if store.find_subscription(conn, key) is not None}

    def regsub(client: BrokerClient) -> BrokerResponse:
        return client.subscribe(
            body.topics,
            body.queue,
            q_mgr=body.qmgr,
            options=body.options(),
            sub_point=body.sub_point or None,
            sub_name=body.sub_name,
            sub_identity=body.sub_identity,
            sub_user_data=body.sub_user_data,
            correl_id=correl_id,
            user_id=user,
            expiry=body.expiry,
        )

    response = svc.commands.send(regsub)
    refused = {item.topic for item in response.items if item.reason == Reason.MQRCCF_NOT_AUTHORIZED}
    with svc.qm.reading() as conn:
        found = [store.find_subscription(conn, key) for topic, key in keys.items() if topic not in refused]
    subscriptions = [subscription_out(i, s) for i, s in filter(None, found)]
    created = [s for s in subscriptions if s.topic not in existed]
    note(request.state, completion=response.completion, ids=[s.id for s in subscriptions])
    result = Registered(
        completion=response.completion,  # type: ignore[arg-type]  # error raised in send()
        subscriptions=subscriptions,
        warnings=warnings_of(response),
    )
    headers = {"Location": f"/api/v1/subscriptions/{created[0].id}"} if created else None
    return JSONResponse(result.model_dump(mode="json"), status_code=201 if created else 200, headers=headers)


@router.delete(
    "/{subscription_id}",
    status_code=204,
    response_class=Response,
    summary="Deregister a subscription through the broker (DeregSub)",
    responses=responses(404, 409),
)
def delete_subscription(
    token: OperatorToken,
    svc: Svc,
    request: Request,
    subscription_id: int = SubscriptionId,
    user_id: str | None = Query(None, pattern=USER_ID, description="act as this user"),
) -> Response:
    with svc.qm.reading() as conn:
        sub = store.get_subscription(conn, subscription_id)
    if sub is None:
        raise not_found(f"subscription {subscription_id}")
    user = user_id or token.principal
    identity = sub.identity
    options = RegOpt(sub.options) & (RegOpt.CorrelAsId | RegOpt.VariableUserId)
    note(request.state, topic=sub.key.topic, queue=identity.queue, user_id=user)

    def deregsub(client: BrokerClient) -> BrokerResponse:
        return client.unsubscribe(
            sub.key.topic,
            identity.queue,
            q_mgr=identity.q_mgr,
            options=options,
            sub_point=sub.key.sub_point or None,
            filter=sub.key.filter,
            correl_id=identity.correl_id,
            user_id=user,
        )

    svc.commands.send(deregsub)
    return Response(status_code=204)
