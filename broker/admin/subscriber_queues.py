"""Deleting a queue that subscriptions deliver to.

A subscription whose queue is gone sends every matching publication to the dead-letter
queue (2085) until someone deregisters it. So deleting a queue that subscriptions of
this broker deliver to is refused (MQRC_OBJECT_IN_USE, 2042) with what uses it; forced,
the subscriptions are deregistered first, through the broker as any DeregSub is (so its
neighbours drop their proxies too), as the broker's own user, since deleting a queue is
an administrator's act whoever registered the subscriptions. The admin API and the CLI
both delete queues this way; ``QueueManager.delete_queue`` itself knows nothing of
subscriptions.
"""

from __future__ import annotations

from collections.abc import Callable

from broker import store
from broker.client import BrokerClient, BrokerResponse, RegOpt
from broker.core.subscription import Identity
from broker.store import SubscriptionFilter
from queues import QueueManager
from queues.errors import MQError
from queues.reasons import Reason

SHOWN = 3  # topics named in the refusal


def identities_on(qm: QueueManager, queue: str) -> tuple[list[Identity], list[str]]:
    """The subscriber identities delivering to ``queue`` of this queue manager, and the
    topics of their subscriptions."""
    identities: dict[Identity, None] = {}
    topics: list[str] = []
    after = 0
    with qm.reading() as conn:
        while page := store.list_subscriptions(
            conn, SubscriptionFilter(queue=queue, q_mgr=qm.name), after_id=after, limit=500
        ):
            for sub_id, sub in page:
                identities[sub.identity] = None
                topics.append(sub.key.topic)
                after = sub_id
    return list(identities), topics


def delete_queue(
    qm: QueueManager,
    name: str,
    *,
    purge: bool = False,
    force: bool = False,
    deregister: Callable[[Identity], object],
    force_option: str = "force",
) -> int:
    """Delete ``name`` as DELETE QLOCAL does, refusing while subscriptions deliver to it
    unless ``force``, which deregisters them first with ``deregister``. Everything that
    would refuse the delete is checked before any subscription goes. The refusal names
    ``force`` as the caller spells it (``force_option``: the CLI's ``--force``)."""
    definition = qm.inquire_queue(name)
    holders = qm.holders(name)
    if holders:
        raise MQError(Reason.MQRC_OBJECT_IN_USE, f"queue {name} is in use: {holders[0].describe()}")
    if definition.depth and not purge:
        raise MQError(Reason.MQRC_Q_NOT_EMPTY, f"queue {name} is not empty; purge it first")
    identities, topics = identities_on(qm, name)
    if topics and not force:
        more = len(topics) - SHOWN
        shown = ", ".join(topics[:SHOWN]) + (f" and {more} more" if more > 0 else "")
        raise MQError(
            Reason.MQRC_OBJECT_IN_USE,
            f"queue {name} receives {len(topics)} subscription(s) ({shown}); deregister them, or "
            f"delete the queue with {force_option}, which deregisters them",
        )
    for identity in identities:
        deregister(identity)
    return qm.delete_queue(name, purge=purge)


def deregistration(identity: Identity, user_id: str) -> Callable[[BrokerClient], BrokerResponse]:
    """The DeregSub that removes every subscription of ``identity``, whoever registered
    them (``user_id`` is the broker's administrator)."""
    options = RegOpt.DeregAll | RegOpt.VariableUserId
    if identity.correl_id:
        options |= RegOpt.CorrelAsId
    return lambda client: client.unsubscribe(
        queue=identity.queue,
        q_mgr=identity.q_mgr,
        options=options,
        correl_id=identity.correl_id,
        user_id=user_id,
    )
