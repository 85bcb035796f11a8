"""The topic tree: the topics that have subscriptions or retained publications, one level at a
time, each with how many subscriptions are on it and below it and its retained value.

A level is read when it is opened (htmx loads a node's children into it), from at most
``SCAN`` subscription topics (``broker.store.subscription_topics``: the topic column alone,
narrowed on its indexed head) and retained publications below the node: a tree of a million
subscriptions opens as fast as a small one, and a node whose counts stopped at the limit says so.
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
from broker import store
from broker.core.retained import RetainedPublication
from broker.core.topics import SEPARATOR
from queues.formatting import body_text

router = APIRouter(prefix=PREFIX, include_in_schema=False)

SCAN = 10_000


@dataclass(slots=True)
class TopicNode:
    topic: str
    level: str
    here: int = 0  # subscriptions on exactly this topic
    below: int = 0  # subscriptions on topics below it
    children: bool = False
    retained: list[tuple[int, str, str]] = field(default_factory=list)  # (id, sub point, value)


def _child(under: str, topic: str) -> tuple[str, bool] | None:
    """The level below ``under`` that ``topic`` lies in, and whether the topic goes deeper."""
    if under:
        if not topic.startswith(under + SEPARATOR):
            return None
        rest = topic[len(under) + 1 :]
    else:
        rest = topic
    level, separator, _ = rest.partition(SEPARATOR)
    return level, bool(separator)


def tree_level(
    under: str, subscription_topics: list[str], retained: list[tuple[int, RetainedPublication]]
) -> list[TopicNode]:
    """The children of ``under``, in name order, from the topics found below it."""
    nodes: dict[str, TopicNode] = {}

    def node(level: str) -> TopicNode:
        topic = f"{under}{SEPARATOR}{level}" if under else level
        return nodes.setdefault(level, TopicNode(topic, level))

    for topic in subscription_topics:
        if (found := _child(under, topic)) is not None:
            level, deeper = found
            target = node(level)
            target.children |= deeper
            if deeper:
                target.below += 1
            else:
                target.here += 1
    for retained_id, pub in retained:
        if (found := _child(under, pub.topic)) is not None:
            level, deeper = found
            target = node(level)
            target.children |= deeper
            if not deeper:
                value = body_text(pub.rfh2.payload)
                shown = value if value is not None else f"({len(pub.rfh2.payload)} bytes, binary)"
                target.retained.append((retained_id, pub.sub_point, shown))
    return [nodes[level] for level in sorted(nodes)]


def _level(svc: Services, under: str) -> tuple[list[TopicNode], bool]:
    pattern = f"{under}{SEPARATOR}#" if under else "#"
    with svc.qm.reading() as conn:
        topics = store.subscription_topics(conn, under, limit=SCAN)
        retained = store.list_retained(conn, pattern, limit=SCAN)
    partial = len(topics) == SCAN or len(retained) == SCAN
    return tree_level(under, topics, retained), partial


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
