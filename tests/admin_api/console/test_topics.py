"""One level of the topic tree from the topics below it (pure: no database)."""

from __future__ import annotations

from admin_api.console.topics import tree_level


def test_a_level_counts_subscriptions_here_and_below() -> None:
    topics = ["Sport/Soccer", "Sport/#", "Sport", "News/Today/Headlines", "Sport/Soccer/Goals"]
    root = {n.level: (n.topic, n.here, n.below, n.children) for n in tree_level("", topics, [])}
    assert root == {"News": ("News", 0, 1, True), "Sport": ("Sport", 1, 3, True)}
    sport = {n.level: (n.topic, n.here, n.below, n.children) for n in tree_level("Sport", topics, [])}
    assert sport == {"#": ("Sport/#", 1, 0, False), "Soccer": ("Sport/Soccer", 1, 1, True)}
    assert tree_level("Weather", topics, []) == []
    assert [n.level for n in tree_level("Spo", topics, [])] == []  # a prefix is not a parent level
