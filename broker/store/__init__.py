"""The broker's state in SQL: every statement on the ``psb_*`` tables of the state lives in
this package, shared by every shell (the routing loop, the channel agents, the Spark job,
the admin API and the CLI), so that all processes see one state.

Routers load the state into a :class:`~broker.core.state.BrokerState`, keep it in step
with other processes' changes through the change log, and write each batch's
state-changing effects in the batch's own transaction (``state_store``, ``changes``);
operators list and change it (``listings``, ``topic_levels``, ``acl``); processes report themselves
(``instances``) and hold leases (``leases``; their holders are named by ``queues.owners``).
"""

from __future__ import annotations

from broker.store import acl, changes, instances, leases, listings, rows, schema, state_store, topic_levels
from broker.store.acl import (
    add_acl_rule,
    list_acl_rules,
    list_groups,
    remove_acl_rule,
    set_group_member,
    update_acl_rule,
)
from broker.store.changes import (
    ACL,
    CHANGE_LOG_RETENTION_MS,
    NEIGHBOUR,
    RETAINED,
    SUBSCRIPTION,
    current_version,
    log_changes,
    prune_changes,
)
from broker.store.instances import list_instances, write_instance
from broker.store.listings import (
    SubscriptionFilter,
    count_subscriptions,
    find_subscription,
    get_retained,
    get_subscription,
    list_retained,
    list_subscriptions,
    mqtt_clients,
)
from broker.store.rows import subscription_row
from broker.store.state_store import StateStore, load_authority, load_neighbours

__all__ = [
    "ACL",
    "CHANGE_LOG_RETENTION_MS",
    "NEIGHBOUR",
    "RETAINED",
    "SUBSCRIPTION",
    "StateStore",
    "SubscriptionFilter",
    "acl",
    "add_acl_rule",
    "changes",
    "count_subscriptions",
    "current_version",
    "find_subscription",
    "get_retained",
    "get_subscription",
    "instances",
    "leases",
    "list_acl_rules",
    "list_groups",
    "list_instances",
    "list_retained",
    "list_subscriptions",
    "listings",
    "load_authority",
    "load_neighbours",
    "log_changes",
    "mqtt_clients",
    "prune_changes",
    "remove_acl_rule",
    "rows",
    "schema",
    "set_group_member",
    "state_store",
    "subscription_row",
    "topic_levels",
    "update_acl_rule",
    "write_instance",
]
