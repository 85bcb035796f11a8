"""The broker network in the console: the neighbours, each with its channel (running, retrying
or stopped), its transmission queue and backlog, its last error and the proxy subscriptions it
registered here. Every role reads them; the operator role stops and starts channels, the admin
role adds, alters and removes neighbours, each through the admin API's own handler (its rules,
its MQ reasons, its audit entry).

Removing a neighbour can discard the messages waiting for it, so it asks first, on a page of
its own; stopping a channel loses nothing (its messages wait) and is one button.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request, Response
from fastapi.responses import HTMLResponse

from admin_api.console.pages import PREFIX, REFUSALS, back_to, outcome, redirect, refused, render, segment
from admin_api.console.sessions import Admin, Administering, FormValues, Operating, Viewing, field
from admin_api.routers import network as api
from admin_api.routers import subscriptions as subscriptions_api
from admin_api.services import Svc
from broker import store

router = APIRouter(prefix=f"{PREFIX}/network", include_in_schema=False)

PROXIES = 50
BACK = f"{PREFIX}/network"
NeighbourName = Annotated[str, Path(pattern=api.QMGR_NAME)]


def _back(name: str) -> str:
    return f"{BACK}/{segment(name)}"


def _proxies(svc: Svc, origin: str | None) -> dict[str, Any]:
    """A page of the proxy subscriptions the neighbours (or the neighbour ``origin``) registered
    here, and whether there are more."""
    where = store.SubscriptionFilter(proxy=True, q_mgr=origin)
    with svc.qm.reading() as conn:
        found = store.list_subscriptions(conn, where, limit=PROXIES)
    return {
        "proxies": [subscriptions_api.subscription_out(i, s) for i, s in found],
        "more_proxies": len(found) == PROXIES,
    }


@router.get("")
def network(request: Request, session: Viewing, svc: Svc) -> HTMLResponse:
    neighbours = api.list_neighbours(svc, session.token)
    return render(request, "network.html", session, neighbours=neighbours, **_proxies(svc, None))


@router.post("")
def add_neighbour(request: Request, session: Administering, svc: Svc, values: FormValues) -> Response:
    def add() -> str:
        body = api.NeighbourIn.model_validate(
            {
                "name": field(values, "name"),
                "url": field(values, "url"),
                "token": field(values, "token"),
                "check_topology": "skip_check" not in values,
            }
        )
        added = api.add_neighbour(body, request, svc, session.token)
        return f"Neighbour {body.name} added" + (f"; {added.warning}" if added.warning else "")

    return outcome(request, BACK, add)


def _shown(request: Request, session: Viewing, svc: Svc, name: str, template: str) -> Response:
    """A page about neighbour ``name``, or the list with why there is none."""
    try:
        neighbour = api.show_neighbour(svc, session.token, name)
    except REFUSALS as exc:
        return redirect(BACK, refused(exc), request=request)
    return render(request, template, session, neighbour=neighbour, **_proxies(svc, name))


@router.get("/{name:name}")
def show_neighbour(request: Request, session: Viewing, svc: Svc, name: NeighbourName) -> Response:
    return _shown(request, session, svc, name, "neighbour.html")


@router.post("/{name:name}/alter")
def alter_neighbour(
    request: Request, session: Administering, svc: Svc, values: FormValues, name: NeighbourName
) -> Response:
    def alter() -> str:
        changes = {key: field(values, key) for key in ("url", "token") if field(values, key)}
        if not changes:
            raise ValueError("give the URL, a new token or both")
        body = api.NeighbourChange.model_validate(changes)
        api.alter_neighbour(body, request, svc, session.token, name)
        return f"Neighbour {name} altered" + ("; change the token on its side too" if body.token else "")

    return outcome(request, _back(name), alter)


def _channel(
    request: Request, values: FormValues, name: str, change: Callable[[], api.Neighbour]
) -> Response:
    """Stop or start the channel to ``name``, back to the page the button was on."""

    def act() -> str:
        neighbour = change()
        waiting = neighbour.transmission_depth + neighbour.in_flight
        if neighbour.state == "stopped":
            return f"Channel to {name} stopped: {waiting} messages wait for it"
        return f"Channel to {name} started: it sends the {waiting} messages waiting"

    return outcome(request, back_to(values, _back(name)), act)


@router.post("/{name:name}/stop")
def stop_channel(
    request: Request, session: Operating, svc: Svc, values: FormValues, name: NeighbourName
) -> Response:
    return _channel(request, values, name, lambda: api.stop_channel(request, svc, session.token, name))


@router.post("/{name:name}/start")
def start_channel(
    request: Request, session: Operating, svc: Svc, values: FormValues, name: NeighbourName
) -> Response:
    return _channel(request, values, name, lambda: api.start_channel(request, svc, session.token, name))


@router.get("/{name:name}/remove")
def confirm_remove(request: Request, session: Admin, svc: Svc, name: NeighbourName) -> Response:
    return _shown(request, session, svc, name, "confirm_neighbour.html")


@router.post("/{name:name}/remove")
def remove_neighbour(
    request: Request, session: Administering, svc: Svc, values: FormValues, name: NeighbourName
) -> Response:
    def remove() -> str:
        api.remove_neighbour(request, svc, session.token, name, purge="purge" in values)
        return f"Neighbour {name} removed"

    return outcome(request, BACK, remove)
