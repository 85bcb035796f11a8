"""Sparklines: a series drawn as the points of an inline SVG polyline, no script and no library,
so that a table row shows a queue's recent depth at a glance and the Content-Security-Policy
(no inline script, no inline style) has nothing to refuse."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

WIDTH = 80
HEIGHT = 18


@dataclass(frozen=True, slots=True)
class Sparkline:
    points: str  # the polyline's ``points`` attribute, in a WIDTH x HEIGHT box
    low: int
    high: int
    last: int

    @property
    def label(self) -> str:
        """What the line shows, for a tooltip and a screen reader."""
        return f"now {self.last}, lowest {self.low}, highest {self.high}"


def sparkline(series: Sequence[tuple[int, int]], span_ms: int) -> Sparkline | None:
    """``series`` of (epoch ms, value), oldest first, over the ``span_ms`` ending at its last
    point: time runs left to right, 0 at the bottom and the highest value at the top. None
    without a point; a single point is a short level stroke at the right."""
    if not series:
        return None
    end = series[-1][0]
    high = max(value for _, value in series)
    scale = (HEIGHT - 2) / high if high else 0.0

    def x(at: int) -> float:
        return max(0.0, WIDTH * (1 - (end - at) / span_ms))

    def y(value: int) -> float:
        return HEIGHT - 1 - value * scale

    drawn = [(x(at), y(value)) for at, value in series]
    if len(drawn) == 1:
        drawn.insert(0, (WIDTH - 4, drawn[0][1]))
    values = [value for _, value in series]
    return Sparkline(" ".join(f"{px:.1f},{py:.1f}" for px, py in drawn), min(values), high, values[-1])
