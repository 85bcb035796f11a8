"""The broker's in-memory state: what routing reads, kept in step by effects.

Subscriptions live in one topic trie per subscription point (so matching a
publication costs the depth of its topic, not the number of subscriptions);
retained publications in one topic index per subscription point (so a wildcard
RegSub or ReqUpdate walks only the matching branches). Counts of global
subscriptions per (subscription point, topic) and origin tell when a proxy
subscription must be registered with, or removed from, a neighbour.

The state is data handed to the pure engine; only :meth:`BrokerState.apply`
changes it, with the same effects a shell writes to the database, so that a
batch's later commands see its earlier ones and every shell stays in step.
"""

from __future__ import annotations

from collections.abc import Container, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from broker.core.authority import Authority
from broker.core.effects import (
    AddSubscription,
    DeleteRetained,
    Deliver,
    Effect,
    Put,
    RemoveSubscription,
    SetRetained,
)
from broker.core.retained import RetainedPublication
from broker.core.subscription import DEFAULT_SUB_POINT, Identity, Subscription, SubscriptionKey
from broker.core.system import CONTROL_QUEUE, DEFAULT_STREAM, INTER_BROKER_QUEUE
from broker.core.topics import TopicIndex, TopicTree

MAX_REMEMBERED = 4096  # publications' recipients remembered (by topic and kind)


@dataclass(frozen=True, slots=True)
class Recipient:
    """A subscription a publication goes to, and the publication's topics it matched (in the
    publication's order): one per subscriber identity, the one registered first."""

    subscription: Subscription
    topics: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """What routing needs to know of a local queue."""

    name: str
    temporary: bool = False


class QueueDirectory(Protocol):
    """Local queues by name; a dict of QueueInfo, or a view a shell keeps fresh."""

    def get(self, name: str, /) -> QueueInfo | None: ...


@dataclass(frozen=True, slots=True)
class Neighbour:
    """A neighbouring broker (its queue manager name) linked to this one."""

    name: str


@dataclass
class BrokerConfig:
    """Which queues feed the broker, and the subscription point each stream serves."""

    qmgr: str
    streams: Mapping[str, str] = field(default_factory=lambda: {DEFAULT_STREAM: DEFAULT_SUB_POINT})
    control_queue: str = CONTROL_QUEUE
    inter_broker_queue: str = INTER_BROKER_QUEUE
    user_id: str = "mqm"  # the broker's own identity on proxy commands and forwards


_DELIVERIES = frozenset({Put, Deliver})  # effects that change nothing here


class BrokerState:
    """Subscriptions, retained publications, authority, queues and neighbours."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        authority: Authority | None = None,
        queues: QueueDirectory | None = None,
        neighbours: Iterable[Neighbour] = (),
    ) -> None:
        self.config = config
        self._authority = authority if authority is not None else Authority()
        self.queues: QueueDirectory = queues if queues is not None else {}
        self.neighbours: dict[str, Neighbour] = {n.name: n for n in neighbours}
        self._subscriptions: dict[SubscriptionKey, Subscription] = {}
        self._names: dict[str, SubscriptionKey] = {}
        self._by_identity: dict[Identity, set[SubscriptionKey]] = {}
        self._trees: dict[str, TopicTree[Subscription]] = {}
        self._retained: dict[str, TopicIndex[RetainedPublication]] = {}
        self._global: dict[tuple[str, str], dict[str | None, int]] = {}
        self._next_seq = 1
        # Local queues whose deliveries come as Deliver effects: a shell that hands publications
        # to their subscribers itself (the MQTT listener's connected clients) names them here.
        self.direct: Container[str] = frozenset()
        # Who receives a publication, by what decides it (broker.core.publishing): the same
        # until a subscription or the authority changes, which empties it.
        self._recipients: dict[Hashable, list[Recipient]] = {}

    @property
    def authority(self) -> Authority:
        return self._authority

    @authority.setter
    def authority(self, authority: Authority) -> None:
        self._authority = authority
        self._recipients.clear()

    def remembered(self, key: Hashable) -> list[Recipient] | None:
        """The recipients remembered for a publication that ``key`` decides (see
        :meth:`remember`), or None."""
        return self._recipients.get(key)

    def remember(self, key: Hashable, recipients: list[Recipient]) -> None:
        """Remember who receives a publication that ``key`` decides, until a subscription or
        the authority changes: the next such publication is neither matched nor authorised."""
        if len(self._recipients) >= MAX_REMEMBERED:
            self._recipients.clear()
        self._recipients[key] = recipients

    @property
    def qmgr(self) -> str:
        return self.config.qmgr

    # -- subscriptions ---------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._subscriptions)

    def subscriptions(self) -> Iterator[Subscription]:
        return iter(self._subscriptions.values())

    def subscription(self, key: SubscriptionKey) -> Subscription | None:
        return self._subscriptions.get(key)

    def named(self, sub_name: str) -> Subscription | None:
        key = self._names.get(sub_name)
        return None if key is None else self._subscriptions[key]

    def of_identity(self, identity: Identity) -> list[Subscription]:
        """The identity's subscriptions in registration order."""
        keys = self._by_identity.get(identity, ())
        return sorted((self._subscriptions[k] for k in keys), key=lambda s: s.seq)

    def match(self, sub_point: str, topic: str) -> list[Subscription]:
        tree = self._trees.get(sub_point)
        return tree.match(topic) if tree is not None else []

    def next_seq(self) -> int:
        """The registration order a new subscription gets (see Subscription.seq)."""
        return self._next_seq

    # -- proxy subscriptions ---------------------------------------------------------------

    def global_origins(self, sub_point: str, topic: str) -> Mapping[str | None, int]:
        """How many global (non-Local) subscriptions each origin holds on (point, topic);
        origin None is this broker's own applications."""
        return self._global.get((sub_point, topic), {})

    def proxied_to(self, neighbour: str) -> list[tuple[str, str]]:
        """(subscription point, topic) pairs this broker must hold a proxy for at
        ``neighbour``: those with a global subscription from anyone but that neighbour."""
        return sorted(key for key, origins in self._global.items() if any(o != neighbour for o in origins))

    # -- retained publications -------------------------------------------------------------

    def retained(self, sub_point: str, topic: str) -> RetainedPublication | None:
        index = self._retained.get(sub_point)
        return index.get(topic) if index is not None else None

    def retained_matching(self, sub_point: str, pattern: str) -> list[RetainedPublication]:
        index = self._retained.get(sub_point)
        return [pub for _, pub in index.match(pattern)] if index is not None else []

    def all_retained(self) -> Iterator[RetainedPublication]:
        for index in self._retained.values():
            for _, publication in index.items():
                yield publication

    # -- changes ---------------------------------------------------------------------------

    def apply(self, effect: Effect) -> None:
        """Apply a state-changing effect; other effects change nothing here."""
        if type(effect) in _DELIVERIES:  # nine effects in ten: answer them first
            return
        if isinstance(effect, AddSubscription):
            self._add(effect.subscription)
        elif isinstance(effect, RemoveSubscription):
            self._remove(effect.key)
        elif isinstance(effect, SetRetained):
            pub = effect.publication
            self._retained.setdefault(pub.sub_point, TopicIndex()).set(pub.topic, pub)
        elif isinstance(effect, DeleteRetained):
            index = self._retained.get(effect.sub_point)
            if index is not None:
                index.delete(effect.topic)

    def apply_all(self, effects: Iterable[Effect]) -> None:
        for effect in effects:
            self.apply(effect)

    def _add(self, subscription: Subscription) -> None:
        self._recipients.clear()
        key = subscription.key
        if key in self._subscriptions:
            self._remove(key)
        self._subscriptions[key] = subscription
        if subscription.sub_name is not None:
            self._names[subscription.sub_name] = key
        self._by_identity.setdefault(key.identity, set()).add(key)
        self._trees.setdefault(key.sub_point, TopicTree()).add(key.topic, subscription)
        if not subscription.is_local:
            origins = self._global.setdefault((key.sub_point, key.topic), {})
            origins[subscription.origin] = origins.get(subscription.origin, 0) + 1
        self._next_seq = max(self._next_seq, subscription.seq + 1)

    def _remove(self, key: SubscriptionKey) -> None:
        subscription = self._subscriptions.pop(key, None)
        if subscription is None:
            return
        self._recipients.clear()
        if subscription.sub_name is not None and self._names.get(subscription.sub_name) == key:
            del self._names[subscription.sub_name]
        keys = self._by_identity[key.identity]
        keys.discard(key)
        if not keys:
            del self._by_identity[key.identity]
        tree = self._trees[key.sub_point]
        tree.remove(key.topic, subscription)
        if not len(tree):
            del self._trees[key.sub_point]
        if not subscription.is_local:
            slot = (key.sub_point, key.topic)
            origins = self._global[slot]
            origins[subscription.origin] -= 1
            if not origins[subscription.origin]:
                del origins[subscription.origin]
            if not origins:
                del self._global[slot]
