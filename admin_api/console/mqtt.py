"""MQTT in the console: the nodes of the cluster; the connected clients and the persistent
sessions, paged by client id, each with the node holding it, its protocol version, keepalive,
counts and bytes; one client's page with its subscriptions; and the MQTT principals. Every
change is made by the admin API's own handler (its rules, its MQ reasons, its audit entry).
Disconnect and delete travel to the MQTT listener holding the client through the database
(``broker.store.mqtt_requests``), whichever process it runs in.

Deleting a session loses the messages queued for it, and removing a principal locks its
clients out, so each asks first, on a page of its own, as purging a queue does; a disconnect
loses nothing (a persistent session stays) and is one button. Principals are the admin's, as
the API's are: their page and its forms need the admin role. A password is read from the form
as typed (never trimmed), typed twice, and never shown again.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response
from fastapi.responses import HTMLResponse

from admin_api.console.notes import refusal
from admin_api.console.pages import PREFIX, back_to, outcome, redirect, render, segment
from admin_api.console.params import ClientCursor
from admin_api.console.sessions import (
    Admin,
    Administering,
    Form,
    FormValues,
    Operating,
    Operator,
    Viewing,
    field,
)
from admin_api.models import USER_ID, MqttPasswordIn, MqttPrincipalIn
from admin_api.routers import mqtt as api
from admin_api.services import Svc
from broker.core.authority import check_principal
from broker.store import mqtt
from broker.store.mqtt_requests import NoSuchSession

router = APIRouter(prefix=f"{PREFIX}/mqtt", include_in_schema=False)

PAGE = 100
BACK = f"{PREFIX}/mqtt"
PRINCIPALS = f"{PREFIX}/mqtt/principals"

Principal = Annotated[str, Path(pattern=USER_ID)]


def client_page(client_id: str) -> str:
    return f"{PREFIX}/mqtt/clients/{segment(client_id)}"


@router.get("")
def list_sessions(request: Request, session: Viewing, svc: Svc, after: ClientCursor = "") -> HTMLResponse:
    with svc.qm.reading() as conn:
        found = mqtt.list_sessions(conn, after=after or None, limit=PAGE)
    return render(
        request,
        "mqtt.html",
        session,
        sessions=api.session_out(svc, found),
        nodes=api.nodes_out(svc),
        after=after,
        next_after=found[-1].client_id if len(found) == PAGE else None,
    )


@router.get("/clients/{client_id:name}")
def show_client(request: Request, session: Viewing, svc: Svc, client_id: str) -> Response:
    try:
        found = api.session_detail(svc, client_id)
    except NoSuchSession as exc:
        return redirect(BACK, refusal(str(exc)), request=request)
    return render(request, "mqtt_client.html", session, found=found, here=client_page(client_id))


@router.post("/clients/{client_id:name}/disconnect")
def disconnect(
    request: Request, session: Operating, svc: Svc, client_id: str, values: FormValues
) -> Response:
    def disconnect_it() -> str:
        api.disconnect(session.token, svc, request, client_id)
        return f"Disconnect of MQTT client {client_id} requested: its will is published"

    return outcome(request, back_to(values, BACK), disconnect_it)


@router.get("/sessions/{client_id:name}/delete")
def confirm_delete(request: Request, session: Operator, svc: Svc, client_id: str) -> Response:
    try:
        found = api.session_detail(svc, client_id)
    except NoSuchSession as exc:
        return redirect(BACK, refusal(str(exc)), request=request)
    return render(request, "confirm_session.html", session, found=found)


@router.post("/sessions/{client_id:name}/delete")
def delete_session(request: Request, session: Operating, svc: Svc, client_id: str) -> Response:
    def delete_it() -> str:
        api.delete_session(session.token, svc, request, client_id)
        return f"MQTT session {client_id} deleted"

    return outcome(request, BACK, delete_it)


# -- principals ----------------------------------------------------------------------------


@router.get("/principals")
def list_principals(request: Request, session: Admin, svc: Svc) -> HTMLResponse:
    principals = api.list_principals(session.token, svc)
    return render(request, "mqtt_principals.html", session, principals=principals)


def typed_password(values: Form) -> str:
    """The password of a form, as typed (spaces are part of it); ValueError unless it was
    typed the same twice."""
    password = values.get("password", [""])[0]
    if values.get("again", [""])[0] != password:
        raise ValueError("the two passwords differ: nothing was changed")
    return password


@router.post("/principals")
def add_principal(request: Request, session: Administering, svc: Svc, values: FormValues) -> Response:
    def add() -> str:
        user = check_principal(field(values, "user"))
        body = MqttPrincipalIn.model_validate({"user": user, "password": typed_password(values)})
        api.add_principal(session.token, svc, body, request, Response())
        return f"MQTT principal {user} added"

    return outcome(request, PRINCIPALS, add)


@router.post("/principals/{user:name}/password")
def set_password(
    request: Request, session: Administering, svc: Svc, user: Principal, values: FormValues
) -> Response:
    def set_it() -> str:
        body = MqttPasswordIn.model_validate({"password": typed_password(values)})
        api.set_password(session.token, svc, body, user)
        return f"Password of MQTT principal {user} set: its next connections need it"

    return outcome(request, PRINCIPALS, set_it)


@router.get("/principals/{user:name}/remove")
def confirm_remove(request: Request, session: Admin, svc: Svc, user: Principal) -> Response:
    with svc.qm.reading() as conn:
        known = mqtt.has_principal(conn, user)
    if not known:
        return redirect(PRINCIPALS, refusal(str(mqtt.NoSuchPrincipal(user))), request=request)
    return render(request, "confirm_principal.html", session, user=user)


@router.post("/principals/{user:name}/remove")
def remove_principal(request: Request, session: Administering, svc: Svc, user: Principal) -> Response:
    def remove() -> str:
        api.remove_principal(session.token, svc, user)
        return f"MQTT principal {user} removed"

    return outcome(request, PRINCIPALS, remove)
