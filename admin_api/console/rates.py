"""Rates in the console: cumulative counters sampled, and differences per second.

The routers publish running totals (``/api/v1/status``), and every queue counts its puts and
gets (``put_count``, ``get_count``); a rate needs two readings. Each API process keeps the
samples its pages asked for, at most one per ``min_gap_ms`` and the last ``window_ms`` of
them, so every open page shares them and a page opened now shows the time before it.
Nothing is stored: a restarted API starts a new history.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise

from queues.definition import QueueDefinition

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


@dataclass(frozen=True, slots=True)
class QueueRate:
    """Messages put and gotten per second over the samples a queue's pages have taken (at
    most the last window), None until two samples ``min_gap_ms`` apart exist; and the depth at
    each sample, (epoch ms, depth), oldest first: its recent history."""

    put: float | None
    get: float | None
    depths: tuple[tuple[int, int], ...] = ()


class QueueRates:
    """Per-queue put and get rates from the queues' counters, and their depths, sampled when
    the console shows the queue (its list refreshes itself every few seconds). Bounded: the
    ``max_queues`` shown most recently keep samples, so paging through 100,000 queues costs a
    fixed memory."""

    def __init__(self, *, window_ms: int = 60_000, min_gap_ms: int = 1_000, max_queues: int = 10_000) -> None:
        self.window_ms = window_ms
        self.min_gap_ms = min_gap_ms
        self.max_queues = max_queues
        # (at, put_count, get_count, depth) per queue
        self._samples: OrderedDict[str, deque[tuple[int, int, int, int]]] = OrderedDict()
        self._lock = threading.Lock()

    def observe(self, at: int, queues: Iterable[QueueDefinition]) -> dict[str, QueueRate]:
        """Sample the queues' counters read at ``at`` (epoch ms) and give each one's rates."""
        with self._lock:
            return {q.name: self._observe(at, q) for q in queues}

    def _observe(self, at: int, queue: QueueDefinition) -> QueueRate:
        samples = self._samples.pop(queue.name, None)
        if samples is None or (samples and samples[-1][1:3] > (queue.put_count, queue.get_count)):
            samples = deque()  # new, or deleted and defined again: its counters began anew
        if not samples or at - samples[-1][0] >= self.min_gap_ms:
            samples.append((at, queue.put_count, queue.get_count, queue.depth))
        while samples[0][0] < at - self.window_ms:
            samples.popleft()
        self._samples[queue.name] = samples  # the most recently shown last
        while len(self._samples) > self.max_queues:
            self._samples.popitem(last=False)
        depths = tuple((sample[0], sample[3]) for sample in samples)
        first, last = samples[0], samples[-1]
        seconds = (last[0] - first[0]) / 1000
        if seconds * 1000 < self.min_gap_ms:
            return QueueRate(None, None, depths)
        return QueueRate((last[1] - first[1]) / seconds, (last[2] - first[2]) / seconds, depths)
