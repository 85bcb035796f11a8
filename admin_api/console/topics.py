"""The topic tree: the topics that have subscriptions or retained publications, one level at a
time, each with how many subscriptions are on it and below it and its retained publications.

A level is read when it is opened (htmx loads a node's children into it) with one aggregate
statement over at most ``SCAN`` subscriptions below the node (``broker.store.topic_levels``):
a tree of a million subscriptions opens as fast as a small one. Where a level holds more, the
names past those counted are still listed, marked as not counted, and counts that stopped at
the limit say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse

from admin_api.console.pages import PREFIX, back_to, outcome, render
from admin_api.console.params import RowId, TopicText
from admin_api.console.sessions import FormValues, Operating, Viewing
from admin_api.routers import retained as retained_api
from admin_api.services import Services, Svc
from broker.core.retained import RetainedPublication
from broker.core.topics import SEPARATOR
from broker.store import topic_levels
from broker.store.topic_levels import TopicLevel
from queues.formatting import body_text

router = APIRouter(prefix=PREFIX, include_in_schema=False)

SCAN = 10_000


@dataclass(frozen=True, slots=True)
class Retained:
    id: int
    sub_point: str
    value: str  # the payload as text, or its length when it is not text
    retained_at: int  # epoch ms


@dataclass(slots=True)
class TopicNode:
    topic: str
    level: str
    here: int = 0  # subscriptions on exactly this topic
    below: int = 0  # subscriptions on topics below it
    children: bool = False
    counted: bool = True  # False: more subscriptions lie on or below it than were counted
    retained: list[Retained] = field(default_factory=list)


def _retained(retained_id: int, pub: RetainedPublication) -> Retained:
    value = body_text(pub.rfh2.payload)
    shown = value if value is not None else f"({len(pub.rfh2.payload)} bytes, binary)"
    return Retained(retained_id, pub.sub_point, shown, pub.retained_at)


def tree_level(
    under: str, level: TopicLevel, retained: list[tuple[int, RetainedPublication]]
) -> list[TopicNode]:
    """The children of ``under``, in name order, with the retained publications on them."""
    nodes = {
        name.name: TopicNode(
            f"{under}{SEPARATOR}{name.name}" if under else name.name,
            name.name,
            name.here,
            name.below,
            name.deeper,
            name.counted,
        )
        for name in level.names
    }
    for retained_id, pub in retained:
        level_name = pub.topic[len(under) + 1 :] if under else pub.topic
        node = nodes.setdefault(level_name, TopicNode(pub.topic, level_name))
        node.retained.append(_retained(retained_id, pub))
    return [nodes[name] for name in sorted(nodes)]


def _level(svc: Services, under: str) -> tuple[list[TopicNode], bool]:
    with svc.qm.reading() as conn:
        level = topic_levels.topic_level(conn, under, limit=SCAN)
        retained = topic_levels.retained_at(conn, under)
    return tree_level(under, level, retained), not level.complete


@router.get("/topics")
def topics(request: Request, session: Viewing, svc: Svc) -> HTMLResponse:
    nodes, partial = _level(svc, "")
    return render(request, "topics.html", session, nodes=nodes, partial=partial, scan=SCAN)


@router.get("/topics/children")
def children(request: Request, session: Viewing, svc: Svc, under: TopicText) -> HTMLResponse:
    nodes, partial = _level(svc, under)
    return render(request, "_topic_level.html", session, nodes=nodes, partial=partial, scan=SCAN)


@router.post("/retained/{retained_id}/delete")
def delete_retained(
    request: Request, session: Operating, svc: Svc, values: FormValues, retained_id: RowId
) -> Response:
    def delete() -> str:
        retained_api.delete_retained(session.token, svc, request, retained_id, local=False, user_id=None)
        return f"Retained publication {retained_id} deleted"

    return outcome(request, back_to(values, f"{PREFIX}/topics"), delete)
