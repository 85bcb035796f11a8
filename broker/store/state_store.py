"""The broker's state in SQL: every statement on the ``psb_*`` tables, in one place.

The routing core works on an in-memory :class:`~broker.core.state.BrokerState`;
this module loads it, keeps it in step with changes made by other processes,
and writes the state-changing effects of a batch in the batch's own
transaction. Versioning: each writing transaction takes the next number from
``psb_meta`` (a row lock on PostgreSQL, the single writer on SQLite, so
versions commit in order) and logs the keys it changed under it; a reader
re-reads only those keys. Writers other than the routing loop (the CLI, the
admin API) use the same functions, so all processes see the same state.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection, delete, select

from broker.core.authority import Authority
from broker.core.effects import AddSubscription, DeleteRetained, Effect, RemoveSubscription, SetRetained
from broker.core.retained import RetainedPublication
from broker.core.state import BrokerConfig, BrokerState, Neighbour, QueueDirectory
from broker.core.subscription import Subscription, SubscriptionKey
from broker.store.acl import list_acl_rules, list_groups
from broker.store.changes import ACL, NEIGHBOUR, RETAINED, SUBSCRIPTION, current_version, log_changes
from broker.store.rows import (
    retained_from_row,
    retained_hash,
    retained_row,
    subscription_from_row,
    subscription_hash,
    subscription_row,
)
from broker.store.schema import changes, neighbours, retained, subscriptions
from queues.bulk import insert_mappings
from queues.sql import among

log = logging.getLogger(__name__)


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
            for r in conn.execute(select(subscriptions).where(among(conn, subscriptions.c.key_hash, hashes)))
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
        statement = select(retained).where(among(conn, retained.c.key_hash, hashes))
        rows = {r.key_hash: r for r in conn.execute(statement)}
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


def _replace(conn: Connection, table: Any, items: dict[bytes, Any], to_row: Any) -> None:
    if not items:
        return
    conn.execute(delete(table).where(among(conn, table.c.key_hash, items)))
    insert_mappings(conn, table, [to_row(value) for value in items.values() if value is not None])
