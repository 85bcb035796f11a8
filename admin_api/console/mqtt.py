"""MQTT in the console: the nodes of the cluster, and the connected clients and the persistent
sessions, paged by client id, each with the node holding it, with an operator's disconnect
and delete, each made by the admin API's own handler (its rules, its MQ reasons, its audit
entry). Both travel to the MQTT listener holding the client through the
database (``broker.store.mqtt_requests``), whichever process it runs in.

Deleting a session loses the messages queued for it, so it asks first, on a page of its own,
as purging a queue does; a disconnect loses nothing (a persistent session stays) and is one
button.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse

from admin_api.console.notes import refusal
from admin_api.console.pages import PREFIX, outcome, redirect, render
from admin_api.console.params import ClientCursor
from admin_api.console.sessions import Operating, Operator, Viewing
from admin_api.routers import mqtt as api
from admin_api.services import Svc
from broker.store import mqtt
from broker.store.mqtt_requests import NoSuchSession

router = APIRouter(prefix=f"{PREFIX}/mqtt", include_in_schema=False)

PAGE = 100
BACK = f"{PREFIX}/mqtt"


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


@router.post("/clients/{client_id:name}/disconnect")
def disconnect(request: Request, session: Operating, svc: Svc, client_id: str) -> Response:
    def disconnect_it() -> str:
        api.disconnect(session.token, svc, request, client_id)
        return f"Disconnect of MQTT client {client_id} requested: its will is published"

    return outcome(request, BACK, disconnect_it)


@router.get("/sessions/{client_id:name}/delete")
def confirm_delete(request: Request, session: Operator, svc: Svc, client_id: str) -> Response:
    with svc.qm.reading() as conn:
        found = mqtt.find_session(conn, client_id)
    if found is None:
        return redirect(BACK, refusal(str(NoSuchSession(client_id))), request=request)
    return render(request, "confirm_session.html", session, found=api.session_out(svc, [found])[0])


@router.post("/sessions/{client_id:name}/delete")
def delete_session(request: Request, session: Operating, svc: Svc, client_id: str) -> Response:
    def delete_it() -> str:
        api.delete_session(session.token, svc, request, client_id)
        return f"MQTT session {client_id} deleted"

    return outcome(request, BACK, delete_it)
