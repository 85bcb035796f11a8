"""Subscriptions and retained publications as operators list them: keyset pages,
filtered in SQL where an index can help and matched exactly in Python."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, and_, func, or_, select

from broker.core.retained import RetainedPublication
from broker.core.subscription import Subscription, SubscriptionKey
from broker.core.topics import SEPARATOR, levels_match, literal_prefix, matches, split_levels
from broker.protocol.options import RegOpt, option_names
from broker.store.mqtt import QUEUE_PREFIX as MQTT_QUEUE_PREFIX
from broker.store.rows import retained_from_row, subscription_from_row, subscription_hash
from broker.store.schema import TOPIC_HEAD, mqtt_sessions, retained, subscriptions
from queues.sql import among, like_prefix

MQTT = "mqtt"
MQRFH2 = "mqrfh2"
PROTOCOLS = (MQRFH2, MQTT)


@dataclass(frozen=True, slots=True)
class SubscriptionFilter:
    topic: str | None = None  # an MQ pattern the subscription's topic string must match
    sub_point: str | None = None
    queue: str | None = None
    q_mgr: str | None = None
    user_id: str | None = None
    proxy: bool | None = None  # True: only proxy subscriptions (from neighbours); False: only local
    # MQTT: those of MQTT sessions (recognised by their session queues, SYSTEM.MQTT.*, which
    # only the listener defines); MQRFH2: every other (applications', proxies')
    protocol: str | None = None


def list_subscriptions(
    conn: Connection, where: SubscriptionFilter, *, after_id: int = 0, limit: int = 100
) -> list[tuple[int, Subscription]]:
    """A page of subscriptions in id order after ``after_id`` (keyset paging: a
    page costs the same at the millionth subscription as at the first)."""
    conditions = [subscriptions.c.id > after_id]
    for column, value in (
        (subscriptions.c.sub_point, where.sub_point),
        (subscriptions.c.queue, where.queue),
        (subscriptions.c.q_mgr, where.q_mgr),
        (subscriptions.c.user_id, where.user_id),
    ):
        if value is not None:
            conditions.append(column == value)
    if where.proxy is not None:
        origin = subscriptions.c.origin
        conditions.append(origin.isnot(None) if where.proxy else origin.is_(None))
    if where.protocol is not None:
        mqtt_queue = subscriptions.c.queue.like(like_prefix(MQTT_QUEUE_PREFIX), escape="\\")
        conditions.append(mqtt_queue if where.protocol == MQTT else ~mqtt_queue)
    # Subscription topics are patterns themselves: their '#'/'+' levels are compared as text.
    pattern = split_levels(where.topic) if where.topic is not None else None
    prefix = literal_prefix(where.topic) if where.topic is not None else ""
    if prefix:
        conditions.append(_head_in(subscriptions.c.topic_head, prefix))
    found: list[tuple[int, Subscription]] = []
    cursor = after_id
    while len(found) < limit:
        conditions[0] = subscriptions.c.id > cursor
        rows = list(
            conn.execute(
                select(subscriptions).where(and_(*conditions)).order_by(subscriptions.c.id).limit(limit)
            )
        )
        if not rows:
            break
        for row in rows:
            cursor = row.id
            if pattern is None or levels_match(pattern, row.topic.split(SEPARATOR)):
                found.append((row.id, subscription_from_row(row)))
                if len(found) == limit:
                    break
    return found


def _head_in(head: Any, prefix: str) -> Any:
    """Topics equal to ``prefix`` or below it, as conditions on the indexed topic head: an
    equality and a range (every string starting with ``prefix/`` lies in [prefix/, prefix0),
    '0' following '/' bytewise). Heads only narrow the rows; the caller matches exactly."""
    below = (prefix + SEPARATOR)[:TOPIC_HEAD]
    upper = below[:-1] + chr(ord(below[-1]) + 1)
    return or_(head == prefix[:TOPIC_HEAD], and_(head >= below, head < upper))


def mqtt_clients(conn: Connection, queues: Iterable[str]) -> dict[str, str]:
    """The MQTT client ids whose session queues are among ``queues``, by queue: whom an MQTT
    session's subscription delivers to (the queue name is a digest of the id)."""
    wanted = [queue for queue in queues if queue.startswith(MQTT_QUEUE_PREFIX)]
    if not wanted:
        return {}
    sessions = mqtt_sessions.c
    statement = select(sessions.queue, sessions.client_id).where(among(conn, sessions.queue, wanted))
    found = conn.execute(statement)
    return {queue: client_id for queue, client_id in found}


def count_subscriptions(conn: Connection) -> int:
    return int(conn.execute(select(func.count()).select_from(subscriptions)).scalar_one())


def get_subscription(conn: Connection, sub_id: int) -> Subscription | None:
    row = conn.execute(select(subscriptions).where(subscriptions.c.id == sub_id)).first()
    return None if row is None else subscription_from_row(row)


def find_subscription(conn: Connection, key: SubscriptionKey) -> tuple[int, Subscription] | None:
    """The subscription with this key and its id (how the admin API names it), or None."""
    stmt = select(subscriptions).where(subscriptions.c.key_hash == subscription_hash(key))
    row = conn.execute(stmt).first()
    return None if row is None else (row.id, subscription_from_row(row))


def list_retained(
    conn: Connection, pattern: str = "#", sub_point: str | None = None, *, after_id: int = 0, limit: int = 100
) -> list[tuple[int, RetainedPublication]]:
    conditions = [retained.c.id > after_id]
    if sub_point is not None:
        conditions.append(retained.c.sub_point == sub_point)
    prefix = literal_prefix(pattern)
    if prefix:
        conditions.append(
            or_(retained.c.topic == prefix, retained.c.topic.like(like_prefix(prefix + "/"), escape="\\"))
        )
    found: list[tuple[int, RetainedPublication]] = []
    cursor = after_id
    while len(found) < limit:
        conditions[0] = retained.c.id > cursor
        rows = list(
            conn.execute(select(retained).where(and_(*conditions)).order_by(retained.c.id).limit(limit))
        )
        if not rows:
            break
        for row in rows:
            cursor = row.id
            if matches(pattern, row.topic):
                found.append((row.id, retained_from_row(row)))
                if len(found) == limit:
                    break
    return found


def get_retained(conn: Connection, retained_id: int) -> RetainedPublication | None:
    row = conn.execute(select(retained).where(retained.c.id == retained_id)).first()
    return None if row is None else retained_from_row(row)


def subscription_json(sub_id: int, sub: Subscription) -> dict[str, object]:
    identity = sub.identity
    return {
        "id": sub_id,
        "topic": sub.key.topic,
        "sub_point": sub.key.sub_point,
        "queue": identity.queue,
        "qmgr": identity.q_mgr,
        "correl_id": identity.correl_id.hex() if identity.correl_id else None,
        "user_id": sub.user_id,
        "options": option_names(RegOpt(sub.options)),
        "sub_name": sub.sub_name,
        "sub_user_data": sub.sub_user_data,
        "expires_at": sub.expires_at,
        "temporary": sub.temporary,
        "members": list(sub.members),
        "origin": sub.origin,
        "created_at": sub.created_at,
    }
