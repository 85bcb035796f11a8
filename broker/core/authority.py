"""Who may publish and who may subscribe where: access-control rules over the topic tree.

An :class:`Authority` is built once from ACL rules and group memberships and never changes, so
every answer can be cached and the same object can be shared by the service loop, Spark tasks and
the admin API. The admin API's dry run prints :attr:`Decision.rule`, so the semantics below are
exact; they are also what ``tests/broker/core/test_authority.py`` checks against a brute-force model.

Principals
    A USER rule names an MQMD UserIdentifier, a GROUP rule a group from ``groups`` (group -> user
    ids). UserIdentifier is a blank-padded 12-character field, so every principal (rule principal,
    group name, group member, the principal asked about) is compared exactly, case included, after
    trailing blanks are stripped. Groups do not nest.

Subject topic
    PUBLISH is decided on the publication's concrete topic (a wildcard or empty topic raises
    :class:`~broker.core.topics.TopicError`, 3072). SUBSCRIBE is decided on the pattern's literal prefix,
    the levels before its first wildcard level, which is where MQ V7 checks a subscription; the
    engine checks each delivered publication's topic separately. A pattern that starts with a
    wildcard (``#``, ``+/x``) is decided at the root of the tree, which only ``#``-only rule
    patterns reach.

Which rules apply
    A rule applies to (principal, permission, subject) when its permission is the one asked for,
    it names the principal or one of the principal's groups, and its pattern matches the subject or
    any ancestor of it (``broker.core.topics`` semantics): authority is inherited down the tree as
    MQ topic-object authority is. ``Sport`` covers ``Sport`` and ``Sport/Soccer/Results``;
    ``Sport/+`` covers ``Sport/Soccer`` and ``Sport/Soccer/Results``, not ``Sport``.

Which rule decides
    Among the applicable rules, the highest specificity wins, compared as the tuple
    ``(literal levels, '+' levels, direct, user)``: the number of levels in the rule's pattern that
    are neither ``#`` nor ``+`` (an empty level counts as literal), then the number of ``+`` levels,
    then 1 if the pattern matches the subject itself rather than only an ancestor, then 1 for a USER
    rule over a GROUP rule. On equal specificity a deny beats an allow. Rules still tied agree on
    the answer; the one given first in ``rules`` is reported. With no applicable rule the default
    policy decides and :attr:`Decision.rule` is None.

Administrators
    :meth:`Authority.is_admin` reports the broker's own user (named like ``admin_group``, ``mqm`` by
    default, as MQ's administrative user and group share that name) and the members of that group.
    The engine uses it where IBM lets an administrator act for another user (deregistering someone
    else's subscription, reference section 2.5). It grants nothing inside :meth:`Authority.decide`
    (why: ``docs/decisions.md``, "Authority").

Speed: rules are indexed in one :class:`~broker.core.topics.TopicTree` per (permission, principal), so
a decision costs a few trie walks whatever the number of rules, and decisions are cached in a
bounded LRU per instance (``cache_size`` entries, 0 disables it). Without rules,
:meth:`Authority.decide` only validates the topic.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache, partial
from types import MappingProxyType
from typing import TypeVar

from broker.core.topics import (
    MULTI_LEVEL,
    SEPARATOR,
    SINGLE_LEVEL,
    TopicTree,
    check_publish_topic,
    check_subscribe_topic,
    levels_match,
    literal_prefix_levels,
    split_levels,
)
from queues.errors import MQError
from queues.message import USER_ID_LENGTH
from queues.reasons import Reason

DEFAULT_CACHE_SIZE = 65_536
_BLANK = " "


class Permission(StrEnum):
    PUBLISH = "publish"
    SUBSCRIBE = "subscribe"


class PrincipalKind(StrEnum):
    USER = "user"
    GROUP = "group"


PRINCIPAL = re.compile(rf"[!-~]{{1,{USER_ID_LENGTH}}}")


def check_principal(principal: str) -> str:
    """Refuse a principal that can never be a UserIdentifier (4005), so that no rule, group or
    account names someone who cannot exist: a deny rule for nobody is false assurance."""
    if PRINCIPAL.fullmatch(principal) is None:
        raise MQError(
            Reason.MQRCCF_ATTR_VALUE_ERROR,
            f"principal {principal!r} must be 1 to {USER_ID_LENGTH} printable ASCII characters without"
            " blanks: it is sent as the MQMD UserIdentifier",
        )
    return principal


class AclError(MQError):
    """3008 MQRCCF_COMMAND_FAILED: an ACL rule or question that cannot be evaluated."""

    def __init__(self, message: str) -> None:
        super().__init__(Reason.MQRCCF_COMMAND_FAILED, message)


E = TypeVar("E", bound=StrEnum)


def _enum_member(enum: type[E], value: str, field: str) -> E:
    """Accept enum members and their string values (rules loaded from a table or from JSON)."""
    try:
        return enum(value)
    except ValueError:
        choices = ", ".join(member.value for member in enum)
        raise AclError(f"{field} must be one of {choices}, not {value!r}") from None


@dataclass(frozen=True, slots=True)
class AclRule:
    """Allow or deny ``principal`` one permission on ``pattern`` and, by inheritance, below it."""

    principal: str
    kind: PrincipalKind
    pattern: str
    permission: Permission
    allow: bool
    rule_id: int | None = None

    def __post_init__(self) -> None:
        check_subscribe_topic(self.pattern)
        object.__setattr__(self, "kind", _enum_member(PrincipalKind, self.kind, "kind"))
        object.__setattr__(self, "permission", _enum_member(Permission, self.permission, "permission"))


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer and the rule that gave it; ``rule`` None means the default policy decided."""

    allowed: bool
    rule: AclRule | None


@dataclass(frozen=True, slots=True)
class CheckResult:
    """Topics split by the answer, each side in input order (the order of the ``<pscr>``)."""

    allowed: tuple[str, ...]
    refused: tuple[str, ...]


@dataclass(frozen=True, slots=True, eq=False)
class _IndexedRule:
    """A rule with what ranking needs precomputed; identity-hashed, so equal rules stay distinct."""

    position: int
    decision: Decision
    levels: tuple[str, ...]
    literal_levels: int
    single_levels: int
    is_user: bool

    @classmethod
    def of(cls, position: int, rule: AclRule) -> _IndexedRule:
        levels = split_levels(rule.pattern)
        single = levels.count(SINGLE_LEVEL)
        return cls(
            position=position,
            decision=Decision(rule.allow, rule),
            levels=levels,
            literal_levels=len(levels) - single - levels.count(MULTI_LEVEL),
            single_levels=single,
            is_user=rule.kind is PrincipalKind.USER,
        )

    def rank(self, subject: tuple[str, ...]) -> tuple[int, int, bool, bool, bool, int]:
        """Specificity, then deny over allow, then earlier position: the maximum decides."""
        return (
            self.literal_levels,
            self.single_levels,
            levels_match(self.levels, subject),
            self.is_user,
            not self.decision.allowed,
            -self.position,
        )


def _inherited(pattern: str) -> str:
    """The pattern that matches what ``pattern`` matches and everything below it."""
    if pattern.split(SEPARATOR)[-1] == MULTI_LEVEL:
        return pattern
    return pattern + SEPARATOR + MULTI_LEVEL


def _normalise(principal: str) -> str:
    return principal.rstrip(_BLANK)


_NO_GROUPS: Mapping[str, Iterable[str]] = MappingProxyType({})


class Authority:
    """Immutable ACL evaluation for one broker; see the module docstring for the exact rules."""

    __slots__ = (
        "_admin_group",
        "_admins",
        "_cache_size",
        "_decide_cached",
        "_default",
        "_groups",
        "_memberships",
        "_rules",
        "_trees",
    )

    def __init__(
        self,
        rules: Iterable[AclRule] = (),
        groups: Mapping[str, Iterable[str]] = _NO_GROUPS,
        default_allow: bool = True,
        admin_group: str = "mqm",
        *,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> None:
        self._rules = tuple(rules)
        self._default = Decision(bool(default_allow), None)
        members: dict[str, dict[str, None]] = {}
        for group, users in groups.items():
            members.setdefault(_normalise(group), {}).update(
                dict.fromkeys(_normalise(user) for user in users)
            )
        self._groups = MappingProxyType({group: tuple(users) for group, users in members.items()})
        memberships: dict[str, list[str]] = {}
        for group, users in self._groups.items():
            for user in users:
                memberships.setdefault(user, []).append(group)
        self._memberships = {user: tuple(names) for user, names in memberships.items()}
        self._admin_group = _normalise(admin_group)
        self._admins = frozenset(self._groups.get(self._admin_group, ()))
        self._trees: dict[tuple[Permission, PrincipalKind, str], TopicTree[_IndexedRule]] = {}
        for position, rule in enumerate(self._rules):
            key = (rule.permission, rule.kind, _normalise(rule.principal))
            tree = self._trees.get(key)
            if tree is None:
                tree = self._trees[key] = TopicTree()
            tree.add(_inherited(rule.pattern), _IndexedRule.of(position, rule))
        self._cache_size = cache_size
        self._decide_cached = lru_cache(maxsize=cache_size)(self._evaluate)

    def __reduce__(self) -> tuple[Callable[..., Authority], tuple[object, ...]]:
        """Pickle the configuration, not the cache: Spark broadcasts an Authority to its tasks."""
        rebuild = partial(Authority, cache_size=self._cache_size)
        return rebuild, (self._rules, dict(self._groups), self._default.allowed, self._admin_group)

    @property
    def rules(self) -> tuple[AclRule, ...]:
        return self._rules

    @property
    def groups(self) -> Mapping[str, tuple[str, ...]]:
        """Group -> members, blank-stripped and de-duplicated, in the order given."""
        return self._groups

    @property
    def default_allow(self) -> bool:
        return self._default.allowed

    def decide(self, principal: str, permission: Permission, topic: str) -> Decision:
        """Whether ``principal`` may publish on ``topic`` or subscribe to pattern ``topic``."""
        if not self._trees:
            _check_topic(permission, topic)
            return self._default
        return self._decide_cached(_normalise(principal), permission, topic, False)

    def decide_pattern(self, principal: str, permission: Permission, pattern: str) -> Decision:
        """Decide at the point in the tree where ``pattern`` applies (its literal prefix),
        whatever the permission: e.g. may a wildcard DeletePub reach every broker, where
        topics this broker has never seen may match it."""
        check_subscribe_topic(pattern)
        if not self._trees:
            return self._default
        return self._decide_cached(_normalise(principal), permission, pattern, True)

    def check(self, principal: str, permission: Permission, topics: Sequence[str]) -> CheckResult:
        """Split a command's topics into the authorised and the refused (warning 3081 each)."""
        allowed: list[str] = []
        refused: list[str] = []
        for topic in topics:
            answer = allowed if self.decide(principal, permission, topic).allowed else refused
            answer.append(topic)
        return CheckResult(tuple(allowed), tuple(refused))

    def is_admin(self, principal: str) -> bool:
        """The broker's own user (named like the administrative group, as MQ's ``mqm``) or a
        member of that group: may act on other users' subscriptions."""
        user = _normalise(principal)
        return user == self._admin_group or user in self._admins

    def _evaluate(self, principal: str, permission: Permission, topic: str, prefix: bool) -> Decision:
        subject = literal_prefix_levels(topic) if prefix else _subject_levels(permission, topic)
        best: _IndexedRule | None = None
        best_rank: tuple[int, int, bool, bool, bool, int] | None = None
        for key in self._principal_keys(principal, permission):
            tree = self._trees.get(key)
            if tree is None:
                continue
            for candidate in tree.match_levels(subject):
                rank = candidate.rank(subject)
                if best_rank is None or rank > best_rank:
                    best, best_rank = candidate, rank
        return self._default if best is None else best.decision

    def _principal_keys(
        self, principal: str, permission: Permission
    ) -> Iterable[tuple[Permission, PrincipalKind, str]]:
        yield permission, PrincipalKind.USER, principal
        for group in self._memberships.get(principal, ()):
            yield permission, PrincipalKind.GROUP, group


def _check_topic(permission: Permission, topic: str) -> None:
    if permission == Permission.PUBLISH:
        check_publish_topic(topic)
    elif permission == Permission.SUBSCRIBE:
        check_subscribe_topic(topic)
    else:
        _enum_member(Permission, permission, "permission")  # raises: not a permission


def _subject_levels(permission: Permission, topic: str) -> tuple[str, ...]:
    """The levels a decision is about: the topic itself, or a subscription's literal prefix."""
    _check_topic(permission, topic)
    if permission == Permission.PUBLISH:
        return split_levels(topic)
    return literal_prefix_levels(topic)
