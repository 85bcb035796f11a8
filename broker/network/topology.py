"""Keeping the network a tree: a link that would close a cycle is refused.

Each broker knows only its neighbours, so the check asks them: the queue
managers reachable from a broker without crossing one given link are itself
plus, recursively, what each of its other neighbours can reach without coming
back. Linking A to B closes a cycle exactly when something reachable from A's
side is also reachable from B's side. The walk carries the path it has taken,
so an existing cycle (a misconfiguration made by hand) is reported, never
followed forever; ``<brokerpath>`` protects the traffic in that case.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from broker.network import links
from broker.network.channel import SENDER_HEADER
from queues import QueueManager
from queues.errors import MQError
from queues.reasons import Reason

REACHABLE_PATH = "/api/v1/channel/reachable"
MAX_DEPTH = 64


class NeighbourUnavailable(MQError):
    """The neighbour did not answer, or not as a broker does: the link cannot be checked
    (3085, as for any broker this one cannot vouch for; the admin API says 409 with that
    reason: the network is not in a state in which the link can be verified)."""

    def __init__(self, detail: str) -> None:
        super().__init__(Reason.MQRCCF_UNKNOWN_BROKER, detail)


class CycleDetected(MQError):
    def __init__(self, message: str) -> None:
        super().__init__(Reason.MQRC_LOOPING_PUBLICATION, message)


class NotLinked(MQError):
    """The far side does not (yet) know this broker as a neighbour with that token."""

    def __init__(self, message: str) -> None:
        super().__init__(Reason.MQRCCF_UNKNOWN_BROKER, message)


def reachable(
    qm: QueueManager, http: httpx.Client, *, exclude: str | None, path: Sequence[str] = ()
) -> dict[str, tuple[str, ...]]:
    """This broker and everything reachable through its links other than ``exclude``, each
    with its route from here."""
    if qm.name in path:
        raise CycleDetected(f"the network already has a cycle: {' -> '.join((*path, qm.name))}")
    if len(path) >= MAX_DEPTH:
        raise CycleDetected(f"the network is deeper than {MAX_DEPTH} brokers along {' -> '.join(path)}")
    with qm.reading() as conn:
        others = [link for link in links.list_links(conn) if link.name != exclude]
    found: dict[str, tuple[str, ...]] = {qm.name: (qm.name,)}
    for link in others:
        try:
            routes = ask(qm.name, Peer(link.name, link.url, link.token), http, path=(*path, qm.name))
        except NotLinked:
            continue  # defined on this side only: it carries nothing yet, so it leads nowhere
        found.update({name: (qm.name, *route) for name, route in routes.items()})
    return found


@dataclass(frozen=True, slots=True)
class Peer:
    """Where a neighbour is and how to prove who we are to it."""

    name: str
    url: str
    token: str


def ask(me: str, peer: Peer, http: httpx.Client, *, path: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """What ``peer`` reaches without coming back to ``me``, with the routes from ``peer``."""
    try:
        response = http.get(
            peer.url.rstrip("/") + REACHABLE_PATH,
            params={"exclude": me, "path": ",".join(path)},
            headers={"Authorization": f"Bearer {peer.token}", SENDER_HEADER: me},
        )
    except httpx.HTTPError as exc:
        raise NeighbourUnavailable(f"cannot verify the topology: {peer.name} did not answer ({exc})") from exc
    if response.status_code == 409:
        detail, reason = _problem(response)
        if reason == Reason.MQRCCF_UNKNOWN_BROKER:  # a broker further along did not answer
            raise NeighbourUnavailable(f"cannot verify the topology through {peer.name}: {detail}")
        raise CycleDetected(detail or "the network already has a cycle")
    if response.status_code in (401, 403):
        raise NotLinked(f"{peer.name} does not know {me} as a neighbour with this token")
    if response.status_code != 200:
        raise NeighbourUnavailable(
            f"cannot verify the topology: {peer.name} answered {response.status_code}: {response.text[:200]}"
        )
    try:
        return {str(name): tuple(route) for name, route in response.json()["routes"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # not a broker's answer
        raise NeighbourUnavailable(
            f"cannot verify the topology: {peer.name} answered 200 without routes ({exc!r:.200})"
        ) from None


def _problem(response: httpx.Response) -> tuple[str | None, int | None]:
    """The detail and MQ reason of a problem the neighbour answered with."""
    try:
        body = response.json()
    except ValueError:
        return None, None
    if not isinstance(body, dict):
        return None, None
    reason = body.get("reason")
    return (str(body["detail"]) if "detail" in body else None), (reason if isinstance(reason, int) else None)


def check_new_link(qm: QueueManager, link: Peer, http: httpx.Client) -> str | None:
    """Refuse (CycleDetected) a link that would close a cycle. Returns a warning when the
    far side has not defined the link yet: the check then runs when it does."""
    mine = reachable(qm, http, exclude=link.name)
    if link.name in mine:
        raise CycleDetected(
            f"linking {qm.name} to {link.name} would close a cycle: {link.name} is already reachable "
            f"from {qm.name} through {' -> '.join(mine[link.name])}"
        )
    try:
        theirs = ask(qm.name, link, http, path=(qm.name,))
    except NotLinked:
        return f"{link.name} has not defined this link yet; it checks the topology when it does"
    shared = sorted(mine.keys() & theirs.keys())
    if shared:
        raise CycleDetected(
            f"linking {qm.name} to {link.name} would close a cycle: {', '.join(shared)} "
            f"{'is' if len(shared) == 1 else 'are'} already reachable from both sides"
        )
    return None
