"""Sparklines as SVG polyline points (pure)."""

from __future__ import annotations

from admin_api.console.sparklines import HEIGHT, WIDTH, Sparkline, sparkline


def points(line: Sparkline | None) -> list[tuple[float, float]]:
    assert line is not None
    return [(float(x), float(y)) for x, y in (pair.split(",") for pair in line.points.split())]


def test_time_runs_left_to_right_and_the_highest_value_reaches_the_top() -> None:
    line = sparkline([(0, 0), (30_000, 8), (60_000, 4)], 60_000)
    assert points(line) == [(0.0, HEIGHT - 1), (WIDTH / 2, 1.0), (WIDTH, HEIGHT - 1 - 8.0)]
    assert line is not None and (line.low, line.high, line.last) == (0, 8, 4)
    assert line.label == "now 4, lowest 0, highest 8"


def test_a_short_history_sits_at_the_right_and_an_empty_queue_on_the_floor() -> None:
    assert points(sparkline([(50_000, 0), (60_000, 0)], 60_000)) == [
        (round(WIDTH * 5 / 6, 1), HEIGHT - 1),
        (WIDTH, HEIGHT - 1),
    ]
    assert points(sparkline([(1_000, 3)], 60_000)) == [(WIDTH - 4, 1.0), (WIDTH, 1.0)]  # one point: a stroke
    assert sparkline([], 60_000) is None
