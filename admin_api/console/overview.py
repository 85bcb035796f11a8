"""The overview: what the broker is doing now, refreshed in place every few seconds.

The page loads once; htmx fetches ``/console/overview/live`` every few seconds and swaps
it in. That fragment samples the routers' counters (``admin_api.console.rates``) and
carries the rate series for ``console.js`` to draw, so one request refreshes numbers and
charts alike.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from admin_api.console.pages import PREFIX, render
from admin_api.console.rates import SERIES, Rates, Sample
from admin_api.console.sessions import Viewing
from admin_api.models import Counters
from admin_api.routers.status import live_routers, total
from admin_api.services import Services, Svc
from broker.admin import neighbours
from broker.store import mqtt
from queues.ids import now_ms

router = APIRouter(prefix=PREFIX, include_in_schema=False)

DEEPEST = 10
PACKAGE = "wmq-psc-broker"


def _totals(counters: Counters) -> tuple[int, ...]:
    values = {**counters.model_dump(), "refusals": sum(counters.refusals.values())}
    return tuple(values[name] for name in SERIES)


def _live(request: Request, svc: Services) -> dict[str, Any]:
    now = now_ms()
    routers, errors = live_routers(svc, now)
    totals = total([r.counters for r in routers])
    rates: Rates = request.app.state.console_rates
    rates.add(Sample(now, _totals(totals)))
    series = rates.series()
    return {
        "qmgr": svc.qm.name,
        "version": version(PACKAGE),
        "api_uptime_ms": now - svc.started_at,
        "routers": routers,
        "totals": totals,
        "series": series,
        "current": {name: (values[-1] if values else None) for name, values in series.items()},
        "deepest": svc.qm.deepest_queues(DEEPEST),
        "problems": svc.queue_problems(),
        "neighbours": neighbours.neighbour_status(svc.qm),
        "mqtt_sessions": _mqtt_sessions(svc),
        "errors": errors,
    }


def _mqtt_sessions(svc: Services) -> tuple[int, int]:
    with svc.qm.reading() as conn:
        return mqtt.count_sessions(conn)


@router.get("/")
def overview(request: Request, session: Viewing, svc: Svc) -> HTMLResponse:
    return render(request, "overview.html", session, series_names=SERIES, **_live(request, svc))


@router.get("/overview/live")
def overview_live(request: Request, session: Viewing, svc: Svc) -> HTMLResponse:
    return render(request, "_overview_live.html", session, series_names=SERIES, **_live(request, svc))
