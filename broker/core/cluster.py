"""Which MQTT listener processes of a cluster are alive, decided from their heartbeats.

Pure and handed the time. Each listener process (a *member*: a node runs one, or more with
``mqtt_processes``) counts up its ``beat`` in the database; an observer declares a member dead
once it has seen the same beat for ``timeout`` seconds of its own clock. Only changes are
compared, never one machine's clock against another's. The rules are in
``docs/decisions.md``, "MQTT nodes".
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

State = Literal["alive", "silent", "dead"]
ALIVE: State = "alive"
SILENT: State = "silent"  # not declared dead yet, but no heartbeat within the timeout
DEAD: State = "dead"
MAX_NODE_NAME = 96
FORBIDDEN = "/+#"  # a node's name is a level of $SYS topics


@dataclass(frozen=True, slots=True)
class Member:
    """One listener process as its row in ``psb_mqtt_nodes`` says."""

    owner: str  # the process's lease owner name, which its sessions record
    node: str
    address: str
    started_at: int  # epoch ms
    beat: int
    heartbeat_at: int  # epoch ms, on the member's own clock
    clients: int
    dead_at: int = 0  # epoch ms it was declared dead (0: alive)
    released: bool = False  # its sessions have been released
    counters: tuple[tuple[str, int], ...] = ()  # its $SYS counters at its last heartbeat

    @property
    def alive(self) -> bool:
        return not self.dead_at


@dataclass(frozen=True, slots=True)
class Sighting:
    """A member's beat as one observer saw it, and since when (the observer's seconds)."""

    beat: int
    since: float


@dataclass(frozen=True, slots=True)
class Node:
    """A node of the cluster view: its live members together."""

    name: str
    state: State
    clients: int
    processes: int
    last_heartbeat: int  # epoch ms
    started_at: int  # epoch ms, of its oldest live member (of its last one when dead)
    address: str


def check_node_name(name: str) -> str:
    """``name`` if it can name a node: 1 to 96 characters, none of ``/``, ``+``, ``#``."""
    if not 0 < len(name) <= MAX_NODE_NAME or any(c in FORBIDDEN for c in name) or not name.isprintable():
        raise ValueError(f"a node name is 1 to {MAX_NODE_NAME} printable characters without / + #")
    return name


def watching(last: float | None, now: float, gap: float) -> bool:
    """Whether an observer that last read the members at ``last`` has watched them without a
    break longer than ``gap`` (a stop, the database away): if not, what it saw before proves
    nobody silent since, and its sightings start again (a database outage longer than the
    timeout would otherwise have every node declare every other dead)."""
    return last is not None and now - last <= gap


def sighted(members: Iterable[Member], before: Mapping[str, Sighting], now: float) -> dict[str, Sighting]:
    """The sightings of the live ``members`` at ``now``: a beat seen before keeps its time,
    a new one starts at ``now``; the dead are forgotten."""
    found: dict[str, Sighting] = {}
    for member in members:
        if not member.alive:
            continue
        seen = before.get(member.owner)
        found[member.owner] = (
            seen if seen is not None and seen.beat == member.beat else Sighting(member.beat, now)
        )
    return found


def overdue(
    members: Iterable[Member],
    sightings: Mapping[str, Sighting],
    now: float,
    timeout: float,
    *,
    me: str,
    gone: Collection[str] = (),
) -> list[Member]:
    """The live members other than ``me`` to declare dead: those whose beat has not changed
    for ``timeout`` seconds, and those ``gone`` (processes of this node that no longer exist)."""
    found = []
    for member in members:
        if not member.alive or member.owner == me:
            continue
        seen = sightings.get(member.owner)
        if member.owner in gone or (seen is not None and now - seen.since >= timeout):
            found.append(member)
    return found


def predecessors(members: Iterable[Member], node: str, me: str) -> list[Member]:
    """The live members of ``node`` other than ``me``: at the start of a node's serving
    process, its earlier run's (a node's name is its own: nobody else runs under it)."""
    return [m for m in members if m.alive and m.node == node and m.owner != me]


def unreleased(members: Iterable[Member]) -> list[Member]:
    """The members declared dead whose sessions have not been released yet."""
    return [m for m in members if not m.alive and not m.released]


def nodes(members: Iterable[Member], now: int, timeout_ms: int) -> list[Node]:
    """The cluster view, by node name: a node is alive while a live member of it has a
    heartbeat within ``timeout_ms`` of ``now`` (the viewer's clock), silent while its live
    members have none, dead when it has no live member."""
    by_name: dict[str, list[Member]] = {}
    for member in members:
        by_name.setdefault(member.node, []).append(member)
    return [_node(name, group, now, timeout_ms) for name, group in sorted(by_name.items())]


def _node(name: str, members: list[Member], now: int, timeout_ms: int) -> Node:
    live = [m for m in members if m.alive]
    last = max(m.heartbeat_at for m in members)
    if not live:
        newest = max(members, key=lambda m: m.started_at)
        return Node(name, DEAD, 0, 0, last, newest.started_at, newest.address)
    fresh = any(now - m.heartbeat_at <= timeout_ms for m in live)
    first = min(live, key=lambda m: m.started_at)
    return Node(
        name,
        ALIVE if fresh else SILENT,
        sum(m.clients for m in live),
        len(live),
        max(m.heartbeat_at for m in live),
        first.started_at,
        first.address,
    )
