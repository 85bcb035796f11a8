"""Tests for broker.service.held: which set-aside messages a router passes over, and until when."""

from __future__ import annotations

from broker.service.held import HOLD_SECONDS, HeldMessages


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_held_message_is_passed_over_until_its_time_is_up() -> None:
    clock = Clock()
    held = HeldMessages(clock)
    held.hold("STREAM", 7)
    clock.now += HOLD_SECONDS / 2
    held.hold("STREAM", 9)
    held.hold("OTHER", 7)

    assert held.ids("STREAM") == {7, 9}
    clock.now += HOLD_SECONDS / 2
    assert held.ids("STREAM") == {9}
    assert held.ids("OTHER") == {7}
    assert held.ids("NONE") == frozenset()


def test_releasing_them_all_tries_every_one_again() -> None:
    held = HeldMessages(Clock())
    held.hold("STREAM", 7)
    held.hold("OTHER", 8)

    assert held.release_all() == 2
    assert held.ids("STREAM") == held.ids("OTHER") == frozenset()
    assert held.release_all() == 0
