"""The intake's account: a connection is paused at its own bound or at the total's, resumed
once under both, and those that waited for the total come back a few at a time, in order."""

from __future__ import annotations

from broker.service.mqtt.intake import Held, Intake


class Reader:
    def __init__(self, name: str) -> None:
        self.name = name
        self.paused = False

    def pause(self) -> None:
        assert not self.paused
        self.paused = True

    def resume(self) -> None:
        assert self.paused
        self.paused = False


def intake() -> Intake:
    return Intake(max_count=10, max_size=1000, max_total_count=25, max_total_size=10_000)


def test_a_connection_at_its_own_bound_is_paused_until_its_work_is_answered() -> None:
    account, reader, held = intake(), Reader("a"), Held()
    account.read(reader, held, 6, 60)
    account.check(reader, held)
    assert not reader.paused
    account.read(reader, held, 6, 60)  # one read overshoots; the next waits
    account.check(reader, held)
    assert reader.paused and (account.count, account.size) == (12, 120)
    account.answered(reader, held, 6, 60)
    assert not reader.paused and (held.count, account.count) == (6, 6)


def test_bytes_bound_too_and_a_packet_larger_than_the_bound_is_taken_whole() -> None:
    account, reader, held = intake(), Reader("a"), Held()
    account.read(reader, held, 1, 5000)
    account.check(reader, held)
    assert reader.paused
    account.answered(reader, held, 1, 5000)
    assert not reader.paused and account.size == 0


def test_over_the_total_every_connection_holding_work_waits_and_comes_back_in_order() -> None:
    account = intake()
    readers = [(Reader(str(n)), Held()) for n in range(5)]
    for reader, held in readers:
        account.read(reader, held, 6, 10)
        account.check(reader, held)
    # 24, then 30: the fifth crossed the total, and waits for it (not for its own bound)
    assert [r.paused for r, _ in readers] == [False, False, False, False, True]
    assert list(account.waiting) == [readers[4][0]]
    idle, idle_held = Reader("idle"), Held()
    account.check(idle, idle_held)  # a connection holding nothing is always read
    assert not idle.paused

    first, first_held = readers[0]
    account.read(first, first_held, 4, 10)
    account.check(first, first_held)
    assert first.paused and first not in account.waiting  # at its own bound

    account.answered(first, first_held, 10, 20)  # it holds nothing; total 24: one may read again
    assert not first.paused and not readers[4][0].paused and not account.waiting


def test_the_waiting_come_back_only_as_many_as_the_room_takes() -> None:
    account = Intake(max_count=100, max_size=10**6, max_total_count=100, max_total_size=10**6)
    readers = [(Reader(str(n)), Held()) for n in range(10)]
    for reader, held in readers:
        account.read(reader, held, 20, 20)  # a read is typically 20 packets
        account.check(reader, held)
    waiting = [r for r, _ in readers if r.paused]
    assert len(waiting) == 6  # the total was reached by the fifth
    account.answered(readers[0][0], readers[0][1], 20, 20)  # 180 held: no room yet
    assert all(r.paused for r in waiting)
    for reader, held in readers[1:5]:
        account.answered(reader, held, 20, 20)  # the fifth holds nothing now: read again
    assert [r.paused for r in waiting] == [False, True, True, True, True, True]
    account.answered(*readers[5], 20, 20)  # itself, and 80 held: room for one more read
    assert [r.paused for r in waiting] == [False, False, False, True, True, True]


def test_a_connection_that_ends_gives_back_what_it_held() -> None:
    account, reader, held = intake(), Reader("a"), Held()
    account.read(reader, held, 30, 300)
    account.check(reader, held)
    account.forget(reader, held)
    assert (account.count, account.size, held.count) == (0, 0, 0) and not account.waiting
