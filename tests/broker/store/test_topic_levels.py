"""broker.store.topic_levels: one level of the topic tree, counted in SQL (both dialects)."""

from __future__ import annotations

from sqlalchemy import Engine

from broker.core.effects import AddSubscription, SetRetained
from broker.store import topic_levels
from broker.store.schema import TOPIC_HEAD
from broker.store.topic_levels import LevelName
from tests.broker.store.records import Process, published, sub


def subscribe(a: Process, *topics: str) -> None:
    a.write(*(AddSubscription(sub(t, f"Q{i}", seq=i)) for i, t in enumerate(topics)))


def level(
    engine: Engine, under: str = "", limit: int = 100
) -> tuple[list[tuple[str, int, int, bool, bool]], bool]:
    with engine.connect() as conn:
        found = topic_levels.topic_level(conn, under, limit=limit)
    return [(n.name, n.here, n.below, n.retained_below, n.counted) for n in found.names], found.complete


def test_a_level_counts_the_subscriptions_on_and_below_each_name(engine: Engine, a: Process) -> None:
    subscribe(
        a, "Sport/Soccer", "Sport/#", "Sport", "News/Today/Headlines", "Sport/Soccer/Goals", "Sport/Soccer"
    )
    a.write(SetRetained(published("Weather/Today/Rain")), SetRetained(published("Sport/Golf")))
    assert level(engine) == (
        [
            ("News", 0, 1, False, True),
            ("Sport", 1, 4, True, True),  # Sport/Golf is retained
            ("Weather", 0, 0, True, True),  # only a retained publication below it
        ],
        True,
    )
    assert level(engine, "Sport") == (
        [("#", 1, 0, False, True), ("Golf", 0, 0, False, True), ("Soccer", 2, 1, False, True)],
        True,
    )
    assert level(engine, "Sport/Soccer/Goals") == ([], True)
    assert level(engine, "Spo") == ([], True)  # a prefix of a level is not a topic above it


def test_names_past_the_counted_subscriptions_are_found_and_left_uncounted(
    engine: Engine, a: Process
) -> None:
    """``Site1-x`` sorts between ``Site1`` and ``Site1/...``: a name counts as read only when
    every topic of it sorts before the last one read."""
    subscribe(
        a,
        "R/Site1",
        "R/Site1-x/a",
        "R/Site1-x/b",
        "R/Site1/a",
        "R/Site1/b",
        "R/Site2/a",
        "R/Site3",
        "R/Site3/c",
    )
    names, complete = level(engine, "R", limit=3)  # reads R/Site1, R/Site1-x/a, R/Site1-x/b
    assert not complete
    assert names == [
        ("Site1", 1, 0, False, False),  # its topics R/Site1/... come after those read
        ("Site1-x", 0, 2, False, False),  # the last read: there may be more
        ("Site2", 0, 0, False, False),
        ("Site3", 0, 0, False, False),
    ]
    assert [n.name for n in found_after(engine, "R", "R/Site1")] == ["Site1-x", "Site1", "Site2", "Site3"]
    names, _ = level(engine, "R", limit=6)  # up to R/Site2/a: Site1 and Site1-x are whole
    assert names[:2] == [("Site1", 1, 2, False, True), ("Site1-x", 0, 2, False, True)]
    assert level(engine, "R", limit=9)[1] is True  # 8 read: fewer than the limit


def found_after(engine: Engine, under: str, after: str) -> list[LevelName]:
    with engine.connect() as conn:
        return [LevelName(name) for name in topic_levels.names_after(conn, under, after)]


def test_the_top_level_and_names_the_topic_head_cuts_short(engine: Engine, a: Process) -> None:
    """A level that runs past the indexed head is counted from the whole topic."""
    long_level = "L" * (TOPIC_HEAD + 20)
    subscribe(a, f"A/{long_level}", f"A/{long_level}/deeper", f"A/{long_level}X", "B")
    assert level(engine) == ([("A", 0, 3, False, True), ("B", 1, 0, False, True)], True)
    assert level(engine, "A") == (
        [(long_level, 1, 1, False, True), (long_level + "X", 1, 0, False, True)],
        True,
    )
    deep = "D/" + "x" * TOPIC_HEAD  # a node below which the heads say nothing
    subscribe(a, f"{deep}/leaf", f"{deep}/leaf/more")
    assert level(engine, deep) == ([("leaf", 1, 1, False, True)], True)


def test_retained_at_gives_the_publications_of_the_level_only(engine: Engine, a: Process) -> None:
    for topic in ("Sport/Soccer", "Sport/Soccer/Goals", "Sport", "Sport_X/Y", "Sport/Golf"):
        a.write(SetRetained(published(topic, topic.encode())))
    a.write(SetRetained(published("Sport/Golf", b"pounds", sub_point="Pounds")))
    with engine.connect() as conn:
        found = [(p.topic, p.sub_point, p.rfh2.payload) for _, p in topic_levels.retained_at(conn, "Sport")]
        top = [p.topic for _, p in topic_levels.retained_at(conn, "")]
    assert found == [
        ("Sport/Golf", "", b"Sport/Golf"),
        ("Sport/Golf", "Pounds", b"pounds"),
        ("Sport/Soccer", "", b"Sport/Soccer"),
    ]
    assert top == ["Sport"]
