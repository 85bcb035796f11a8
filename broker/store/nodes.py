"""The members of an MQTT cluster in SQL (``psb_mqtt_nodes``), and the leases of what one of
them does for all.

A member is one listener process of a node, named by its owner name (``queues.owners``),
which the sessions it holds record. It counts up its beat (:func:`beat`); another member
declares it dead (:func:`declare_dead`) and releases its sessions (:func:`release`, with
``broker.store.mqtt.release_owner``), each step a conditional UPDATE that one member wins.
Every gateway batch of a member asserts its lease in its own transaction (:func:`guard`): a
member declared dead commits nothing more. A bridge, and the session limits' passes, run on
the member holding their lease (:func:`take_lease`) while it lives. Why and how:
``docs/decisions.md``, "MQTT nodes".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, Insert, Update, bindparam, delete, exists, insert, null, select, update

from broker.core.cluster import Member
from broker.store.schema import leases, mqtt_nodes
from queues import sql
from queues.errors import MQError
from queues.reasons import Reason
from queues.sql import insert_new

# Leases in psb_leases held by a member for as long as it is alive: what one node does.
BRIDGE = "mqtt-bridge:"  # + a bridge's name
SESSION_LIMITS = "mqtt-session-limits"  # the passes of session expiry and mqtt_max_queued
SYS_TOTALS = "mqtt-sys-totals"  # the cluster's $SYS totals (broker.core.sys_status)
FREE = ""
MAX_ADDRESS = 256
FORGOTTEN_MS = 24 * 3600 * 1000  # a node dead that long is no longer listed


class LeaseLost(MQError):
    """This listener process was declared dead by another: what it holds is no longer its own."""

    def __init__(self, owner: str) -> None:
        super().__init__(
            Reason.MQRC_Q_MGR_NOT_AVAILABLE, f"{owner} was declared dead: its sessions are no longer its own"
        )


def register(conn: Connection, member: Member) -> None:
    """Add ``member``, alive (its first beat)."""
    conn.execute(
        insert(mqtt_nodes).values(
            owner=member.owner,
            node=member.node,
            address=member.address[:MAX_ADDRESS],
            started_at=member.started_at,
            beat=member.beat,
            heartbeat_at=member.heartbeat_at,
            clients=member.clients,
        )
    )


def members(conn: Connection) -> list[Member]:
    """Every member, alive or dead, by node and start."""
    nodes = mqtt_nodes.c
    rows = conn.execute(select(mqtt_nodes).order_by(nodes.node, nodes.started_at, nodes.owner))
    return [_member(row) for row in rows]


def member(conn: Connection, owner: str) -> Member | None:
    row = conn.execute(select(mqtt_nodes).where(mqtt_nodes.c.owner == owner)).first()
    return None if row is None else _member(row)


def _member(row: Any) -> Member:
    return Member(
        row.owner,
        row.node,
        row.address,
        row.started_at,
        row.beat,
        row.heartbeat_at,
        row.clients,
        row.dead_at,
        bool(row.released),
        _counters(row.counters),
    )


def _counters(text: str) -> tuple[tuple[str, int], ...]:
    """The counters a member wrote (whatever else the column holds is no counter)."""
    try:
        found = json.loads(text)
    except ValueError:
        return ()
    if not isinstance(found, dict):
        return ()
    return tuple(sorted((str(k), v) for k, v in found.items() if isinstance(v, int)))


def beat(
    conn: Connection, owner: str, clients: int, now: int, counters: Mapping[str, int] | None = None
) -> bool:
    """Count up ``owner``'s beat, recording its ``clients`` and its ``$SYS`` ``counters``; False
    if it has been declared dead (its lease is lost)."""
    nodes = mqtt_nodes.c
    values: dict[str, Any] = {"beat": nodes.beat + 1, "heartbeat_at": now, "clients": clients}
    if counters is not None:
        values["counters"] = json.dumps(dict(counters), separators=(",", ":"))
    statement = update(mqtt_nodes).where(nodes.owner == owner, nodes.dead_at == 0).values(values)
    return conn.execute(statement).rowcount == 1


def declare_dead(conn: Connection, owner: str, seen: int | None, now: int) -> bool:
    """Declare ``owner`` dead if its beat is still ``seen`` (None: whatever it is); False if it
    is not (it beat since, or another member declared it first) or a batch of its own holds
    its row now (that batch ends first: try again later). Locking the row waits for nothing."""
    nodes = mqtt_nodes.c
    found = conn.execute(
        select(nodes.beat).where(nodes.owner == owner, nodes.dead_at == 0).with_for_update(skip_locked=True)
    ).first()
    if found is None or (seen is not None and found.beat != seen):
        return False
    statement = update(mqtt_nodes).where(nodes.owner == owner, nodes.dead_at == 0).values(dead_at=now)
    return conn.execute(statement).rowcount == 1


def leave(conn: Connection, owner: str, now: int) -> None:
    """``owner`` stops: dead from now (its sessions, ended by itself, are released by another)."""
    nodes = mqtt_nodes.c
    conn.execute(update(mqtt_nodes).where(nodes.owner == owner, nodes.dead_at == 0).values(dead_at=now))


def release(conn: Connection, owner: str, now: int) -> Member | None:
    """Take the release of a dead member's sessions: the member if this caller is the one to
    release them (exactly one caller is), else None. The released members of its node before
    it go, and those of any node released over :data:`FORGOTTEN_MS` ago (a node taken out of
    service leaves the cluster view a day after it died)."""
    nodes = mqtt_nodes.c
    statement = update(mqtt_nodes).where(nodes.owner == owner, nodes.dead_at != 0, nodes.released == 0)
    if conn.execute(statement.values(released=1)).rowcount != 1:
        return None
    found = member(conn, owner)
    assert found is not None
    earlier = (nodes.node == found.node) | (nodes.dead_at < now - FORGOTTEN_MS)
    conn.execute(delete(mqtt_nodes).where(earlier, nodes.released == 1, nodes.owner != owner))
    return found


def guard(conn: Connection, owner: str) -> None:
    """Fail the transaction unless ``owner`` is alive, and keep it from being declared dead
    until the transaction ends (a key-share lock on its row, which :func:`declare_dead`'s
    row lock waits for). It reads nothing back, so it may go in a pipeline: a lost lease is
    an error, a NULL owner inserted, which aborts the transaction (its COMMIT included)."""
    sql.execute_cached(conn, "mqtt-node-guard", _guard, {"owner": owner})


def _guard() -> Insert:
    nodes = mqtt_nodes.c
    held = select(nodes.owner).where(nodes.owner == bindparam("owner"), nodes.dead_at == 0)
    alive = exists(held.with_for_update(read=True, key_share=True))
    return insert(mqtt_nodes).from_select(["owner"], select(null()).where(~alive))


def holds(conn: Connection, owner: str) -> bool:
    """Whether ``owner`` is alive (after a failed batch: was it the guard that failed it?)."""
    found = member(conn, owner)
    return found is not None and found.alive


# -- leases of what one node does ------------------------------------------------------------


def take_lease(conn: Connection, resource: str, owner: str) -> bool:
    """Take the lease of ``resource`` for ``owner`` unless a live member holds it; True if
    ``owner`` holds it now. A lease is held for as long as its holder is alive, no clock."""
    conn.execute(insert_new(conn, leases, ("resource",)), {"resource": resource, "owner": FREE, "until": 0})
    return conn.execute(_take(resource, owner)).rowcount == 1


def _take(resource: str, owner: str) -> Update:
    alive = select(mqtt_nodes.c.owner).where(mqtt_nodes.c.dead_at == 0)
    holder = leases.c.owner
    free = (holder == FREE) | (holder == owner) | holder.not_in(alive)
    return update(leases).where(leases.c.resource == resource, free).values(owner=owner, until=0)


def lease_holder(conn: Connection, resource: str) -> str:
    """The owner holding ``resource``'s lease ("": nobody)."""
    found = conn.execute(select(leases.c.owner).where(leases.c.resource == resource)).scalar()
    return found or FREE


def free_lease(conn: Connection, resource: str, owner: str) -> None:
    """Free ``resource``'s lease if ``owner`` holds it (a bridge that stops)."""
    statement = update(leases).where(leases.c.resource == resource, leases.c.owner == owner)
    conn.execute(statement.values(owner=FREE))
