"""A broker's configuration exported to a file and imported from one, as IBM MQ's ``dmpmqcfg``
and RabbitMQ's definitions do (``broker config``, ``/api/v1/config`` and the console's
Configuration page all call these).

What is configuration: queues (system queues apart, and without temporary dynamic queues,
MQTT session queues and neighbours' transmission queues, which come and go with what owns
them), subscriptions registered here (not the proxies neighbours registered, nor MQTT
sessions' or temporary queues' subscriptions), retained publications when asked for, ACL
rules and groups, neighbours (their link tokens only when asked for) and MQTT principals with
their password hashes.

An import reads and checks the whole file, compares it with the broker
(``broker.admin.config_changes``) and checks what the broker's state would refuse (a queue
to delete that holds messages, a new neighbour named like a queue) before it changes
anything. It then defines and alters queues one by one, as ``QueueManager.define_queue``
commits each; writes subscriptions, retained publications, ACL rules, groups, MQTT principals
and changed links in one unit of work, through the state store's change log, so that every
router takes them from its next batch; then adds and removes neighbours and deletes queues.
Subscriptions are restored into the store, not registered through the broker: a neighbour
learns of a restored subscription's topics when its link is defined after the import.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import version
from typing import Any

from sqlalchemy import Connection

from broker import store
from broker.admin import config_changes, config_file, neighbours, toml_writer
from broker.admin.config_changes import Change
from broker.admin.config_file import (
    KIND,
    SYSTEM_PREFIX,
    AclRuleConfig,
    Configuration,
    GroupConfig,
    InvalidConfiguration,
    MqttPrincipalConfig,
    NeighbourConfig,
    Problem,
    QueueConfig,
    RetainedConfig,
    SubscriptionConfig,
)
from broker.core.effects import AddSubscription, DeleteRetained, Effect, RemoveSubscription, SetRetained
from broker.core.state import BrokerConfig
from broker.network import links
from broker.store import mqtt
from broker.store.listings import MQRFH2
from queues import QueueManager
from queues.definition import check_attributes
from queues.errors import MQError, UnknownObject
from queues.ids import now_ms
from queues.opens import check_alter

PACKAGE = "wmq-psc-broker"
PAGE = 1000  # subscriptions or retained publications read at a time


@dataclass(frozen=True, slots=True)
class Report:
    """What an import did, or would do (``dry_run``): the changes, and what it left."""

    dry_run: bool
    changes: list[Change] = field(default_factory=list)
    left: list[Change] = field(default_factory=list)

    def lines(self) -> list[str]:
        """One line per change, then one per object left as it is; ``no changes`` if none."""
        lines = [change.line() for change in [*self.changes, *self.left]]
        return lines if self.changes else [*lines, "no changes"]


def export_text(qm: QueueManager, *, retained: bool = False, secrets: bool = False) -> str:
    """The broker's configuration as the file's text, after a comment with the date and the
    release (the only lines that change between two exports of an unchanged broker)."""
    config = read_configuration(qm, retained=retained, secrets=secrets)
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    comments = (
        f"Configuration of queue manager {qm.name}, exported {stamp} by {PACKAGE} {version(PACKAGE)}",
        "broker config import FILE applies it; docs/configuration.md describes every table and key.",
    )
    return toml_writer.dumps(config_file.document(config, secrets=secrets), comments=comments)


def import_text(qm: QueueManager, text: str, *, dry_run: bool = False, prune: bool = False) -> Report:
    """Read ``text``, compare it with the broker and, unless ``dry_run``, make the changes;
    :class:`InvalidConfiguration` (nothing changed) lists every problem found first."""
    wanted = config_file.read(text, qm.name)
    current = read_configuration(qm, retained=wanted.retained is not None, secrets=True)
    found = config_changes.changes(current, wanted, prune=prune)
    problems = config_changes.problems(found, wanted, qm.name) + list(_refusals(qm, found, wanted))
    if problems:
        raise InvalidConfiguration(problems)
    changing = [change for change in found if change.changing]
    if changing and not dry_run:
        _apply(qm, changing)
    return Report(dry_run, changing, [change for change in found if not change.changing])


def read_configuration(qm: QueueManager, *, retained: bool, secrets: bool) -> Configuration:
    """The broker's configuration (retained publications only if ``retained``, link tokens
    only if ``secrets``)."""
    with qm.reading() as conn:
        linked = links.list_links(conn)
        kinds: dict[str, Any] = {
            "subscriptions": [SubscriptionConfig.of(sub, qm.name) for sub in _subscriptions(conn)],
            "acl_rules": _acl_rules(conn),
            "groups": [GroupConfig(group, tuple(users)) for group, users in store.list_groups(conn).items()],
            "neighbours": [NeighbourConfig(n.name, n.url, n.token if secrets else None) for n in linked],
            "mqtt_principals": [
                MqttPrincipalConfig(user, mqtt.password_hash(conn, user) or "")
                for user, _ in mqtt.list_principals(conn)
            ],
        }
        if retained:
            kinds["retained"] = [RetainedConfig.of(pub) for pub in _retained(conn)]
    transmission = {link.name for link in linked}
    queues = [
        QueueConfig.of(q)
        for q in qm.list_queues()
        if q.definition_type != "tempdyn"
        and not q.name.startswith(mqtt.QUEUE_PREFIX)
        and q.name not in transmission
    ]
    kinds["queues"] = [q for q in queues if not q.name.startswith(SYSTEM_PREFIX)]
    kinds["system_queues"] = [q for q in queues if q.name.startswith(SYSTEM_PREFIX)]
    return config_file.configuration(qm.name, **kinds)


def _subscriptions(conn: Connection) -> Iterator[Any]:
    """The subscriptions registered at this broker, not a neighbour's proxy, an MQTT
    session's or a temporary queue's."""
    where = store.SubscriptionFilter(proxy=False, protocol=MQRFH2)
    after = 0
    while page := store.list_subscriptions(conn, where, after_id=after, limit=PAGE):
        yield from (sub for _, sub in page if not sub.temporary)
        after = page[-1][0]


def _retained(conn: Connection) -> Iterator[Any]:
    after = 0
    while page := store.list_retained(conn, "#", after_id=after, limit=PAGE):
        yield from (pub for _, pub in page)
        after = page[-1][0]


def _acl_rules(conn: Connection) -> list[AclRuleConfig]:
    """One rule per principal, permission and topic: of rules that say both, the deny (it
    decides, as it beats an allow of the same specificity)."""
    found: dict[tuple[Any, ...], AclRuleConfig] = {}
    kind = KIND["acl_rule"]
    for rule in store.list_acl_rules(conn):
        config = AclRuleConfig.of(rule)
        key = kind.key_of(config)
        if key not in found or not config.allow:
            found[key] = config
    return list(found.values())


# -- what the broker's state refuses --------------------------------------------------------------


def _refusals(qm: QueueManager, found: list[Change], wanted: Configuration) -> Iterator[Problem]:
    for change in found:
        table = change.kind.table
        if table in ("queue", "system_queue") and change.action in ("alter", "delete"):
            yield from _queue_refusals(qm, change, wanted)
        elif table == "neighbour" and change.action == "create":
            yield from _new_neighbour_refusals(qm, change, wanted)
        elif table == "neighbour" and change.action == "delete":
            yield from _old_neighbour_refusals(qm, change)


def _old_neighbour_refusals(qm: QueueManager, change: Change) -> Iterator[Problem]:
    definition = qm.inquire_queues([change.name])[change.name]
    with qm.reading() as conn:
        waiting = links.outbox_depth(conn).get(change.name, 0) + (definition.depth if definition else 0)
    if waiting:
        message = f"not in the file, but {waiting} messages wait for it: remove it yourself"
        yield Problem(message, table=change.kind.table, name=change.name)


def _queue_refusals(qm: QueueManager, change: Change, wanted: Configuration) -> Iterator[Problem]:
    name, kind = change.name, change.kind
    holders = qm.holders(name)
    if change.action == "delete":
        depth = qm.depth(name)
        if depth:
            yield Problem(
                f"not in the file, but it holds {depth} messages: purge it first", table=kind.table, name=name
            )
        if holders:
            yield Problem(
                f"not in the file, but it is in use: {holders[0].describe()}", table=kind.table, name=name
            )
        return
    values = check_attributes({d.attribute: d.new for d in change.differences})
    try:
        check_alter(name, values, holders)
    except MQError as exc:
        yield wanted.place(kind, change.wanted, exc.detail)


def _new_neighbour_refusals(qm: QueueManager, change: Change, wanted: Configuration) -> Iterator[Problem]:
    name = change.name
    if name == qm.name:
        yield wanted.place(change.kind, change.wanted, "this broker's own queue manager is not a neighbour")
        return
    try:
        existing = qm.inquire_queue(name)
    except UnknownObject:
        return
    if existing.usage != "xmitq":
        message = f"a local queue named {name} exists: the neighbour's transmission queue needs its name"
        yield wanted.place(change.kind, change.wanted, message)


# -- making the changes --------------------------------------------------------------------------


def _apply(qm: QueueManager, changing: list[Change]) -> None:
    by_table: dict[str, list[Change]] = {}
    for change in changing:
        by_table.setdefault(change.kind.table, []).append(change)
    queues = by_table.get("system_queue", []) + by_table.get("queue", [])
    for change in queues:
        if change.action == "create":
            qm.define_queue(change.name, **change.wanted.attributes())
        elif change.action == "alter":
            qm.alter_queue(change.name, **{d.attribute: d.new for d in change.differences})
    now = now_ms()
    with qm.unit_of_work() as uow:
        conn = uow.connection
        state = by_table.get("subscription", []) + by_table.get("retained", [])
        store.StateStore(BrokerConfig(qm.name)).write(conn, list(_state_effects(conn, qm.name, state, now)))
        _apply_acl_rules(conn, by_table.get("acl_rule", []))
        _apply_groups(conn, by_table.get("group", []))
        _apply_principals(conn, by_table.get("mqtt_principal", []), now)
        for change in by_table.get("neighbour", []):
            if change.action == "alter":
                new = {d.attribute: d.new for d in change.differences}
                links.update_link(conn, change.name, url=new.get("url"), token=new.get("token"))
    for change in by_table.get("neighbour", []):
        if change.action == "create":
            neighbour = change.wanted
            neighbours.add_neighbour(qm, neighbour.name, neighbour.url, neighbour.token, check_topology=False)
        elif change.action == "delete":
            neighbours.remove_neighbour(qm, change.name)
    for change in queues:
        if change.action == "delete":
            qm.delete_queue(change.name)


def _state_effects(conn: Connection, qmgr: str, changing: list[Change], now: int) -> Iterator[Effect]:
    """Subscriptions and retained publications as the routing engine's effects, written by
    the state store as a router writes its own. An altered subscription keeps its place in
    the registration order; new ones come after every other."""
    next_seq: int | None = None
    for change in changing:
        if change.kind.table == "retained":
            if change.action == "delete":
                yield DeleteRetained(change.current.sub_point, change.current.topic)
            else:
                yield SetRetained(change.wanted.publication(qmgr, now))
        elif change.action == "delete":
            yield RemoveSubscription(change.current.key(qmgr))
        elif change.action == "alter":
            found = store.find_subscription(conn, change.wanted.key(qmgr))
            assert found is not None  # it was read a moment ago, and this transaction writes it
            old = found[1]
            yield AddSubscription(change.wanted.subscription(qmgr, seq=old.seq, created_at=old.created_at))
        else:
            next_seq = _last_seq(conn) + 1 if next_seq is None else next_seq + 1
            yield AddSubscription(change.wanted.subscription(qmgr, seq=next_seq, created_at=now))


def _last_seq(conn: Connection) -> int:
    """The last registration order given to any subscription, proxies and MQTT's included."""
    last, after = 0, 0
    while page := store.list_subscriptions(conn, store.SubscriptionFilter(), after_id=after, limit=PAGE):
        last = max(last, *(sub.seq for _, sub in page))
        after = page[-1][0]
    return last


def _apply_acl_rules(conn: Connection, changing: list[Change]) -> None:
    if not changing:
        return
    kind = KIND["acl_rule"]
    ids: dict[tuple[Any, ...], list[int]] = {}
    for rule in store.list_acl_rules(conn):
        assert rule.rule_id is not None  # a rule read from its table
        ids.setdefault(kind.key_of(AclRuleConfig.of(rule)), []).append(rule.rule_id)
    for change in changing:
        if change.action == "create":
            store.add_acl_rule(conn, change.wanted.rule())
        for rule_id in ids.get(kind.key_of(change.current), []) if change.current is not None else []:
            if change.action == "alter":
                store.update_acl_rule(conn, rule_id, change.wanted.rule())
            else:
                store.remove_acl_rule(conn, rule_id)


def _apply_groups(conn: Connection, changing: list[Change]) -> None:
    for change in changing:
        old = set(change.current.members) if change.current is not None else set()
        new = set(change.wanted.members) if change.wanted is not None else set()
        for user in sorted(new - old):
            store.set_group_member(conn, change.name, user, True)
        for user in sorted(old - new):
            store.set_group_member(conn, change.name, user, False)


def _apply_principals(conn: Connection, changing: list[Change], now: int) -> None:
    for change in changing:
        if change.action == "delete":
            mqtt.delete_principal(conn, change.name)
        else:
            mqtt.set_password_hash(conn, change.wanted.user, change.wanted.password_hash, now)
