from __future__ import annotations

import pickle
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.core.topics import (
    TopicError,
    TopicIndex,
    TopicTree,
    check_publish_topic,
    check_subscribe_topic,
    is_wildcard,
    levels_match,
    literal_prefix,
    literal_prefix_levels,
    matches,
    split_levels,
)
from queues.errors import MQError
from queues.reasons import Reason

# ---------------------------------------------------------------------------------------------
# An independent oracle: the textbook recursive definition, exponential but obviously right.


def naive(pattern: tuple[str, ...], topic: tuple[str, ...]) -> bool:
    if not pattern:
        return not topic
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return naive(rest, topic) or (bool(topic) and naive(pattern, topic[1:]))
    if not topic:
        return False
    return (head == "+" or head == topic[0]) and naive(rest, topic[1:])


PATTERN_LEVELS = st.sampled_from(["", "a", "b", "+", "#", "a+", "x#"])
TOPIC_LEVELS = st.sampled_from(["", "a", "b", "a+", "x#"])
patterns = st.lists(PATTERN_LEVELS, min_size=1, max_size=5).map("/".join).filter(bool)
topics = st.lists(TOPIC_LEVELS, min_size=1, max_size=5).map("/".join).filter(bool)


def distinct_prefixes(level_tuples: list[tuple[str, ...]]) -> int:
    """Nodes a pruned trie must have for these keys: every distinct prefix, plus the root."""
    return 1 + len({key[:depth] for key in level_tuples for depth in range(1, len(key) + 1)})


# ---------------------------------------------------------------------------------------------
# Topic rules


@pytest.mark.parametrize(
    ("topic", "levels"),
    [
        ("a/b", ("a", "b")),
        ("a//b", ("a", "", "b")),
        ("/a", ("", "a")),
        ("a/", ("a", "")),
        ("/", ("", "")),
        ("USA#", ("USA#",)),
        (
            "Sport/Soccer/LatestScore/Chelsea 4 Sotton 1",
            ("Sport", "Soccer", "LatestScore", "Chelsea 4 Sotton 1"),
        ),
    ],
)
def test_split_levels(topic: str, levels: tuple[str, ...]) -> None:
    assert split_levels(topic) == levels


def test_empty_topic_is_a_topic_error_everywhere() -> None:
    for check in (split_levels, check_publish_topic, check_subscribe_topic, literal_prefix):
        with pytest.raises(TopicError) as caught:
            check("")
        assert caught.value.reason == Reason.MQRCCF_TOPIC_ERROR == 3072
        assert caught.value.reason_name == "MQRCCF_TOPIC_ERROR"
        assert caught.value.topic == ""
        assert isinstance(caught.value, MQError)
    with pytest.raises(TopicError):
        matches("", "a")
    with pytest.raises(TopicError):
        matches("#", "")
    with pytest.raises(TopicError):
        TopicTree[int]().add("", 1)
    with pytest.raises(TopicError):
        TopicTree().match("")
    with pytest.raises(TopicError):
        TopicIndex[int]().set("", 1)
    with pytest.raises(TopicError):
        TopicIndex().match("")


@pytest.mark.parametrize(
    ("topic", "expected"),
    [
        ("USA/#", True),
        ("#", True),
        ("+", True),
        ("a/+/b", True),
        ("#/Results", True),
        ("USA#", False),
        ("USA+", False),
        ("a+b/x#", False),
        ("a/b", False),
        ("", False),
    ],
)
def test_is_wildcard(topic: str, expected: bool) -> None:
    assert is_wildcard(topic) is expected


@pytest.mark.parametrize("topic", ["USA/#", "#", "+/Alabama", "a/+/b", "#/Results"])
def test_publish_topic_with_wildcard_level_is_refused(topic: str) -> None:
    with pytest.raises(TopicError) as caught:
        check_publish_topic(topic)
    assert caught.value.reason == 3072
    assert "wildcard" in caught.value.detail


@pytest.mark.parametrize("topic", ["USA", "USA#", "a+b", "/", "a//b", "x#/+y"])
def test_literal_topics_are_valid_for_publish_and_subscribe(topic: str) -> None:
    check_publish_topic(topic)
    check_subscribe_topic(topic)


@pytest.mark.parametrize("pattern", ["#", "+", "USA/#", "+/Alabama/#", "a/#/b"])
def test_wildcard_patterns_are_valid_subscriptions(pattern: str) -> None:
    check_subscribe_topic(pattern)


SECTION_4_1 = [
    # '#' matches zero or more levels
    ("USA/Alaska/#", "USA/Alaska", True),
    ("USA/Alaska/#", "USA/Alaska/Juneau", True),
    ("USA/Alaska/#", "USA/Alabama", False),
    ("USA/#", "USA", True),
    ("USA/#", "USA/Alaska", True),
    ("USA/#", "USA/Alaska/Juneau", True),
    ("USA/#", "Canada", False),
    ("#", "USA", True),
    ("#", "USA/Alaska/Juneau", True),
    ("#", "/", True),
    # '+' matches exactly one level
    ("USA/+", "USA/Alabama", True),
    ("USA/+", "USA", False),
    ("USA/+", "USA/Alabama/Auburn", False),
    ("+", "USA", True),
    ("+", "USA/Alabama", False),
    # several wildcards
    ("+/Alabama/#", "USA/Alabama", True),
    ("+/Alabama/#", "USA/Alabama/Auburn", True),
    ("+/Alabama/#", "Alabama", False),
    ("+/Alabama/#", "USA/Alaska/Juneau", False),
    # '#' anywhere as a whole level: zero or more levels there
    ("#/Results", "Results", True),
    ("#/Results", "Sport/Soccer/Results", True),
    ("#/Results", "Sport/Results/Today", False),
    ("a/#/b", "a/b", True),
    ("a/#/b", "a/x/b", True),
    ("a/#/b", "a/x/y/b", True),
    ("a/#/b", "a/x/y/c", False),
    ("#/#", "a", True),
    ("#/+/#", "a/b/c", True),
    # wildcards inside a level are literal
    ("USA#", "USA#", True),
    ("USA#", "USA", False),
    ("USA#", "USA/Alaska", False),
    ("a+b", "a+b", True),
    ("a+b", "axb", False),
    ("USA+", "USA/Alaska", False),
    # empty levels are distinct
    ("a//b", "a//b", True),
    ("a//b", "a/b", False),
    ("a/b", "a//b", False),
    ("a/+/b", "a//b", True),
    ("/#", "/a", True),
    ("/#", "a", False),
    ("a/", "a", False),
    ("+", "/", False),
    ("+/+", "/", True),
    # case-sensitive
    ("usa/#", "USA/Alaska", False),
    ("USA/alaska", "USA/Alaska", False),
]


@pytest.mark.parametrize(("pattern", "topic", "expected"), SECTION_4_1)
def test_matches_section_4_1(pattern: str, topic: str, expected: bool) -> None:
    assert matches(pattern, topic) is expected
    assert naive(split_levels(pattern), split_levels(topic)) is expected


@pytest.mark.parametrize(("pattern", "topic", "expected"), SECTION_4_1)
def test_topic_tree_agrees_with_section_4_1(pattern: str, topic: str, expected: bool) -> None:
    tree: TopicTree[str] = TopicTree()
    tree.add(pattern, "subscriber")
    assert tree.match(topic) == (["subscriber"] if expected else [])


@pytest.mark.parametrize(("pattern", "topic", "expected"), SECTION_4_1)
def test_topic_index_agrees_with_section_4_1(pattern: str, topic: str, expected: bool) -> None:
    index: TopicIndex[str] = TopicIndex()
    index.set(topic, "retained")
    assert index.match(pattern) == ([(topic, "retained")] if expected else [])


@pytest.mark.parametrize("topic", ["USA/#", "a/+"])
def test_matches_refuses_a_wildcard_topic(topic: str) -> None:
    with pytest.raises(TopicError):
        matches("#", topic)


def test_levels_match_at_the_root() -> None:
    assert levels_match(("#",), ()) is True
    assert levels_match(("#", "#"), ()) is True
    assert levels_match(("+",), ()) is False
    assert levels_match(("a", "#"), ()) is False


def test_levels_match_with_long_runs_of_multi_level_wildcards_is_fast() -> None:
    pattern = ("#",) * 40 + ("z",)
    assert levels_match(pattern, ("a",) * 200) is False
    assert levels_match(pattern, ("a",) * 200 + ("z",)) is True


@pytest.mark.parametrize(
    ("pattern", "prefix"),
    [
        ("Sport/+/x", "Sport"),
        ("#", ""),
        ("+", ""),
        ("a/b", "a/b"),
        ("a/#/b", "a"),
        ("a+/b#/+", "a+/b#"),
        ("Sport/Soccer/#", "Sport/Soccer"),
    ],
)
def test_literal_prefix(pattern: str, prefix: str) -> None:
    assert literal_prefix(pattern) == prefix


def test_literal_prefix_levels_tell_an_empty_level_from_the_root() -> None:
    assert literal_prefix_levels("/+") == ("",)
    assert literal_prefix_levels("#") == ()
    assert literal_prefix_levels("a//+") == ("a", "")


@settings(max_examples=300, deadline=None)
@given(patterns, topics)
def test_matches_agrees_with_the_recursive_definition(pattern: str, topic: str) -> None:
    assert matches(pattern, topic) is naive(split_levels(pattern), split_levels(topic))


# ---------------------------------------------------------------------------------------------
# TopicTree


def test_tree_match_returns_each_matching_pair() -> None:
    tree: TopicTree[str] = TopicTree()
    tree.add("USA/Alaska/#", "alaska-all")
    tree.add("USA/+", "states")
    tree.add("+/Alabama/#", "alabama-anywhere")
    tree.add("USA/Alabama", "alabama")
    tree.add("USA#", "literal-hash")
    assert sorted(tree.match("USA/Alabama")) == ["alabama", "alabama-anywhere", "states"]
    assert tree.match("USA/Alaska") == ["states", "alaska-all"]
    assert tree.match("USA/Alaska/Juneau") == ["alaska-all"]
    assert tree.match("USA#") == ["literal-hash"]
    assert tree.match("USA") == []
    assert tree.match("Canada/Alabama/Mobile") == ["alabama-anywhere"]


def test_tree_keeps_a_pair_once_and_a_value_under_two_patterns_twice() -> None:
    tree: TopicTree[str] = TopicTree()
    tree.add("a/#", "s1")
    tree.add("a/#", "s1")
    tree.add("a/+", "s1")
    assert len(tree) == 2
    assert tree.match("a/b") == ["s1", "s1"]
    assert tree.values_for("a/#") == ("s1",)


def test_tree_values_under_one_pattern_keep_insertion_order() -> None:
    tree: TopicTree[int] = TopicTree()
    for value in (5, 3, 9, 1):
        tree.add("a/b", value)
    assert tree.match("a/b") == [5, 3, 9, 1]
    assert tree.values_for("a/b") == (5, 3, 9, 1)
    assert tree.remove("a/b", 3) is True
    assert tree.remove("a/b", 9) is True
    assert tree.remove("a/b", 5) is True
    assert tree.values_for("a/b") == (1,)
    assert tree.match("a/b") == [1]
    assert len(tree) == 1


def test_tree_accepts_none_as_a_value() -> None:
    tree: TopicTree[None] = TopicTree()
    tree.add("a", None)
    assert tree.match("a") == [None]
    assert tree.values_for("a") == (None,)
    assert tree.remove("a", None) is True
    assert tree.match("a") == []


def test_tree_remove_reports_absence_and_prunes() -> None:
    tree: TopicTree[str] = TopicTree()
    tree.add("a/b/c", "x")
    tree.add("a/#", "y")
    assert tree._node_count() == 5  # root, a, a/b, a/b/c, a/#
    assert tree.remove("a/b/c", "other") is False
    assert tree.remove("a/b", "x") is False
    assert tree.remove("q/r", "x") is False
    assert tree.remove("a/b/c", "x") is True
    assert tree.remove("a/b/c", "x") is False
    assert tree._node_count() == 3  # root, a, a/#
    assert tree.remove("a/#", "y") is True
    assert tree._node_count() == 1
    assert len(tree) == 0
    assert tree.match("a/b/c") == []


def test_tree_values_for_takes_wildcards_literally() -> None:
    tree: TopicTree[str] = TopicTree()
    tree.add("USA/#", "all")
    tree.add("USA/Alaska", "alaska")
    assert tree.values_for("USA/#") == ("all",)
    assert tree.values_for("USA/Alaska") == ("alaska",)
    assert tree.values_for("USA/+") == ()
    assert tree.values_for("USA") == ()
    assert tree.values_for("Canada") == ()


def test_tree_patterns_lists_every_stored_pattern_once() -> None:
    tree: TopicTree[int] = TopicTree()
    for number, pattern in enumerate(["a/b", "a/#", "a", "+/b", "a/b", "//"]):
        tree.add(pattern, number)
    assert sorted(tree.patterns()) == sorted(["a/b", "a/#", "a", "+/b", "//"])


def test_tree_match_refuses_a_wildcard_topic() -> None:
    tree: TopicTree[int] = TopicTree()
    tree.add("#", 1)
    with pytest.raises(TopicError):
        tree.match("a/#")
    with pytest.raises(TopicError):
        tree.match("+")
    assert tree.match("a+/x#") == [1]


def test_tree_match_levels_at_the_root() -> None:
    tree: TopicTree[str] = TopicTree()
    tree.add("#", "everything")
    tree.add("#/#", "twice")
    tree.add("+", "one level")
    tree.add("a", "a")
    assert tree.match_levels(()) == ["everything", "twice"]


def test_tree_match_reaches_one_pattern_once_through_chained_multi_levels() -> None:
    tree: TopicTree[str] = TopicTree()
    tree.add("#/+/#", "p")
    tree.add("#/#/#", "q")
    assert Counter(tree.match("a/b/c/d")) == Counter({"p": 1, "q": 1})


class Untouchable(dict):  # type: ignore[type-arg]
    """Fails the test if a walk so much as looks at this branch."""

    def _fail(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("walked into an unrelated branch")

    get = values = items = __getitem__ = __iter__ = __contains__ = __len__ = __bool__ = _fail  # type: ignore[assignment]


def test_tree_match_never_visits_unrelated_branches() -> None:
    tree: TopicTree[int] = TopicTree()
    for number in range(50):
        tree.add(f"Weather/City{number}/+", number)
    tree.add("Sport/Soccer/#", -1)
    tree.add("+/Soccer/Results", -2)
    weather = tree._root.children["Weather"]  # type: ignore[index]
    weather.children = Untouchable(weather.children or {})
    assert sorted(tree.match("Sport/Soccer/Results")) == [-2, -1]
    with pytest.raises(AssertionError, match="unrelated branch"):
        tree.match("Weather/City1/Rain")


def test_index_wildcard_query_never_visits_unrelated_branches() -> None:
    index: TopicIndex[int] = TopicIndex()
    for number in range(50):
        index.set(f"Weather/City{number}/Temperature", number)
    index.set("Sport/Soccer/Results", 1)
    index.set("Sport/Tennis/Results", 2)
    weather = index._root.children["Weather"]  # type: ignore[index]
    weather.children = Untouchable(weather.children or {})
    assert index.match("Sport/+/Results") == [
        ("Sport/Soccer/Results", 1),
        ("Sport/Tennis/Results", 2),
    ]
    assert index.match("Sport/#") == [("Sport/Soccer/Results", 1), ("Sport/Tennis/Results", 2)]
    with pytest.raises(AssertionError, match="unrelated branch"):
        index.match("+/City1/Temperature")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(patterns, st.integers(0, 3)), max_size=25), st.lists(topics, max_size=10))
def test_tree_match_agrees_with_brute_force(pairs: list[tuple[str, int]], sample: list[str]) -> None:
    tree: TopicTree[int] = TopicTree()
    for pattern, value in pairs:
        tree.add(pattern, value)
    stored = set(pairs)
    assert len(tree) == len(stored)
    for topic in sample:
        expected = Counter(value for pattern, value in stored if matches(pattern, topic))
        assert Counter(tree.match(topic)) == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "remove"]), patterns, st.integers(0, 2)), max_size=40))
def test_tree_add_remove_sequences_keep_len_and_leave_no_empty_nodes(
    operations: list[tuple[str, str, int]],
) -> None:
    tree: TopicTree[int] = TopicTree()
    model: set[tuple[str, int]] = set()
    for operation, pattern, value in operations:
        if operation == "add":
            tree.add(pattern, value)
            model.add((pattern, value))
        else:
            assert tree.remove(pattern, value) is ((pattern, value) in model)
            model.discard((pattern, value))
        assert len(tree) == len(model)
    assert tree._node_count() == distinct_prefixes([split_levels(p) for p, _ in model])
    assert sorted(tree.patterns()) == sorted({pattern for pattern, _ in model})
    for pattern in {pattern for _, pattern, _ in operations}:
        assert set(tree.values_for(pattern)) == {v for p, v in model if p == pattern}


# ---------------------------------------------------------------------------------------------
# TopicIndex


def test_index_set_get_delete() -> None:
    index: TopicIndex[str] = TopicIndex()
    assert index.set("Sport/Soccer", "first") is None
    assert index.set("Sport/Soccer", "second") == "first"
    assert index.get("Sport/Soccer") == "second"
    assert index.get("Sport") is None
    assert index.get("Sport/Soccer/Results") is None
    assert len(index) == 1
    assert index.delete("Sport") is None
    assert index.delete("Sport/Soccer") == "second"
    assert index.delete("Sport/Soccer") is None
    assert len(index) == 0
    assert index._node_count() == 1


def test_index_set_returns_the_value_it_replaces() -> None:
    index: TopicIndex[str] = TopicIndex()
    assert index.set("a/b", "one") is None
    assert index.set("a/b", "two") == "one"
    assert index.set("a", "parent") is None
    assert len(index) == 2
    assert list(index.items()) == [("a", "parent"), ("a/b", "two")]


def test_index_delete_keeps_nodes_that_still_hold_values() -> None:
    index: TopicIndex[int] = TopicIndex()
    index.set("a", 1)
    index.set("a/b/c", 2)
    assert index._node_count() == 4
    assert index.delete("a/b/c") == 2
    assert index._node_count() == 2  # root, a
    assert index.get("a") == 1


def test_index_refuses_wildcard_topics() -> None:
    index: TopicIndex[int] = TopicIndex()
    for operation in (index.get, index.delete, lambda topic: index.set(topic, 1)):
        with pytest.raises(TopicError):
            operation("Sport/#")
    assert len(index) == 0


def test_index_match_is_sorted_by_topic() -> None:
    index: TopicIndex[int] = TopicIndex()
    for number, topic in enumerate(["b/z", "a/y", "b", "a", "/", "a/y/z", "A/y"]):
        index.set(topic, number)
    assert index.match("#") == [
        ("/", 4),
        ("A/y", 6),
        ("a", 3),
        ("a/y", 1),
        ("a/y/z", 5),
        ("b", 2),
        ("b/z", 0),
    ]
    assert index.match("+/y") == [("A/y", 6), ("a/y", 1)]
    assert index.match("a/y") == [("a/y", 1)]
    assert index.match("a/#/z") == [("a/y/z", 5)]
    assert index.match("c/#") == []


def test_index_accepts_none_as_a_value() -> None:
    index: TopicIndex[None] = TopicIndex()
    assert index.set("a", None) is None
    assert len(index) == 1
    assert index.match("#") == [("a", None)]


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(topics, st.integers(), max_size=25), st.lists(patterns, max_size=10))
def test_index_match_agrees_with_brute_force(stored: dict[str, int], queries: list[str]) -> None:
    index: TopicIndex[int] = TopicIndex()
    for topic, value in stored.items():
        index.set(topic, value)
    assert len(index) == len(stored)
    assert dict(index.items()) == stored
    for pattern in queries:
        expected = sorted((t, v) for t, v in stored.items() if matches(pattern, t))
        assert index.match(pattern) == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["set", "delete"]), topics, st.integers(0, 2)), max_size=40))
def test_index_set_delete_sequences_keep_len_and_leave_no_empty_nodes(
    operations: list[tuple[str, str, int]],
) -> None:
    index: TopicIndex[int] = TopicIndex()
    model: dict[str, int] = {}
    for operation, topic, value in operations:
        if operation == "set":
            assert index.set(topic, value) == model.get(topic)
            model[topic] = value
        else:
            assert index.delete(topic) == model.pop(topic, None)
        assert len(index) == len(model)
    assert index._node_count() == distinct_prefixes([split_levels(t) for t in model])
    assert dict(index.items()) == model


# ---------------------------------------------------------------------------------------------
# Pickling (Spark broadcasts trees and indexes to its tasks)


def test_tree_survives_pickling() -> None:
    tree: TopicTree[int] = TopicTree()
    for number, pattern in enumerate(["a/#", "a/+", "a/b", "#/b", "a/#"]):
        tree.add(pattern, number)
    tree.add("a/b", 99)
    copy = pickle.loads(pickle.dumps(tree))
    assert len(copy) == len(tree) == 6
    assert copy.match("a/b") == tree.match("a/b") == [2, 99, 1, 3, 0, 4]
    assert copy._node_count() == tree._node_count()
    assert copy.remove("a/b", 99) is True
    assert copy.match("a/b") == [2, 1, 3, 0, 4]


def test_deep_tree_and_index_pickle_without_recursing_per_level() -> None:
    deep = "/".join(["x"] * 5_000)
    tree: TopicTree[str] = TopicTree()
    tree.add(deep, "deep")
    index: TopicIndex[str] = TopicIndex()
    index.set(deep, "deep")
    assert pickle.loads(pickle.dumps(tree)).match(deep) == ["deep"]
    assert pickle.loads(pickle.dumps(index)).get(deep) == "deep"


def test_index_survives_pickling() -> None:
    index: TopicIndex[str] = TopicIndex()
    index.set("Sport/Soccer", "s")
    index.set("Sport", "p")
    copy = pickle.loads(pickle.dumps(index))
    assert len(copy) == 2
    assert copy.match("#") == [("Sport", "p"), ("Sport/Soccer", "s")]
    assert copy.delete("Sport/Soccer") == "s"
    assert copy._node_count() == 2


@pytest.mark.parametrize(
    ("pattern", "topic", "expected"),
    [
        ("#", "$SYS/broker/load", False),
        ("+/broker/load", "$SYS/broker/load", False),
        ("+", "$SYS", False),
        ("$SYS/#", "$SYS/broker/load", True),
        ("$SYS/+/load", "$SYS/broker/load", True),
        ("$SYS/#", "$SYS", True),
        ("a/#", "a/$b", True),  # only the first level makes a system topic
        ("#", "a$/b", True),
        ("a/#", "a", True),  # "#" matches zero levels: a/# receives its parent a, as in MQTT
    ],
)
def test_system_topics_escape_leading_wildcards(pattern: str, topic: str, expected: bool) -> None:
    assert matches(pattern, topic) is expected
    tree: TopicTree[str] = TopicTree()
    tree.add(pattern, "sub")
    assert (tree.match(topic) == ["sub"]) is expected
    index: TopicIndex[str] = TopicIndex()
    index.set(topic, "kept")
    assert (index.match(pattern) == [(topic, "kept")]) is expected


def test_authority_rules_on_hash_still_cover_system_topics() -> None:
    tree: TopicTree[str] = TopicTree()
    tree.add("#", "deny everything")
    assert tree.match_levels(("$SYS", "x")) == ["deny everything"]


def test_topics_whose_first_level_starts_with_a_dollar_are_the_servers() -> None:
    from broker.core.topics import server_topic

    assert server_topic("$SYS/broker/version") and server_topic("$share/x")
    assert not server_topic("a/$SYS") and not server_topic("sys/$") and not server_topic("")
