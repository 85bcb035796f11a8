"""Subscribers and their subscriptions, as the broker keeps them (reference 2.5).

A subscriber's *traditional identity* is (queue manager, queue, CorrelId when
registered with CorrelAsId). A subscription is (identity, subscription point,
topic, filter); a SubName is an alternative handle for one subscription. The
record keeps what WBIMB's subscription events show: the owning user, options,
expiry, whether the queue is temporary, the identity set of shared
subscriptions, and, for proxy subscriptions, the neighbouring broker that
registered it (``origin``).
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.protocol.options import RegOpt

DEFAULT_SUB_POINT = ""

# Options a subscription remembers; command-only options (FullResp, AddName,
# NoAlter, Join*, LeaveOnly, DeregAll) act once and are not stored.
STORED_OPTIONS = int(
    RegOpt.CorrelAsId
    | RegOpt.Local
    | RegOpt.NewPubsOnly
    | RegOpt.PubOnReqOnly
    | RegOpt.InformIfRet
    | RegOpt.DupsOK
    | RegOpt.NonPers
    | RegOpt.Pers
    | RegOpt.PersAsPub
    | RegOpt.PersAsQueue
    | RegOpt.VariableUserId
)
_LOCAL = int(RegOpt.Local)


@dataclass(frozen=True, slots=True)
class Identity:
    """Where a subscriber's publications go: queue, queue manager, CorrelId."""

    q_mgr: str
    queue: str
    correl_id: bytes | None = None


@dataclass(frozen=True, slots=True)
class SubscriptionKey:
    identity: Identity
    sub_point: str
    topic: str
    filter: str | None = None


@dataclass(frozen=True, slots=True)
class Subscription:
    key: SubscriptionKey
    user_id: str
    options: int  # RegOpt bits, kept as a plain int: IntFlag arithmetic is slow on the hot path
    created_at: int
    seq: int = 0  # registration order: the first of several matching subscriptions decides options
    sub_name: str | None = None
    sub_user_data: str | None = None
    expires_at: int | None = None
    temporary: bool = False
    members: tuple[str, ...] = ()  # SubIdentity values of the identity set
    exclusive: str | None = None  # the member holding the set exclusively (JoinExcl)
    origin: str | None = None  # neighbour queue manager of a proxy subscription

    @property
    def identity(self) -> Identity:
        return self.key.identity

    @property
    def is_proxy(self) -> bool:
        return self.origin is not None

    @property
    def is_local(self) -> bool:
        return bool(self.options & _LOCAL)

    def expired(self, now: int) -> bool:
        return self.expires_at is not None and self.expires_at <= now
