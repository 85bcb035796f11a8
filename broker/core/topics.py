"""Topic strings, wildcard matching, the subscription trie and the retained-publication index.

The rules are those of MQRFH2 (WebSphere Message Broker 6 / MQ V7 topic syntax, reference
section 4.1), because that is what applications written against IBM's broker already send:

* A topic is a sequence of levels separated by ``/``. Levels are compared exactly (case-sensitive,
  any Unicode). An empty level is a level like any other, so ``a//b``, ``a/b``, ``/a`` and ``a/``
  are four different topics. The empty string is not a topic anywhere: it raises
  :class:`TopicError` (MQRCCF_TOPIC_ERROR, 3072) wherever a topic or a pattern is accepted.
* A level that is exactly ``+`` matches exactly one level; a level that is exactly ``#`` matches
  zero or more levels. Inside a longer level both characters are literal (``USA#``, ``a+b``), as
  WMB 6 and MQ V7 treat them; WBIMB 5.1 rejected such topics, but refusing them would break
  applications that IBM's current brokers accept.
* ``#`` is accepted as a whole level anywhere, not only first or last. Mid-topic ``#`` is marked
  [U] for WMB 6 in the reference; decision: it means what MQ V7 documents, zero or more levels at
  that position, so ``a/#/b`` matches ``a/b``, ``a/x/b`` and ``a/x/y/b``. Wildcards combine
  (``+/Alabama/#``), and ``#`` alone matches every topic.
* A topic whose first level begins with ``$`` (``$SYS/broker/load``: a system topic, as MQTT
  defines them) is not matched by a ``#`` or ``+`` first level: ``#`` and ``+/broker/load`` do not
  receive it, ``$SYS/#`` does. One rule for subscriptions of both protocols and for the retained
  publications a wildcard finds; authority rules are not subscriptions, and a rule on ``#``
  still covers ``$SYS``.
* Publication topics are concrete: a wildcard level there is MQRCCF_TOPIC_ERROR, as IBM's broker
  answers a Publish with a wildcard topic. Every method that takes a concrete topic enforces it,
  so a wildcard DeletePub can never silently turn into a literal lookup.

:class:`TopicTree` (subscriptions) and :class:`TopicIndex` (retained publications) are level tries
built from one node type. Their walks follow a topic's levels and branch only at wildcards, so the
cost depends on the topic's depth and on the number of results, never on how many entries are
stored: that is what lets one core route tens of thousands of publications a second against a
million subscriptions. Level strings are interned, child dictionaries are created lazily and a
node holds a single value without a container, because at that scale per-node overhead, not the
data, dominates memory.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Hashable, Iterator, Sequence
from operator import itemgetter
from typing import Any, Generic, Self, TypeVar

from queues.errors import MQError
from queues.reasons import Reason

SEPARATOR = "/"
MULTI_LEVEL = "#"
SINGLE_LEVEL = "+"

V = TypeVar("V", bound=Hashable)


class TopicError(MQError):
    """3072 MQRCCF_TOPIC_ERROR: a topic or pattern that the broker must refuse."""

    def __init__(self, topic: str, problem: str) -> None:
        super().__init__(Reason.MQRCCF_TOPIC_ERROR, f"{problem}: {topic!r}")
        self.topic = topic


def split_levels(topic: str) -> tuple[str, ...]:
    """The levels of ``topic`` or pattern; raising here keeps "" from ever meaning "the root"."""
    if not topic:
        raise TopicError(topic, "the empty topic is not valid")
    return tuple(topic.split(SEPARATOR))


def is_wildcard(topic: str) -> bool:
    """True when some whole level is ``#`` or ``+`` (``USA#`` is literal)."""
    if MULTI_LEVEL not in topic and SINGLE_LEVEL not in topic:
        return False
    levels = topic.split(SEPARATOR)
    return MULTI_LEVEL in levels or SINGLE_LEVEL in levels


def check_publish_topic(topic: str) -> None:
    """Refuse what IBM's broker refuses in a Publish: the empty topic and any wildcard level."""
    if not topic:
        raise TopicError(topic, "the empty topic is not valid")
    if is_wildcard(topic):
        raise TopicError(topic, "a publication topic must not contain a wildcard level")


def check_subscribe_topic(topic: str) -> None:
    """Refuse the empty topic; every other string is a valid subscription pattern."""
    if not topic:
        raise TopicError(topic, "the empty topic is not valid")


def levels_match(pattern: Sequence[str], topic: Sequence[str]) -> bool:
    """Whether pattern levels match concrete topic levels; empty ``topic`` is the tree's root.

    The pattern is read as a small automaton: ``states`` holds every pattern position reachable
    after the levels consumed so far. A ``#`` position can be skipped (zero levels) or absorb a
    level and stay put, ``+`` absorbs any one level, a literal absorbs only itself. Tracking the
    set of positions instead of backtracking keeps runs of ``#`` linear rather than exponential.
    """
    end = len(pattern)
    states = _skip_multi_levels(pattern, {0})
    for level in topic:
        advanced: set[int] = set()
        for position in states:
            if position == end:
                continue
            wanted = pattern[position]
            if wanted == MULTI_LEVEL:
                advanced.add(position)
            elif wanted in (SINGLE_LEVEL, level):
                advanced.add(position + 1)
        if not advanced:
            return False
        states = _skip_multi_levels(pattern, advanced)
    return end in states


def _skip_multi_levels(pattern: Sequence[str], states: set[int]) -> set[int]:
    """Add the positions reached by letting each ``#`` match zero levels."""
    closed = set(states)
    for position in states:
        while position < len(pattern) and pattern[position] == MULTI_LEVEL:
            position += 1
            closed.add(position)
    return closed


SYSTEM_PREFIX = "$"


def server_topic(topic: str) -> bool:
    """Whether ``topic`` is the server's own (first level ``$...``): no client publishes there
    (MQTT 3.1.1 4.7.2), whatever the ACL allows."""
    return topic.startswith(SYSTEM_PREFIX)


def hidden_from(first_pattern_level: str, first_topic_level: str) -> bool:
    """Whether a system topic (first level ``$...``) escapes a pattern's wildcard first level."""
    return first_topic_level.startswith(SYSTEM_PREFIX) and first_pattern_level in (MULTI_LEVEL, SINGLE_LEVEL)


def matches(pattern: str, topic: str) -> bool:
    """The reference answer to "does a subscription to ``pattern`` receive ``topic``?"."""
    check_subscribe_topic(pattern)
    levels, concrete = split_levels(pattern), _concrete_levels(topic)
    return not hidden_from(levels[0], concrete[0]) and levels_match(levels, concrete)


def literal_prefix_levels(pattern: str) -> tuple[str, ...]:
    """The levels before the first wildcard level: where in the tree a subscription is made."""
    levels = split_levels(pattern)
    for index, level in enumerate(levels):
        if level in (MULTI_LEVEL, SINGLE_LEVEL):
            return levels[:index]
    return levels


def literal_prefix(pattern: str) -> str:
    """:func:`literal_prefix_levels` as a topic string; "" stands for the root (``#`` -> "")."""
    return SEPARATOR.join(literal_prefix_levels(pattern))


def _concrete_levels(topic: str) -> list[str]:
    """Split a concrete topic, refusing it as :func:`check_publish_topic` does, in one pass."""
    if not topic:
        raise TopicError(topic, "the empty topic is not valid")
    levels = topic.split(SEPARATOR)
    if (MULTI_LEVEL in topic or SINGLE_LEVEL in topic) and (MULTI_LEVEL in levels or SINGLE_LEVEL in levels):
        raise TopicError(topic, "a concrete topic must not contain a wildcard level")
    return levels


class _Empty:
    """Marks a node without a value; a private type so that ``None`` stays a legal value."""

    __slots__ = ()


_EMPTY = _Empty()


class _Many(dict[Any, None]):
    """Several values on one node: an insertion-ordered set, so match order is deterministic."""

    __slots__ = ()


class _Node:
    """One level of a trie. ``children`` is created only when a first child arrives: most nodes
    of a large tree are leaves, and an empty dict per leaf would double the tree's memory."""

    __slots__ = ("children", "value")

    def __init__(self) -> None:
        self.children: dict[str, Self] | None = None
        # V, several as _Many, or _EMPTY: compared with ``is`` and ``type() is`` on the match
        # path, which mypy does not narrow (hence the ignores where a value is handed out).
        self.value: object = _EMPTY


class _TopicNode(_Node):
    """A :class:`TopicIndex` node also keeps the caller's topic string, so answers need no join."""

    __slots__ = ("topic",)

    def __init__(self) -> None:
        super().__init__()
        self.topic = ""


N = TypeVar("N", bound=_Node)


def _descend(root: N, levels: Sequence[str]) -> N:
    """The node for ``levels``, creating missing nodes with interned level keys."""
    node = root
    for level in levels:
        children = node.children
        if children is None:
            children = node.children = {}
        child = children.get(level)
        if child is None:
            child = children[sys.intern(level)] = type(root)()
        node = child
    return node


def _path(root: N, levels: Sequence[str]) -> list[N] | None:
    """Every node from the root to ``levels`` (inclusive), or None when the path is absent."""
    path = [root]
    node = root
    for level in levels:
        children = node.children
        child = None if children is None else children.get(level)
        if child is None:
            return None
        path.append(child)
        node = child
    return path


def _prune(path: Sequence[_Node], levels: Sequence[str]) -> None:
    """Unlink the now-empty tail of ``path`` so removals give the memory back."""
    for depth in range(len(levels), 0, -1):
        node = path[depth]
        if node.children or node.value is not _EMPTY:
            return
        parent = path[depth - 1]
        children = parent.children
        assert children is not None
        del children[levels[depth - 1]]
        if not children:
            parent.children = None


def _count_nodes(root: _Node) -> int:
    """How many nodes hang from ``root``, itself included (tests use it to prove pruning)."""
    count = 0
    stack = [root]
    while stack:
        node = stack.pop()
        count += 1
        if node.children:
            stack.extend(node.children.values())
    return count


class TopicTree(Generic[V]):
    """Patterns (with wildcards) -> values; :meth:`match` finds every value whose pattern matches
    a concrete topic. Values must be hashable: a pattern with thousands of subscribers keeps them
    in an insertion-ordered set, so adding, removing and de-duplicating stay O(1)."""

    __slots__ = ("_root", "_size")

    def __init__(self) -> None:
        self._root: _Node = _Node()
        self._size = 0

    def add(self, pattern: str, value: V) -> None:
        """Store ``value`` under ``pattern``; storing the same pair twice keeps one copy."""
        node = _descend(self._root, split_levels(pattern))
        current = node.value
        if current is _EMPTY:
            node.value = value
        elif type(current) is _Many:
            if value in current:
                return
            current[value] = None
        elif current == value:
            return
        else:
            node.value = _Many.fromkeys((current, value))
        self._size += 1

    def remove(self, pattern: str, value: V) -> bool:
        """Forget one pair and prune the nodes it leaves empty; False when it was not stored."""
        levels = split_levels(pattern)
        path = _path(self._root, levels)
        if path is None:
            return False
        node = path[-1]
        current = node.value
        if type(current) is _Many:
            if value not in current:
                return False
            del current[value]
            if len(current) == 1:
                node.value = next(iter(current))
        elif current is _EMPTY or current != value:
            return False
        else:
            node.value = _EMPTY
            _prune(path, levels)
        self._size -= 1
        return True

    def match(self, topic: str) -> list[V]:
        """Every value whose pattern matches the concrete ``topic``, once per (pattern, value) pair.

        A value stored under two matching patterns comes back twice; only the caller knows which
        values denote the same subscriber.
        """
        levels = _concrete_levels(topic)
        return self.match_levels(levels, root_wildcards=not levels[0].startswith(SYSTEM_PREFIX))

    def match_levels(self, levels: Sequence[str], *, root_wildcards: bool = True) -> list[V]:
        """:meth:`match` for levels already split and checked; ``()`` is the root of the topic tree,
        which only patterns made of ``#`` levels match (authority checks use it for ``#``).
        Without ``root_wildcards`` (a system topic), patterns starting with ``#`` or ``+`` do not
        match; authority checks keep them."""
        # ``plain`` holds the nodes reached by consuming exactly the levels seen so far; ``multi``
        # holds the nodes under a '#' edge, which may absorb any further levels and so stay active.
        # A node has one parent edge, so neither list can hold a node twice except through chained
        # '#' edges, which the membership test in _enter_multi_levels rules out.
        plain: list[_Node] = [self._root]
        multi: list[_Node] = []
        if root_wildcards:
            _enter_multi_levels(plain, multi)
        for depth, level in enumerate(levels):
            advanced: list[_Node] = []
            for nodes in (plain, multi):
                for node in nodes:
                    children = node.children
                    if children is not None:
                        child = children.get(level)
                        if child is not None:
                            advanced.append(child)
                        child = children.get(SINGLE_LEVEL) if depth or root_wildcards else None
                        if child is not None:
                            advanced.append(child)
            plain = advanced
            if not plain and not multi:
                return []
            _enter_multi_levels(plain, multi)
        found: list[V] = []
        for nodes in (plain, multi):
            for node in nodes:
                value = node.value
                if type(value) is _Many:
                    found.extend(value)
                elif value is not _EMPTY:
                    found.append(value)  # type: ignore[arg-type]
        return found

    def values_for(self, pattern: str) -> Collection[V]:
        """The values stored under exactly ``pattern`` (its wildcards taken literally)."""
        path = _path(self._root, split_levels(pattern))
        if path is None:
            return ()
        value = path[-1].value
        if type(value) is _Many:
            return tuple(value)
        return () if value is _EMPTY else (value,)  # type: ignore[return-value]

    def __len__(self) -> int:
        return self._size

    def patterns(self) -> Iterator[str]:
        """Every stored pattern, once, depth-first in insertion order."""
        return (pattern for pattern, _ in self._entries())

    def __getstate__(self) -> list[tuple[str, tuple[V, ...]]]:
        """Pickle as (pattern, values) pairs, not nodes: Spark broadcasts the tree, and a flat
        list neither depends on the node layout nor recurses as deep as the deepest topic."""
        return list(self._entries())

    def __setstate__(self, state: list[tuple[str, tuple[V, ...]]]) -> None:
        self._root = _Node()
        self._size = 0
        for pattern, values in state:
            for value in values:
                self.add(pattern, value)

    def _entries(self) -> Iterator[tuple[str, tuple[V, ...]]]:
        stack: list[tuple[tuple[str, ...], _Node]] = [((), self._root)]
        while stack:
            levels, node = stack.pop()
            value = node.value
            if type(value) is _Many:
                yield SEPARATOR.join(levels), tuple(value)
            elif value is not _EMPTY:
                yield SEPARATOR.join(levels), (value,)  # type: ignore[misc]
            if node.children:
                stack.extend(((*levels, level), child) for level, child in reversed(node.children.items()))

    def _node_count(self) -> int:
        return _count_nodes(self._root)


def _enter_multi_levels(plain: list[_Node], multi: list[_Node]) -> None:
    """Let every '#' child of an active node match zero levels, following chains like ``#/#``."""
    for nodes in (plain, multi):
        for node in nodes:  # iterating ``multi`` while appending to it follows '#' chains
            children = node.children
            if children is not None:
                child = children.get(MULTI_LEVEL)
                if child is not None and child not in multi:
                    multi.append(child)


class TopicIndex(Generic[V]):
    """Concrete topics -> one value each (the retained publications of one subscription point).

    A wildcard query walks the same level trie: literal levels are followed directly and the walk
    branches only at ``+`` and ``#``, so ``Sport/Soccer/#`` never looks at ``Weather``.
    """

    __slots__ = ("_root", "_size")

    def __init__(self) -> None:
        self._root = _TopicNode()
        self._size = 0

    def set(self, topic: str, value: V) -> V | None:
        """Keep ``value`` for ``topic``; returns the value it replaces, as a retained publication
        replaces the previous one for the same topic."""
        node = _descend(self._root, _concrete_levels(topic))
        previous = node.value
        node.value = value
        node.topic = topic
        if previous is _EMPTY:
            self._size += 1
            return None
        return previous  # type: ignore[return-value]

    def get(self, topic: str) -> V | None:
        path = _path(self._root, _concrete_levels(topic))
        if path is None or path[-1].value is _EMPTY:
            return None
        return path[-1].value  # type: ignore[return-value]

    def delete(self, topic: str) -> V | None:
        """Forget ``topic`` and prune the nodes it leaves empty; returns what was stored."""
        levels = _concrete_levels(topic)
        path = _path(self._root, levels)
        if path is None or path[-1].value is _EMPTY:
            return None
        node = path[-1]
        previous = node.value
        node.value = _EMPTY
        node.topic = ""
        _prune(path, levels)
        self._size -= 1
        return previous  # type: ignore[return-value]

    def match(self, pattern: str) -> list[tuple[str, V]]:
        """Every stored (topic, value) that ``pattern`` matches, sorted by topic for determinism."""
        levels = split_levels(pattern)
        end = len(levels)
        found: list[_TopicNode] = []
        # (node, pattern position) states; chained '#' levels can reach one state twice.
        seen: set[tuple[int, int]] = set()
        stack: list[tuple[_TopicNode, int]] = [(self._root, 0)]
        while stack:
            node, position = stack.pop()
            state = (id(node), position)
            if state in seen:
                continue
            seen.add(state)
            if position == end:
                if node.value is not _EMPTY:
                    found.append(node)
                continue
            wanted = levels[position]
            children = node.children or {}
            if node is self._root and wanted in (MULTI_LEVEL, SINGLE_LEVEL):
                children = {k: v for k, v in children.items() if not k.startswith(SYSTEM_PREFIX)}
            if wanted == MULTI_LEVEL:
                stack.append((node, position + 1))
                stack.extend((child, position) for child in children.values())
            elif wanted == SINGLE_LEVEL:
                stack.extend((child, position + 1) for child in children.values())
            else:
                child = children.get(wanted)
                if child is not None:
                    stack.append((child, position + 1))
        pairs = [(node.topic, node.value) for node in found]
        pairs.sort(key=itemgetter(0))
        return pairs  # type: ignore[return-value]

    def __len__(self) -> int:
        return self._size

    def items(self) -> Iterator[tuple[str, V]]:
        """Every stored (topic, value), depth-first in insertion order."""
        stack: list[_TopicNode] = [self._root]
        while stack:
            node = stack.pop()
            if node.value is not _EMPTY:
                yield node.topic, node.value  # type: ignore[misc]
            if node.children:
                stack.extend(reversed(node.children.values()))

    def __getstate__(self) -> list[tuple[str, V]]:
        """Pickle as (topic, value) pairs, for the same reasons as :class:`TopicTree`."""
        return list(self.items())

    def __setstate__(self, state: list[tuple[str, V]]) -> None:
        self._root = _TopicNode()
        self._size = 0
        for topic, value in state:
            self.set(topic, value)

    def _node_count(self) -> int:
        return _count_nodes(self._root)
