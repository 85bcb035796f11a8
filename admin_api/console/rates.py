"""The overview's rates: the routers' cumulative counters sampled, and differences per second.

The routers publish running totals (``/api/v1/status``); a rate needs two of them. Each API
process keeps the samples its overview pages asked for, at most one per ``min_gap_ms`` and
the last ``window_ms`` of them, so every open overview shares them and a page opened now
shows the minutes before it. Nothing is stored: a restarted API starts a new history.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from itertools import pairwise

SERIES = ("publications", "deliveries", "replies", "refusals", "dead_lettered")


@dataclass(frozen=True, slots=True)
class Sample:
    at: int  # milliseconds since the epoch
    totals: tuple[int, ...]  # the SERIES, cumulative over the live routers


class Rates:
    def __init__(self, *, window_ms: int = 600_000, min_gap_ms: int = 1_000) -> None:
        self.window_ms = window_ms
        self.min_gap_ms = min_gap_ms
        self._samples: deque[Sample] = deque()
        self._lock = threading.Lock()

    def add(self, sample: Sample) -> None:
        """Keep ``sample`` unless the last one is too recent; forget those out of the window."""
        with self._lock:
            if self._samples and sample.at - self._samples[-1].at < self.min_gap_ms:
                return
            self._samples.append(sample)
            while self._samples[0].at < sample.at - self.window_ms:
                self._samples.popleft()

    def series(self) -> dict[str, list[float]]:
        """``at`` (seconds) and, per counter, its rate per second between consecutive samples.

        A counter that went down (a router stopped, its totals left the sum) counts as 0, not
        as a negative rate."""
        with self._lock:
            samples = list(self._samples)
        pairs = list(pairwise(samples))
        result: dict[str, list[float]] = {"at": [later.at / 1000 for _, later in pairs]}
        for index, name in enumerate(SERIES):
            result[name] = [
                max(0, later.totals[index] - earlier.totals[index]) * 1000 / (later.at - earlier.at)
                for earlier, later in pairs
            ]
        return result
