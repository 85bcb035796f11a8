"""The broadcast snapshot: what every task routes against.

The driver captures, once, inside the transaction that fixes the watermark:
the subscriptions (in registration order), the ACL rules, groups and default
policy, the local queue definitions, the neighbours and the broker's
configuration, plus the job's clock reading and the put context the queue manager
stamps on what it puts. Spark broadcasts it pickled, inside the job's
:class:`~broker.spark.partition.TaskSpec`; each executor's Python process rebuilds a
:class:`~broker.core.state.BrokerState` from it once (:func:`broker.spark.task.prepared`
caches it by job) and routes every partition it is given against it.

Two deliberate omissions. Retained publications: a publication on a stream never
reads them (only DeletePub does, and a partition routes those in its turn, against
the retained store as the partitions before it left it), and a million of them
would be broadcast for nothing. Subscriptions the service's housekeeping would
remove at the job's clock (expired, or on a temporary queue that is gone): the
driver removes them first, exactly so, in the transaction that captures the
snapshot, and a task never meets one; otherwise each partition would remove them
on its own, in whatever order tasks happen to run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import Connection

from broker import store
from broker.core import engine
from broker.core.authority import AclRule, Authority
from broker.core.effects import AddSubscription, Effect
from broker.core.state import BrokerConfig, BrokerState, Neighbour, QueueInfo
from broker.core.subscription import Subscription
from queues import sql
from queues.definition import QueueDefinition


@dataclass(frozen=True, slots=True)
class PutContext:
    """Who puts: the queue manager, and the user and application it fills in on puts
    (MQ's identity and origin context)."""

    qmgr: str
    user_id: str
    appl_name: str


@dataclass(frozen=True, slots=True)
class Snapshot:
    job: str
    stream: str
    now: int  # the job's clock: every message is routed, stamped and expired against it
    context: PutContext
    config: BrokerConfig
    rules: tuple[AclRule, ...]
    groups: Mapping[str, tuple[str, ...]]
    default_allow: bool
    admin_group: str
    subscriptions: tuple[Subscription, ...]  # registration order; housekeeping done at ``now``
    definitions: Mapping[str, QueueDefinition]
    neighbours: tuple[str, ...]

    def state(self) -> BrokerState:
        """The routing state this snapshot describes (subscriptions added in order, as
        :meth:`broker.store.StateStore.load` adds them)."""
        state = BrokerState(
            self.config,
            authority=Authority(self.rules, self.groups, self.default_allow, self.admin_group),
            queues=queue_directory(self.definitions),
            neighbours=[Neighbour(name) for name in self.neighbours],
        )
        for subscription in self.subscriptions:
            state.apply(AddSubscription(subscription))
        return state


def queue_directory(definitions: Mapping[str, QueueDefinition]) -> dict[str, QueueInfo]:
    return {
        name: QueueInfo(name, temporary=definition.definition_type == "tempdyn")
        for name, definition in definitions.items()
    }


def capture(
    conn: Connection,
    state_store: store.StateStore,
    *,
    job: str,
    stream: str,
    now: int,
    context: PutContext,
) -> tuple[Snapshot, list[Effect]]:
    """The snapshot as of ``conn``'s transaction, after housekeeping at ``now``, and the
    housekeeping's effects (for the caller to write in the same transaction)."""
    definitions = {row.name: QueueDefinition.from_row(row) for row in sql.select_queues(conn)}
    state = state_store.load(conn, queue_directory(definitions))
    housekeeping = engine.housekeeping(state, now)
    state.apply_all(housekeeping)
    authority = state.authority
    snapshot = Snapshot(
        job=job,
        stream=stream,
        now=now,
        context=context,
        config=state.config,
        rules=authority.rules,
        groups=dict(authority.groups),
        default_allow=authority.default_allow,
        admin_group=state_store.admin_group,
        subscriptions=tuple(sorted(state.subscriptions(), key=lambda s: s.seq)),
        definitions=definitions,
        neighbours=tuple(sorted(state.neighbours)),
    )
    return snapshot, housekeeping
