"""The overview's rates from cumulative samples (pure: no database)."""

from __future__ import annotations

from admin_api.console.rates import SERIES, Rates, Sample


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
