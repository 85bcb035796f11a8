"""Routing decisions, pure: who may publish or subscribe where (``authority``), which
subscriptions a topic matches (``topics``), and what a command does to the broker's state
(``engine`` and its handlers ``registration`` and ``publishing``): a command message and
the :class:`BrokerState` in, :class:`Outcome` with its effects out. Every shell (the
routing loop, Spark tasks, the admin API) carries out the same effects."""

from __future__ import annotations

from broker.core import engine, neighbours, replies
from broker.core.authority import AclError, AclRule, Authority, Permission, PrincipalKind
from broker.core.effects import (
    AddSubscription,
    DeadLetter,
    DeleteRetained,
    Deliver,
    Effect,
    Outcome,
    Put,
    RemoveSubscription,
    SetRetained,
)
from broker.core.engine import failed_outcome, housekeeping, route, source_of
from broker.core.neighbours import transmission
from broker.core.retained import RetainedPublication
from broker.core.routing import Source
from broker.core.state import BrokerConfig, BrokerState, Neighbour, QueueDirectory, QueueInfo
from broker.core.subscription import DEFAULT_SUB_POINT, Identity, Subscription, SubscriptionKey
from broker.core.system import CONTROL_QUEUE, DEFAULT_STREAM, INTER_BROKER_QUEUE
from broker.core.topics import TopicError, TopicIndex, TopicTree, matches

__all__ = [
    "CONTROL_QUEUE",
    "DEFAULT_STREAM",
    "DEFAULT_SUB_POINT",
    "INTER_BROKER_QUEUE",
    "AclError",
    "AclRule",
    "AddSubscription",
    "Authority",
    "BrokerConfig",
    "BrokerState",
    "DeadLetter",
    "DeleteRetained",
    "Deliver",
    "Effect",
    "Identity",
    "Neighbour",
    "Outcome",
    "Permission",
    "PrincipalKind",
    "Put",
    "QueueDirectory",
    "QueueInfo",
    "RemoveSubscription",
    "RetainedPublication",
    "SetRetained",
    "Source",
    "Subscription",
    "SubscriptionKey",
    "TopicError",
    "TopicIndex",
    "TopicTree",
    "engine",
    "failed_outcome",
    "housekeeping",
    "matches",
    "neighbours",
    "replies",
    "route",
    "source_of",
    "transmission",
]
