"""Subscriptions in the console: filtered in SQL and paged by key (``broker.store.listings``),
so the page costs the same with a million of them; each with its SubName, SubIdentity and
SubUserData, and the client id of an MQTT session's (one lookup per page).

Deregistered, after a page that asks, through the admin API's handler, which sends the broker
the DeregSub naming exactly that subscription, as the broker's administrator (``admin_group``):
an operator deregisters whoever registered it (an application, an MQTT device, another token),
as a forced queue delete does. Proxy subscriptions are the network's: the neighbour that
registered one removes it."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse

from admin_api.console.notes import refusal
from admin_api.console.pages import PREFIX, back_to, outcome, redirect, render
from admin_api.console.params import QueueFilter, RowCursor, RowId, SubPointText, TopicText
from admin_api.console.sessions import FormValues, Operating, Operator, Viewing
from admin_api.routers import subscriptions as api
from admin_api.services import Svc
from broker import store
from broker.core.subscription import Subscription
from broker.store.listings import MQRFH2, MQTT

router = APIRouter(prefix=f"{PREFIX}/subscriptions", include_in_schema=False)

PAGE = 50
ORIGINS = {"": None, "local": False, "proxy": True}
PROTOCOLS = {"": None, MQRFH2: MQRFH2, MQTT: MQTT}


@router.get("")
def list_subscriptions(
    request: Request,
    session: Viewing,
    svc: Svc,
    topic: TopicText = "",
    queue: QueueFilter = "",
    sub_point: SubPointText = "",
    origin: str = "",
    protocol: str = "",
    after: RowCursor = 0,
) -> HTMLResponse:
    where = store.SubscriptionFilter(
        topic=topic or None,
        queue=queue or None,
        sub_point=sub_point or None,
        proxy=ORIGINS.get(origin),
        protocol=PROTOCOLS.get(protocol),
    )
    with svc.qm.reading() as conn:
        page = store.list_subscriptions(conn, where, after_id=after, limit=PAGE)
        clients = store.mqtt_clients(conn, {sub.identity.queue for _, sub in page})
    filters = {"topic": topic, "queue": queue, "sub_point": sub_point, "origin": origin, "protocol": protocol}
    return render(
        request,
        "subscriptions.html",
        session,
        subscriptions=[api.subscription_out(i, s) for i, s in page],
        clients=clients,
        local_qmgr=svc.qm.name,
        filters=filters,
        next_after=page[-1][0] if len(page) == PAGE else None,
    )


def _network_managed(subscription_id: int, found: Subscription | None) -> str | None:
    """Why the console leaves a proxy subscription alone: its neighbour manages it."""
    if found is None or found.origin is None:
        return None
    return (
        f"subscription {subscription_id} is a proxy subscription of neighbour {found.origin}: "
        "the network manages it"
    )


@router.get("/{subscription_id}/deregister")
def confirm_deregister(
    request: Request, session: Operator, svc: Svc, subscription_id: RowId, back: str = ""
) -> Response:
    """What deregistering the subscription stops, and the button that does it."""
    shown = back_to({"back": [back]}, f"{PREFIX}/subscriptions")
    with svc.qm.reading() as conn:
        found = store.get_subscription(conn, subscription_id)
        clients = store.mqtt_clients(conn, [found.identity.queue] if found else [])
    if found is None:
        return redirect(shown, refusal(f"subscription {subscription_id} is not registered"), request=request)
    return render(
        request,
        "confirm_subscription.html",
        session,
        s=api.subscription_out(subscription_id, found),
        client=clients.get(found.identity.queue),
        refused=_network_managed(subscription_id, found),
        back=shown,
    )


@router.post("/{subscription_id}/deregister")
def deregister(
    request: Request, session: Operating, svc: Svc, values: FormValues, subscription_id: RowId
) -> Response:
    def deregister_it() -> str:
        with svc.qm.reading() as conn:
            found = store.get_subscription(conn, subscription_id)
        managed = _network_managed(subscription_id, found)
        if managed is not None:
            raise ValueError(managed)
        admin = svc.settings.admin_group
        api.delete_subscription(session.token, svc, request, subscription_id, user_id=admin)
        return f"Subscription {subscription_id} deregistered"

    return outcome(request, back_to(values, f"{PREFIX}/subscriptions"), deregister_it)
