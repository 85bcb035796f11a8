"""broker.service.metrics.Tally: counts added as plain integers, each thread in a part of its
own, read as one Prometheus counter."""

from __future__ import annotations

import threading
from collections.abc import Hashable

from prometheus_client import CollectorRegistry, generate_latest

from broker.service.metrics import Tally


def _labels(key: Hashable) -> tuple[str, str]:
    direction, kind = key  # type: ignore[misc]
    return str(direction), str(kind)


def test_the_parts_of_every_thread_are_summed_into_one_counter() -> None:
    registry = CollectorRegistry()
    tally = Tally("things", "Things by direction and kind", ["direction", "kind"], registry, _labels)
    parts = [tally.part() for _ in range(4)]

    def count(part: dict[Hashable, int]) -> None:
        for n in range(100_000):
            key = ("in", "odd" if n % 2 else "even")
            part[key] = part.get(key, 0) + 1

    threads = [threading.Thread(target=count, args=(part,)) for part in parts]
    for thread in threads:
        thread.start()
    seen = registry.get_sample_value("things_total", {"direction": "in", "kind": "odd"}) or 0
    for thread in threads:
        thread.join()
    assert 0 <= seen <= 200_000  # collected while they counted: whatever they had, never an error
    assert registry.get_sample_value("things_total", {"direction": "in", "kind": "odd"}) == 200_000
    assert registry.get_sample_value("things_total", {"direction": "in", "kind": "even"}) == 200_000
    assert registry.get_sample_value("things_total", {"direction": "out", "kind": "odd"}) is None
    assert b"# TYPE things_total counter" in generate_latest(registry)
