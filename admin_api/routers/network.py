"""Neighbouring brokers: the links an administrator defines, alters and removes, the channels
an operator stops and starts, and the two endpoints neighbours call — the channel's inbound
batches and the topology query.

The neighbour endpoints do not take API tokens: a neighbour proves itself with
the link's shared secret (``Authorization: Bearer <link token>``) and names
itself in ``X-Broker-QMgr``. Anything else is 403, so an API token never lets
anyone inject messages as a neighbour, and a link token opens nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from admin_api.auditing import note
from admin_api.models import Flag, Strict
from admin_api.problems import ApiProblem, responses
from admin_api.security import AdminToken, OperatorToken, ViewerToken
from admin_api.services import Svc
from broker.admin import neighbours
from broker.network import inbound, links, topology
from broker.network.channel import SENDER_HEADER
from queues.errors import MQError
from queues.names import MAX_NAME_LENGTH, NAME_PATTERN
from queues.reasons import Reason

router = APIRouter(prefix="/api/v1", tags=["network"])

QMGR_NAME = NAME_PATTERN
NeighbourPath = Path(pattern=QMGR_NAME, examples=["QMB"])


LinkUrl = Annotated[
    str,
    Field(
        max_length=links.MAX_URL_LENGTH,
        pattern=links.URL_PATTERN,
        description="the neighbour's admin API base URL: http(s), a host name or IP address, an optional "
        "port and path (punycode for other host names)",
        examples=["http://10.0.0.2:8080"],
    ),
]
LinkToken = Annotated[
    str,
    Field(
        min_length=16,
        max_length=512,
        pattern=links.TOKEN_PATTERN,
        description="the link's shared secret, same on both sides (printable ASCII: it travels in a header)",
    ),
]


class NeighbourIn(Strict):
    name: str = Field(pattern=QMGR_NAME, max_length=MAX_NAME_LENGTH, examples=["QMB"])
    url: LinkUrl
    token: LinkToken
    check_topology: Flag = Field(True, description="refuse a link that would close a cycle")


class NeighbourChange(Strict):
    """What to alter: the URL, the token (change it on both sides), or both; a field left out
    (or null) is kept, as ``PATCH /api/v1/queues/{name}`` keeps the attributes it is not given."""

    url: LinkUrl | None = None
    token: LinkToken | None = None


class Neighbour(BaseModel):
    name: str
    url: str
    transmission_queue: str
    state: neighbours.ChannelState = Field(
        description="stopped by an operator, retrying after an error, else running"
    )
    stopped_at: int | None = Field(description="when the channel was stopped; null while it runs")
    transmission_depth: int
    in_flight: int
    next_batch: int
    received_batch: int
    proxies_sent: bool
    sender: str | None
    last_sent_at: int | None
    last_received_at: int | None
    last_error: str | None
    created_at: int


class NeighbourAdded(BaseModel):
    neighbour: Neighbour
    warning: str | None = None


class Receipt(BaseModel):
    batch: int
    accepted: int
    dead_lettered: int
    duplicate: bool


class Reachable(BaseModel):
    reachable: list[str]
    routes: dict[str, list[str]] = Field(
        description="each reachable queue manager and the route to it from here"
    )


def _neighbour(svc: Any, name: str) -> Neighbour:
    for status in neighbours.neighbour_status(svc.qm):
        if status.link.name == name:
            return Neighbour.model_validate(status.as_dict())
    raise _undefined(name)


def _undefined(name: str) -> ApiProblem:
    return ApiProblem(404, None, "Not Found", f"neighbour {name} is not defined")


@contextmanager
def _defined(name: str) -> Iterator[None]:
    """A change to a neighbour that is not defined (3085 from below) is 404."""
    try:
        yield
    except MQError as exc:
        if exc.reason == Reason.MQRCCF_UNKNOWN_BROKER:
            raise _undefined(name) from None
        raise


@router.get("/neighbours", response_model=list[Neighbour])
def list_neighbours(svc: Svc, _: ViewerToken) -> list[Neighbour]:
    """Neighbours with their channel state: messages waiting, in flight, the last error."""
    return [Neighbour.model_validate(s.as_dict()) for s in neighbours.neighbour_status(svc.qm)]


@router.post(
    "/neighbours",
    status_code=201,
    response_model=NeighbourAdded,
    responses=responses(401, 403, 409, 422, 503),
)
def add_neighbour(body: NeighbourIn, request: Request, svc: Svc, _: AdminToken) -> NeighbourAdded:
    """Link a neighbour (define it on both sides, with the same token). Refused with 409
    (MQRC_LOOPING_PUBLICATION) if it would close a cycle."""
    try:
        with svc.neighbours_http() as http:
            link, warning = neighbours.add_neighbour(
                svc.qm, body.name, body.url, body.token, check_topology=body.check_topology, http=http
            )
    except topology.CycleDetected as exc:
        raise ApiProblem(409, "cycle", "The link would close a cycle", exc.detail) from None
    note(request.state, neighbour=link.name, url=link.url)
    return NeighbourAdded(neighbour=_neighbour(svc, link.name), warning=warning)


@router.get("/neighbours/{name:name}", response_model=Neighbour, responses=responses(401, 403, 404))
def show_neighbour(svc: Svc, _: ViewerToken, name: str = NeighbourPath) -> Neighbour:
    return _neighbour(svc, name)


@router.patch("/neighbours/{name:name}", response_model=Neighbour, responses=responses(401, 403, 404, 422))
def alter_neighbour(
    body: NeighbourChange, request: Request, svc: Svc, _: AdminToken, name: str = NeighbourPath
) -> Neighbour:
    """Change the neighbour's URL, the link's token, or both; the channel sends with them from
    its next batch. The link's batch numbers stay, so nothing is put twice."""
    note(request.state, url=body.url, token_changed=body.token is not None)  # never the token
    with _defined(name):
        neighbours.alter_neighbour(svc.qm, name, url=body.url, token=body.token)
    return _neighbour(svc, name)


@router.delete("/neighbours/{name:name}", status_code=204, responses=responses(401, 403, 404, 409))
def remove_neighbour(
    request: Request, svc: Svc, _: AdminToken, name: str = NeighbourPath, purge: bool = False
) -> None:
    """Unlink a neighbour; refused (409) while messages wait for it, unless ``purge``."""
    with _defined(name):
        discarded = neighbours.remove_neighbour(svc.qm, name, purge=purge)
    note(request.state, neighbour=name, discarded=discarded)


@router.post("/neighbours/{name:name}/stop", response_model=Neighbour, responses=responses(401, 403, 404))
def stop_channel(request: Request, svc: Svc, _: OperatorToken, name: str = NeighbourPath) -> Neighbour:
    """Stop the channel to the neighbour (MQ's STOP CHANNEL): messages for it wait on its
    transmission queue until it is started; a batch already on its way is finished. Stopping
    a stopped channel changes nothing."""
    with _defined(name):
        note(request.state, changed=neighbours.stop_channel(svc.qm, name))
    return _neighbour(svc, name)


@router.post("/neighbours/{name:name}/start", response_model=Neighbour, responses=responses(401, 403, 404))
def start_channel(request: Request, svc: Svc, _: OperatorToken, name: str = NeighbourPath) -> Neighbour:
    """Start the channel to the neighbour again (MQ's START CHANNEL): what waits on its
    transmission queue is sent. Starting a running channel changes nothing."""
    with _defined(name):
        note(request.state, changed=neighbours.start_channel(svc.qm, name))
    return _neighbour(svc, name)


def _link_token(authorization: str | None) -> str:
    if authorization is None or not authorization.startswith("Bearer "):
        raise ApiProblem(403, "not-a-neighbour", "Not a neighbour", "send the link token as a bearer token")
    return authorization.removeprefix("Bearer ")


def _authenticate(svc: Any, sender: str, token: str) -> None:
    """A neighbour proves itself with the link's token before anything it sent is read."""
    with svc.qm.reading() as conn:
        try:
            links.authenticate(conn, sender, token)
        except MQError as exc:
            raise ApiProblem(403, "not-a-neighbour", "Not a neighbour", exc.detail) from None


LinkAuth = Annotated[str | None, Header(alias="Authorization", include_in_schema=False)]
Sender = Annotated[
    str, Header(alias=SENDER_HEADER, pattern=QMGR_NAME, description="the calling queue manager")
]


@router.post("/channel/batches", response_model=Receipt, responses=responses(400, 403, 503))
async def receive_batch(
    request: Request, svc: Svc, sender: Sender, authorization: LinkAuth = None
) -> Receipt:
    """A neighbour's channel delivers one batch (exactly once: a resent batch is
    confirmed and not put again)."""
    token = _link_token(authorization)
    await run_in_threadpool(_authenticate, svc, sender, token)  # before a byte of the body is read
    payload = await request.body()
    try:
        receipt = await run_in_threadpool(inbound.receive, svc.qm, payload, token, sender)
    except MQError as exc:
        if exc.reason == Reason.MQRCCF_UNKNOWN_BROKER:
            raise ApiProblem(403, "not-a-neighbour", "Not a neighbour", exc.detail) from None
        if exc.reason == Reason.MQRC_RFH_PARM_ERROR:
            raise ApiProblem(400, "bad-batch", "Malformed channel batch", exc.detail) from None
        raise
    return Receipt(
        batch=receipt.batch,
        accepted=receipt.accepted,
        dead_lettered=receipt.dead_lettered,
        duplicate=receipt.duplicate,
    )


@router.get("/channel/reachable", response_model=Reachable, responses=responses(403, 409, 503))
def reachable(
    svc: Svc,
    sender: Sender,
    authorization: LinkAuth = None,
    exclude: str = Query(..., pattern=QMGR_NAME),
    path: str = Query("", max_length=64 * 50, description="queue managers already visited, comma-separated"),
) -> Reachable:
    """What this broker reaches without going back to ``exclude`` (the topology check)."""
    _authenticate(svc, sender, _link_token(authorization))
    visited = tuple(p for p in path.split(",") if p)
    try:
        with svc.neighbours_http() as http:
            found = topology.reachable(svc.qm, http, exclude=exclude, path=visited)
    except topology.CycleDetected as exc:
        raise ApiProblem(409, "cycle", "The network has a cycle", exc.detail) from None
    return Reachable(reachable=sorted(found), routes={name: list(route) for name, route in found.items()})
