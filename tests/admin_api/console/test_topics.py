"""One level of the topic tree from the level's counts and retained publications (pure: no
database)."""

from __future__ import annotations

from admin_api.console.topics import Retained, tree_level
from broker.store.topic_levels import LevelName, TopicLevel
from tests.broker.store.records import NOW, published


def test_a_level_names_its_topics_and_their_retained_publications() -> None:
    level = TopicLevel(
        [
            LevelName("Soccer", here=2, below=1),
            LevelName("#", here=1),
            LevelName("Golf", retained_below=True),
            LevelName("Tennis", counted=False),
        ],
        complete=False,
    )
    retained = [(7, published("Sport/Golf", b"hole in one")), (8, published("Sport/Chess", b"\x00\x01"))]
    nodes = {n.level: n for n in tree_level("Sport", level, retained)}
    assert list(nodes) == ["#", "Chess", "Golf", "Soccer", "Tennis"]
    assert [(n.topic, n.here, n.below, n.children, n.counted) for n in nodes.values()] == [
        ("Sport/#", 1, 0, False, True),
        ("Sport/Chess", 0, 0, False, True),  # only retained: beyond the counted subscriptions' limit
        ("Sport/Golf", 0, 0, True, True),
        ("Sport/Soccer", 2, 1, True, True),
        ("Sport/Tennis", 0, 0, True, False),  # not counted: it may have anything below it
    ]
    assert nodes["Golf"].retained == [Retained(7, "", "hole in one", NOW)]
    assert nodes["Chess"].retained == [Retained(8, "", "(2 bytes, binary)", NOW)]
    top = tree_level("", TopicLevel([LevelName("Sport", below=3)], True), [(9, published("News"))])
    assert [(n.topic, n.level, [r.id for r in n.retained]) for n in top] == [
        ("News", "News", [9]),
        ("Sport", "Sport", []),
    ]
