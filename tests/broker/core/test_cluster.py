"""Which members of an MQTT cluster are alive: judged by their beats changing, on the
observer's clock only."""

from __future__ import annotations

import pytest

from broker.core.cluster import (
    ALIVE,
    DEAD,
    SILENT,
    Member,
    Node,
    Sighting,
    check_node_name,
    nodes,
    overdue,
    predecessors,
    sighted,
    unreleased,
    watching,
)


def member(owner: str, beat: int = 1, *, node: str = "a:1883", dead_at: int = 0, **fields: object) -> Member:
    values: dict[str, object] = {
        "address": "0.0.0.0:1883",
        "started_at": 100,
        "heartbeat_at": 1_000,
        "clients": 0,
        "released": False,
    }
    values.update(fields)
    return Member(owner, node, beat=beat, dead_at=dead_at, **values)  # type: ignore[arg-type]


def test_a_beat_keeps_the_time_it_was_first_seen_and_a_new_one_starts_again() -> None:
    first = sighted([member("x", 1), member("y", 7)], {}, 10.0)
    assert first == {"x": Sighting(1, 10.0), "y": Sighting(7, 10.0)}
    second = sighted([member("x", 1), member("y", 8), member("z", 1, dead_at=5)], first, 12.0)
    assert second == {"x": Sighting(1, 10.0), "y": Sighting(8, 12.0)}  # the dead are forgotten


def test_a_member_is_overdue_after_timeout_seconds_of_one_beat_never_by_its_clock() -> None:
    # y's heartbeat_at is an hour old by anyone's clock: only the unchanged beat counts.
    members = [member("me"), member("x", 3), member("y", 9, heartbeat_at=-3_600_000)]
    seen = sighted(members, {"x": Sighting(3, 0.0), "me": Sighting(1, 0.0)}, 4.0)
    assert overdue(members, seen, 4.9, 5.0, me="me") == []
    assert [m.owner for m in overdue(members, seen, 5.0, 5.0, me="me")] == ["x"]  # never "me"
    assert [m.owner for m in overdue(members, seen, 9.0, 5.0, me="me")] == ["x", "y"]


def test_an_observer_that_stopped_watching_starts_its_sightings_again() -> None:
    """Its own pause (stopped, the database away) is not another member's silence."""
    assert watching(10.0, 11.9, 2.0)
    assert not watching(10.0, 12.1, 2.0)
    assert not watching(None, 0.0, 2.0)  # never looked yet


def test_a_process_of_this_node_that_is_gone_is_overdue_at_once() -> None:
    members = [member("me"), member("gone"), member("dead", dead_at=4)]
    seen = sighted(members, {}, 0.0)
    found = overdue(members, seen, 0.0, 5.0, me="me", gone={"gone", "dead"})
    assert [m.owner for m in found] == ["gone"]  # one already dead is not declared again


def test_a_node_starting_takes_its_own_earlier_run_for_dead_and_no_other() -> None:
    members = [
        member("old", node="a"),
        member("other", node="b"),
        member("me", node="a"),
        member("x", node="a", dead_at=1),
    ]
    assert [m.owner for m in predecessors(members, "a", "me")] == ["old"]


def test_the_dead_not_yet_released() -> None:
    members = [member("x", dead_at=5), member("y", dead_at=5, released=True), member("z")]
    assert [m.owner for m in unreleased(members)] == ["x"]


def test_the_cluster_view_by_node() -> None:
    members = [
        member("a1", node="a", clients=3, heartbeat_at=9_000, started_at=50),
        member("a2", node="a", clients=2, heartbeat_at=8_000, started_at=70),
        member("a0", node="a", dead_at=1, heartbeat_at=500, started_at=10),  # an earlier run
        member("b1", node="b", clients=9, heartbeat_at=2_000),
        member("c1", node="c", dead_at=3_000, heartbeat_at=2_500, started_at=40, address="c:1"),
    ]
    assert nodes(members, 10_000, 5_000) == [
        Node("a", ALIVE, 5, 2, 9_000, 50, "0.0.0.0:1883"),
        Node("b", SILENT, 9, 1, 2_000, 100, "0.0.0.0:1883"),
        Node("c", DEAD, 0, 0, 2_500, 40, "c:1"),
    ]


@pytest.mark.parametrize("name", ["", "a/b", "a+", "#", "x" * 97, "tab\there"])
def test_a_node_name_is_a_topic_level(name: str) -> None:
    with pytest.raises(ValueError, match="node name"):
        check_node_name(name)


def test_host_and_port_name_a_node() -> None:
    assert check_node_name("broker-1.example.com:1883") == "broker-1.example.com:1883"
