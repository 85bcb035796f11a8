"""Defining, altering and removing neighbours, and stopping and starting their channels (used
by the CLI and the admin API alike).

Adding a neighbour defines its transmission queue (a local queue named after
the neighbour's queue manager, USAGE(XMITQ), as in MQ), checks that the link
keeps the network a tree, and records the link; the routing service then sends
the neighbour this broker's proxy subscriptions, and the channel agent starts.
Both sides define the link, with the same token.

A stopped channel (MQ's STOP CHANNEL) keeps its messages on the transmission
queue, and the routers keep putting there, until it is started again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import httpx

from broker.network import links, topology
from queues import QueueManager
from queues.definition import MAX_MAX_DEPTH, QueueDefinition
from queues.errors import MQError, UnknownObject
from queues.opens import QueueOpen
from queues.reasons import Reason

ChannelState = Literal["running", "retrying", "stopped"]


@dataclass(frozen=True, slots=True)
class NeighbourStatus:
    link: links.Link
    transmission_depth: int
    in_flight: int

    @property
    def state(self) -> ChannelState:
        """The channel as MQ Explorer names it: stopped by an operator, retrying after an error
        (the neighbour is down or refuses), else running (sending, or waiting for messages)."""
        if self.link.stopped:
            return "stopped"
        return "retrying" if self.link.last_error else "running"

    def as_dict(self) -> dict[str, Any]:
        link = self.link
        return {
            "name": link.name,
            "url": link.url,
            "transmission_queue": link.name,
            "state": self.state,
            "stopped_at": link.stopped_at,
            "transmission_depth": self.transmission_depth,
            "in_flight": self.in_flight,
            "next_batch": link.next_batch,
            "received_batch": link.received_batch,
            "proxies_sent": link.synced,
            "sender": link.sender_owner,
            "last_sent_at": link.last_sent_at,
            "last_received_at": link.last_received_at,
            "last_error": link.last_error,
            "created_at": link.created_at,
        }


def add_neighbour(
    qm: QueueManager,
    name: str,
    url: str,
    token: str,
    *,
    check_topology: bool = True,
    http: httpx.Client | None = None,
) -> tuple[links.Link, str | None]:
    """Define a link; returns it and a warning (e.g. the far side has not defined it yet).

    Refused with MQRC_LOOPING_PUBLICATION (2541) if it would close a cycle, and
    with 3085 if the topology cannot be verified (a neighbour does not answer)
    unless ``check_topology`` is False."""
    links.check_link(name, url, token)
    if name == qm.name:
        raise MQError(Reason.MQRCCF_Q_MGR_NAME_ERROR, f"{name} is this broker's own queue manager")
    try:
        existing = qm.inquire_queue(name)
    except UnknownObject:
        existing = None
    if existing is not None and existing.usage != "xmitq":
        raise MQError(
            Reason.MQRCCF_OBJECT_ALREADY_EXISTS,
            f"a local queue named {name} exists: the transmission queue for neighbour {name} needs its name",
        )
    warning = None
    if check_topology:
        client = http or httpx.Client(timeout=10.0)
        try:
            warning = topology.check_new_link(qm, topology.Peer(name, url, token), client)
        finally:
            if http is None:
                client.close()
    with qm.engine.begin() as conn:
        link = links.add_link(conn, name, url, token)
    if existing is None:
        qm.define_queue(name, usage="xmitq", max_depth=MAX_MAX_DEPTH, description=f"to neighbour {name}")
    qm.open_queues(link_holder(name), [transmission_queue(name)], lease_ms=None)
    return link, warning


def alter_neighbour(
    qm: QueueManager, name: str, *, url: str | None = None, token: str | None = None
) -> links.Link:
    """Change the neighbour's URL, the link's token, or both (3085 for a neighbour not defined);
    the channel sends with them from its next batch."""
    with qm.engine.begin() as conn:
        return links.update_link(conn, name, url=url, token=token)


def stop_channel(qm: QueueManager, name: str) -> bool:
    """Stop the channel to ``name``; False if it was stopped already (3085: not a neighbour)."""
    with qm.engine.begin() as conn:
        return links.stop_channel(conn, name)


def start_channel(qm: QueueManager, name: str) -> bool:
    """Start the channel to ``name`` again; False if it was running (3085: not a neighbour)."""
    with qm.engine.begin() as conn:
        return links.start_channel(conn, name)


def link_holder(name: str) -> str:
    """The link holds its transmission queue open for as long as it is defined, so that
    the queue cannot be deleted from under its channel; removing the neighbour closes it."""
    return f"neighbour:{name}"


def transmission_queue(name: str) -> QueueOpen:
    return QueueOpen(
        name, f"the channel to neighbour {name} sends from it (remove the neighbour instead)", reads=True
    )


def remove_neighbour(qm: QueueManager, name: str, *, purge: bool = False) -> int:
    """Unlink ``name``; refused (2055) while messages wait for it unless ``purge``."""
    depth = qm.depth(name) if _has_queue(qm, name) else 0
    with qm.reading() as conn:
        waiting = links.outbox_depth(conn).get(name, 0)
    if (depth or waiting) and not purge:
        raise MQError(
            Reason.MQRC_Q_NOT_EMPTY,
            f"{depth + waiting} messages wait for {name}: remove with purge to discard them",
        )
    with qm.engine.begin() as conn:
        links.remove_link(conn, name)
    qm.close_queues(link_holder(name))
    if _has_queue(qm, name):
        qm.delete_queue(name, purge=True)
    return depth + waiting


def neighbour_status(qm: QueueManager) -> list[NeighbourStatus]:
    with qm.reading() as conn:
        found = links.list_links(conn)
        flying = links.outbox_depth(conn)
    queues = qm.inquire_queues(link.name for link in found)  # a link's transmission queue has its name
    return [NeighbourStatus(link, _depth(queues[link.name]), flying.get(link.name, 0)) for link in found]


def _depth(definition: QueueDefinition | None) -> int:
    return 0 if definition is None else definition.depth


def _has_queue(qm: QueueManager, name: str) -> bool:
    try:
        qm.inquire_queue(name)
    except UnknownObject:
        return False
    return True
