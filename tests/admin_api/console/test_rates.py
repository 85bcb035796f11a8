"""The overview's rates from cumulative samples (pure: no database)."""

from __future__ import annotations

from admin_api.console.rates import SERIES, QueueRate, QueueRates, Rates, Sample
from queues.definition import QueueDefinition


def sample(at: int, publications: int, refusals: int = 0) -> Sample:
    return Sample(at, (publications, 0, 0, refusals, 0))


def test_rates_are_differences_per_second_between_samples() -> None:
    rates = Rates(window_ms=10_000, min_gap_ms=1_000)
    assert rates.series() == {"at": [], **{name: [] for name in SERIES}}
    rates.add(sample(1_000, 0))
    rates.add(sample(3_000, 10, refusals=1))
    rates.add(sample(3_500, 99))  # too soon after the last: not kept
    rates.add(sample(4_000, 40))
    series = rates.series()
    assert series["at"] == [3.0, 4.0]
    assert series["publications"] == [5.0, 30.0]
    assert series["refusals"] == [0.5, 0.0]


def test_old_samples_leave_the_window_and_a_drop_is_no_negative_rate() -> None:
    rates = Rates(window_ms=5_000, min_gap_ms=0)
    for at, total in ((0, 0), (2_000, 10), (4_000, 20), (6_000, 50)):
        rates.add(sample(at, total))
    assert rates.series()["at"] == [4.0, 6.0]  # the sample at 0 s fell out
    assert rates.series()["publications"] == [5.0, 15.0]
    rates.add(sample(8_000, 5))  # a router stopped: its totals left the sum
    assert rates.series()["at"] == [6.0, 8.0]
    assert rates.series()["publications"] == [15.0, 0.0]


def queue(name: str, puts: int, gets: int = 0, depth: int = 0) -> QueueDefinition:
    return QueueDefinition(name, put_count=puts, get_count=gets, depth=depth)


def rate(found: QueueRate) -> tuple[float | None, float | None]:
    return found.put, found.get


def test_queue_rates_span_the_samples_of_the_window() -> None:
    rates = QueueRates(window_ms=10_000, min_gap_ms=1_000)
    assert rates.observe(0, [queue("A", 0)]) == {"A": QueueRate(None, None, ((0, 0),))}
    assert rate(rates.observe(500, [queue("A", 7)])["A"]) == (None, None)  # too soon: no second sample
    assert rate(rates.observe(2_000, [queue("A", 10, 4)])["A"]) == (5.0, 2.0)
    assert rate(rates.observe(4_000, [queue("A", 10, 4)])["A"]) == (2.5, 1.0)
    assert rate(rates.observe(12_000, [queue("A", 10, 4)])["A"]) == (0.0, 0.0)  # 0 s fell out


def test_each_sample_keeps_the_depth_for_the_queues_history() -> None:
    rates = QueueRates(window_ms=10_000, min_gap_ms=1_000)
    for at, depth in ((0, 5), (500, 99), (2_000, 8), (9_000, 3), (11_000, 0)):
        found = rates.observe(at, [queue("A", 10, 0, depth)])["A"]
    assert found.depths == ((2_000, 8), (9_000, 3), (11_000, 0))  # 500 ms too soon, 0 s out of the window


def test_a_queue_defined_again_starts_anew_and_few_queues_keep_samples() -> None:
    rates = QueueRates(window_ms=60_000, min_gap_ms=1_000, max_queues=2)
    rates.observe(0, [queue("A", 50), queue("B", 0), queue("C", 0)])  # A, the oldest, is forgotten
    assert rate(rates.observe(2_000, [queue("A", 60)])["A"]) == (None, None)
    assert rate(rates.observe(4_000, [queue("C", 8)])["C"]) == (2.0, 0.0)
    again = rates.observe(6_000, [queue("C", 1, 0, 4)])["C"]  # its counters went down
    assert again == QueueRate(None, None, ((6_000, 4),))
