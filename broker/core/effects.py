"""What routing a command decides, as plain data for a shell to carry out.

The engine never writes anything: it returns effects. The service loop applies
them in one transaction, the Spark job writes them idempotently, tests compare
them. State-changing effects are also applied to the in-memory
:class:`~broker.core.state.BrokerState` by :meth:`~broker.core.state.BrokerState.apply`,
so that the next command of a batch sees them.

Effects are values, never changed once built; their classes are not frozen only because a
frozen dataclass costs seven times as much to build, and one is built per delivery.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from broker.core.retained import RetainedPublication
from broker.core.subscription import Subscription, SubscriptionKey
from queues.message import Message

# Why a message is put: counted separately in statistics and logs.
DELIVERY = "delivery"
REPLY = "reply"
FORWARD = "forward"
PROXY = "proxy"


@dataclass(slots=True, unsafe_hash=True)
class Put:
    """Put ``message`` on ``queue`` at ``q_mgr`` ("" = this queue manager)."""

    queue: str
    message: Message
    q_mgr: str = ""
    kind: str = DELIVERY
    topic: str = ""  # for deliveries: the (first) topic, for logs


@dataclass(slots=True, unsafe_hash=True)
class Deliver:
    """A delivery to a local queue whose subscriber a shell may hand publications to itself
    (:attr:`~broker.core.state.BrokerState.direct`): the message is built only if it goes
    on the queue after all (:meth:`put`), never for a publication handed over another way."""

    queue: str
    build: Callable[[], Message]
    topic: str  # the (first) topic the subscriber matched

    def put(self) -> Put:
        return Put(self.queue, self.build(), "", DELIVERY, self.topic)


@dataclass(slots=True, unsafe_hash=True)
class AddSubscription:
    """Register ``subscription``, replacing any with the same key."""

    subscription: Subscription


@dataclass(slots=True, unsafe_hash=True)
class RemoveSubscription:
    key: SubscriptionKey


@dataclass(slots=True, unsafe_hash=True)
class SetRetained:
    publication: RetainedPublication


@dataclass(slots=True, unsafe_hash=True)
class DeleteRetained:
    sub_point: str
    topic: str


@dataclass(slots=True, unsafe_hash=True)
class DeadLetter:
    """The command message cannot be processed: dead-letter it with ``reason``."""

    message: Message
    queue: str  # where it was put (the broker's input queue)
    reason: int


Effect = Put | Deliver | AddSubscription | RemoveSubscription | SetRetained | DeleteRetained | DeadLetter


@dataclass(slots=True, unsafe_hash=True)
class Outcome:
    """The effects of routing one message, and a summary for logs and metrics."""

    effects: tuple[Effect, ...]
    command: str | None  # Publish, RegSub, ... ; None when not even that could be read
    completion: str  # ok | warning | error
    reason: int = 0  # the first error or warning reason
    refused_topics: tuple[str, ...] = ()
    detail: str = ""
    counts: dict[str, int] = field(default_factory=dict)  # puts by kind
