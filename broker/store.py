"""The broker's state in SQL: every statement on the ``psb_*`` tables, in one place.

The routing core works on an in-memory :class:`~broker.state.BrokerState`;
this module loads it, keeps it in step with changes made by other processes,
and writes the state-changing effects of a batch in the batch's own
transaction. Versioning: each writing transaction takes the next number from
``psb_meta`` (a row lock on PostgreSQL, the single writer on SQLite, so
versions commit in order) and logs the keys it changed under it; a reader
re-reads only those keys. Writers other than the routing loop (the CLI, the
admin API) use the same functions, so all processes see the same state.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, and_, delete, func, insert, or_, select, update

from broker import brokerpath, psc, rfh2
from broker.authority import AclRule, Authority, Permission, PrincipalKind
from broker.effects import AddSubscription, DeleteRetained, Effect, RemoveSubscription, SetRetained
from broker.network.schema import neighbours
from broker.retained import RetainedPublication
from broker.schema import (
    TOPIC_HEAD,
    acl_rules,
    changes,
    group_members,
    instances,
    meta,
    retained,
    subscriptions,
)
from broker.state import BrokerConfig, BrokerState, Neighbour, QueueDirectory
from broker.subscription import Identity, Subscription, SubscriptionKey
from broker.topics import SEPARATOR, levels_match, literal_prefix, matches, split_levels
from queues import sql
from queues.ids import now_ms
from queues.message import Message

log = logging.getLogger(__name__)

SUBSCRIPTION = "subscription"
RETAINED = "retained"
ACL = "acl"
NEIGHBOUR = "neighbour"
CHANGE_LOG_RETENTION_MS = 15 * 60 * 1000


def subscription_hash(key: SubscriptionKey) -> bytes:
    identity = key.identity
    parts = (identity.q_mgr, identity.queue, (identity.correl_id or b"").hex(), key.sub_point, key.topic)
    text = "\x00".join((*parts, "\x01" if key.filter is None else "\x02" + key.filter))
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=24).digest()


def retained_hash(sub_point: str, topic: str) -> bytes:
    return hashlib.blake2b(
        f"{sub_point}\x00{topic}".encode("utf-8", "surrogatepass"), digest_size=24
    ).digest()


_ACL_KEY = b"\x00" * 24


# -- rows <-> objects --------------------------------------------------------------------------


def subscription_row(sub: Subscription) -> dict[str, Any]:
    key = sub.key
    return {
        "key_hash": subscription_hash(key),
        "q_mgr": key.identity.q_mgr,
        "queue": key.identity.queue,
        "correl_id": key.identity.correl_id,
        "sub_point": key.sub_point,
        "topic": key.topic,
        "topic_head": key.topic[:TOPIC_HEAD],
        "filter": key.filter,
        "user_id": sub.user_id[:12],
        "options": int(sub.options),
        "seq": sub.seq,
        "created_at": sub.created_at,
        "sub_name": sub.sub_name,
        "sub_user_data": sub.sub_user_data,
        "expires_at": sub.expires_at,
        "temporary": int(sub.temporary),
        "members": json.dumps(list(sub.members)),
        "exclusive": sub.exclusive,
        "origin": sub.origin,
    }


def subscription_from_row(row: Any) -> Subscription:
    return Subscription(
        key=SubscriptionKey(
            Identity(row.q_mgr, row.queue, row.correl_id), row.sub_point, row.topic, row.filter
        ),
        user_id=row.user_id,
        options=row.options,
        created_at=row.created_at,
        seq=row.seq,
        sub_name=row.sub_name,
        sub_user_data=row.sub_user_data,
        expires_at=row.expires_at,
        temporary=bool(row.temporary),
        members=tuple(json.loads(row.members)),
        exclusive=row.exclusive,
        origin=row.origin,
    )


_MQMD_FIELDS = (
    "msg_id",
    "correl_id",
    "format",
    "encoding",
    "ccsid",
    "msg_type",
    "report",
    "reply_to_q",
    "reply_to_qmgr",
    "user_id",
    "persistence",
    "priority",
    "expiry",
    "put_appl_type",
    "put_appl_name",
    "put_date",
    "put_time",
)


def retained_row(pub: RetainedPublication) -> dict[str, Any]:
    row = {name: getattr(pub.message, name) for name in _MQMD_FIELDS}
    row.update(
        key_hash=retained_hash(pub.sub_point, pub.topic),
        sub_point=pub.sub_point,
        topic=pub.topic,
        retained_at=pub.retained_at,
        body=pub.message.body,
    )
    return row


def retained_from_row(row: Any) -> RetainedPublication:
    """Rebuild a retained publication; its headers are decoded and its command parsed
    again, which cannot fail for what the broker itself stored."""
    message = Message(body=row.body, **{name: getattr(row, name) for name in _MQMD_FIELDS})
    headers = rfh2.decode(message.body, message.encoding, message.format)
    command: psc.Publish | None = None
    path = None
    for folder in headers.folders:
        name = rfh2.folder_name(folder)
        if name == "psc":
            parsed = psc.parse(folder)
            assert isinstance(parsed, psc.Publish)
            command = parsed
        elif name == brokerpath.FOLDER:
            path = brokerpath.parse(folder)
    assert command is not None
    return RetainedPublication(
        row.sub_point, row.topic, message, command, headers, row.retained_at, path=path
    )


def acl_from_row(row: Any) -> AclRule:
    return AclRule(
        principal=row.principal,
        kind=PrincipalKind(row.kind),
        pattern=row.pattern,
        permission=Permission(row.permission),
        allow=bool(row.allow),
        rule_id=row.id,
    )


# -- the store ---------------------------------------------------------------------------------


class StateStore:
    """Loads, refreshes and persists one process's view of the broker state."""

    def __init__(self, config: BrokerConfig, *, default_allow: bool = True, admin_group: str = "mqm") -> None:
        self.config = config
        self.default_allow = default_allow
        self.admin_group = admin_group
        self.version = -1
        self._subscription_keys: dict[bytes, SubscriptionKey] = {}
        self._retained_keys: dict[bytes, tuple[str, str]] = {}

    def load(self, conn: Connection, queues: QueueDirectory | None = None) -> BrokerState:
        """The whole state, as of this transaction."""
        self.version = current_version(conn)
        state = BrokerState(
            self.config, authority=self.authority(conn), queues=queues, neighbours=load_neighbours(conn)
        )
        self._subscription_keys.clear()
        self._retained_keys.clear()
        for row in conn.execute(select(subscriptions).order_by(subscriptions.c.seq)):
            sub = subscription_from_row(row)
            self._subscription_keys[row.key_hash] = sub.key
            state.apply(AddSubscription(sub))
        for row in conn.execute(select(retained)):
            self._retained_keys[row.key_hash] = (row.sub_point, row.topic)
            state.apply(SetRetained(retained_from_row(row)))
        log.info(
            "state loaded",
            extra={
                "version": self.version,
                "subscriptions": len(state),
                "retained": len(self._retained_keys),
            },
        )
        return state

    def authority(self, conn: Connection) -> Authority:
        return load_authority(conn, default_allow=self.default_allow, admin_group=self.admin_group)

    def refresh(self, conn: Connection, state: BrokerState) -> BrokerState:
        """Bring ``state`` up to date with what other processes committed: one query
        when nothing changed; the changed rows only otherwise; everything again when
        the change log no longer reaches back far enough."""
        version = current_version(conn)
        if version == self.version:
            return state
        logged = list(
            conn.execute(
                select(changes.c.version, changes.c.entity, changes.c.entity_key)
                .where(changes.c.version > self.version)
                .order_by(changes.c.version)
            )
        )
        if not logged or logged[0].version != self.version + 1:
            return self.load(conn, state.queues)
        keys: dict[str, set[bytes]] = {}
        for row in logged:
            keys.setdefault(row.entity, set()).add(row.entity_key)
        self._refresh_subscriptions(conn, state, keys.get(SUBSCRIPTION, set()))
        self._refresh_retained(conn, state, keys.get(RETAINED, set()))
        if ACL in keys:
            state.authority = self.authority(conn)
        if NEIGHBOUR in keys:
            state.neighbours = {n.name: n for n in load_neighbours(conn)}
        self.version = version
        return state

    def _refresh_subscriptions(self, conn: Connection, state: BrokerState, hashes: set[bytes]) -> None:
        if not hashes:
            return
        rows = {
            r.key_hash: r
            for r in conn.execute(select(subscriptions).where(subscriptions.c.key_hash.in_(hashes)))
        }
        for key_hash in hashes:
            row = rows.get(key_hash)
            if row is not None:
                sub = subscription_from_row(row)
                self._subscription_keys[key_hash] = sub.key
                state.apply(AddSubscription(sub))
            elif (key := self._subscription_keys.pop(key_hash, None)) is not None:
                state.apply(RemoveSubscription(key))

    def _refresh_retained(self, conn: Connection, state: BrokerState, hashes: set[bytes]) -> None:
        if not hashes:
            return
        rows = {r.key_hash: r for r in conn.execute(select(retained).where(retained.c.key_hash.in_(hashes)))}
        for key_hash in hashes:
            row = rows.get(key_hash)
            if row is not None:
                self._retained_keys[key_hash] = (row.sub_point, row.topic)
                state.apply(SetRetained(retained_from_row(row)))
            elif (slot := self._retained_keys.pop(key_hash, None)) is not None:
                state.apply(DeleteRetained(*slot))

    def write(self, conn: Connection, effects: Iterable[Effect]) -> None:
        """Persist the state-changing effects of one batch (last change per key wins)."""
        subs: dict[bytes, Subscription | None] = {}
        pubs: dict[bytes, RetainedPublication | None] = {}
        for effect in effects:
            if isinstance(effect, AddSubscription):
                key_hash = subscription_hash(effect.subscription.key)
                subs[key_hash] = effect.subscription
                self._subscription_keys[key_hash] = effect.subscription.key
            elif isinstance(effect, RemoveSubscription):
                key_hash = subscription_hash(effect.key)
                subs[key_hash] = None
                self._subscription_keys.pop(key_hash, None)
            elif isinstance(effect, SetRetained):
                pub = effect.publication
                key_hash = retained_hash(pub.sub_point, pub.topic)
                pubs[key_hash] = pub
                self._retained_keys[key_hash] = (pub.sub_point, pub.topic)
            elif isinstance(effect, DeleteRetained):
                key_hash = retained_hash(effect.sub_point, effect.topic)
                pubs[key_hash] = None
                self._retained_keys.pop(key_hash, None)
        if not subs and not pubs:
            return
        _replace(conn, subscriptions, subs, subscription_row)
        _replace(conn, retained, pubs, retained_row)
        self._logged(conn, [(SUBSCRIPTION, h) for h in subs] + [(RETAINED, h) for h in pubs], own=True)

    def _logged(self, conn: Connection, entries: Sequence[tuple[str, bytes]], *, own: bool) -> int:
        version = log_changes(conn, entries)
        if own and version == self.version + 1:
            self.version = version  # nobody else wrote since we last looked: no need to re-read
        return version


def load_neighbours(conn: Connection) -> list[Neighbour]:
    return [
        Neighbour(row.name) for row in conn.execute(select(neighbours.c.name).order_by(neighbours.c.name))
    ]


def load_authority(conn: Connection, *, default_allow: bool, admin_group: str) -> Authority:
    """The ACL rules and groups as an Authority, with the configured default policy."""
    return Authority(
        list_acl_rules(conn), list_groups(conn), default_allow=default_allow, admin_group=admin_group
    )


def current_version(conn: Connection) -> int:
    """Asked by every batch of every router: compiled once."""
    ((version,),) = sql.fetch_cached(conn, "state_version", _version_statement)
    return int(version)


def _version_statement() -> Any:
    return select(meta.c.version).where(meta.c.id == 1)


def log_changes(conn: Connection, entries: Sequence[tuple[str, bytes]]) -> int:
    """Take the next state version (serialising writers until commit) and log ``entries``."""
    version = int(
        conn.execute(
            update(meta).where(meta.c.id == 1).values(version=meta.c.version + 1).returning(meta.c.version)
        ).scalar_one()
    )
    now = now_ms()
    unique = dict.fromkeys(entries)
    conn.execute(
        insert(changes),
        [
            {"version": version, "entity": entity, "entity_key": key, "changed_at": now}
            for entity, key in unique
        ],
    )
    return version


def prune_changes(conn: Connection, now: int) -> int:
    """Forget change-log entries old enough that every live process has read them."""
    stmt = delete(changes).where(changes.c.changed_at < now - CHANGE_LOG_RETENTION_MS)
    return conn.execute(stmt).rowcount


def _replace(conn: Connection, table: Any, items: dict[bytes, Any], to_row: Any) -> None:
    if not items:
        return
    conn.execute(delete(table).where(table.c.key_hash.in_(list(items))))
    rows = [to_row(value) for value in items.values() if value is not None]
    if rows:
        conn.execute(insert(table), rows)


# -- administration: ACLs ----------------------------------------------------------------------


def list_acl_rules(conn: Connection) -> list[AclRule]:
    return [acl_from_row(row) for row in conn.execute(select(acl_rules).order_by(acl_rules.c.id))]


def add_acl_rule(conn: Connection, rule: AclRule) -> AclRule:
    result = conn.execute(
        insert(acl_rules).values(
            principal=rule.principal,
            kind=str(rule.kind),
            pattern=rule.pattern,
            permission=str(rule.permission),
            allow=int(rule.allow),
            created_at=now_ms(),
        )
    )
    log_changes(conn, [(ACL, _ACL_KEY)])
    rule_id = result.inserted_primary_key[0] if result.inserted_primary_key else None
    return AclRule(rule.principal, rule.kind, rule.pattern, rule.permission, rule.allow, rule_id)


def update_acl_rule(conn: Connection, rule_id: int, rule: AclRule) -> bool:
    values = {
        "principal": rule.principal,
        "kind": str(rule.kind),
        "pattern": rule.pattern,
        "permission": str(rule.permission),
        "allow": int(rule.allow),
    }
    if not conn.execute(update(acl_rules).where(acl_rules.c.id == rule_id).values(**values)).rowcount:
        return False
    log_changes(conn, [(ACL, _ACL_KEY)])
    return True


def remove_acl_rule(conn: Connection, rule_id: int) -> bool:
    if not conn.execute(delete(acl_rules).where(acl_rules.c.id == rule_id)).rowcount:
        return False
    log_changes(conn, [(ACL, _ACL_KEY)])
    return True


def list_groups(conn: Connection) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for row in conn.execute(
        select(group_members).order_by(group_members.c.group_name, group_members.c.user_id)
    ):
        groups.setdefault(row.group_name, []).append(row.user_id)
    return groups


def set_group_member(conn: Connection, group: str, user: str, member: bool) -> bool:
    """Add (member=True) or remove a user; returns whether anything changed."""
    table = group_members
    exists = conn.execute(
        select(table.c.user_id).where(table.c.group_name == group, table.c.user_id == user)
    ).first()
    if member == (exists is not None):
        return False
    if member:
        conn.execute(insert(table).values(group_name=group, user_id=user))
    else:
        conn.execute(delete(table).where(table.c.group_name == group, table.c.user_id == user))
    log_changes(conn, [(ACL, _ACL_KEY)])
    return True


# -- administration: listings ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SubscriptionFilter:
    topic: str | None = None  # an MQ pattern the subscription's topic string must match
    sub_point: str | None = None
    queue: str | None = None
    q_mgr: str | None = None
    user_id: str | None = None


def _like_prefix(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


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
            or_(retained.c.topic == prefix, retained.c.topic.like(_like_prefix(prefix + "/"), escape="\\"))
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


# -- instances ---------------------------------------------------------------------------------


def write_instance(
    conn: Connection, instance: str, role: str, started_at: int, stats: dict[str, Any]
) -> None:
    """Publish one process's statistics, for status pages served by any process."""
    conn.execute(delete(instances).where(instances.c.instance == instance))
    conn.execute(
        insert(instances).values(
            instance=instance,
            role=role,
            started_at=started_at,
            heartbeat_at=now_ms(),
            stats=json.dumps(stats),
        )
    )


def list_instances(conn: Connection, *, alive_within_ms: int | None = None) -> list[dict[str, Any]]:
    stmt = select(instances).order_by(instances.c.started_at)
    if alive_within_ms is not None:
        stmt = stmt.where(instances.c.heartbeat_at >= now_ms() - alive_within_ms)
    return [
        {
            "instance": row.instance,
            "role": row.role,
            "started_at": row.started_at,
            "heartbeat_at": row.heartbeat_at,
            "stats": json.loads(row.stats),
        }
        for row in conn.execute(stmt)
    ]
