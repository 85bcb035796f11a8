"""The console's routes and error pages, added to the admin API app by :func:`install`."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, Response

from admin_api.console import (
    audit,
    config,
    dead_letters,
    messages,
    mqtt,
    network,
    overview,
    publications,
    queues,
    security,
    signin,
    subscriptions,
    tokens,
    topics,
)
from admin_api.console.notes import refusal
from admin_api.console.pages import PREFIX, redirect, render
from admin_api.console.rates import QueueRates, Rates
from admin_api.console.sessions import Refused, SignInNeeded
from queues.errors import MQError, UnknownObject

ROUTERS = (
    signin,
    overview,
    queues,
    messages,
    dead_letters,
    subscriptions,
    topics,
    publications,
    network,
    security,
    mqtt,
    tokens,
    audit,
    config,
)
HX_REDIRECT = "HX-Redirect"


async def _sign_in_needed(request: Request, _: Exception) -> Response:
    """To the sign-in page; htmx, which would swap the page into a fragment, is told to go there."""
    if request.headers.get("HX-Request"):
        return Response(status_code=401, headers={HX_REDIRECT: signin.SIGN_IN})
    return redirect(signin.SIGN_IN, request=request)


async def _refused(request: Request, exc: Exception) -> HTMLResponse:
    assert isinstance(exc, Refused)
    return render(request, "refused.html", None, status=exc.status, detail=exc.detail)


async def _unknown_object(request: Request, exc: Exception) -> Response:
    """A console page of a queue that is not (or no longer) defined leads back to the list; the
    API's paths answer with their problem, as before."""
    if request.url.path.startswith(f"{PREFIX}/"):
        return redirect(f"{PREFIX}/queues", refusal(str(exc)), request=request)
    answer: Response = await request.app.exception_handlers[MQError](request, exc)
    return answer


def _not_an_address(request: Request, exc: RequestValidationError) -> HTMLResponse:
    """A console address whose parameters the console never makes (a page cursor edited by hand)."""
    wrong = "; ".join(f"{'.'.join(map(str, e['loc'][1:]))}: {e['msg']}" for e in exc.errors())
    return render(request, "refused.html", None, status=400, heading="Not a console address", detail=wrong)


def _invalid_on_console(app: FastAPI) -> Callable[[Request, Exception], Awaitable[Response]]:
    """The console's 400 page for its own paths, the API's validation problem for the API's."""
    api_invalid = app.exception_handlers[RequestValidationError]

    async def invalid(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        if request.url.path.startswith(f"{PREFIX}/"):
            return _not_an_address(request, exc)
        answer = api_invalid(request, exc)
        return await answer if inspect.isawaitable(answer) else answer

    return invalid


def install(app: FastAPI) -> None:
    app.state.console_rates = Rates()
    app.state.console_queue_rates = QueueRates()
    app.add_exception_handler(RequestValidationError, _invalid_on_console(app))
    app.add_exception_handler(UnknownObject, _unknown_object)
    app.add_exception_handler(SignInNeeded, _sign_in_needed)
    app.add_exception_handler(Refused, _refused)
    for module in ROUTERS:
        app.include_router(module.router)
