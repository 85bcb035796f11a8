"""Subscription-matching benchmark: is TopicTree.match independent of the number of subscriptions?

The release criteria (at 1,000,000 subscriptions: at least 100,000 matches a second on one core and
under 1 KiB of memory per subscription, records included) only mean something on a realistic tree,
so the workload models an estate of sites reporting device metrics:
``Region/Country/Site/Device/Metric/Statistic/Period``, topics and patterns 3 to 7 levels deep,
about 70% literal patterns, 20% with ``+`` and 10% with ``#`` (most trailing, some mid-topic).

The number of sites grows with the number of subscriptions. A larger broker serves a larger estate,
and a fixed vocabulary would make every topic match ever more subscriptions, so the benchmark would
measure result-list copying instead of matching. With the estate scaled, each row reports a similar
"results per match" and the matches/s columns compare like with like.

Run it as ``python -m broker.bench.matching`` (``--large 100000`` for a quicker second row).
"""

from __future__ import annotations

import argparse
import gc
import random
import time
import tracemalloc
from collections.abc import Sequence
from dataclasses import dataclass

from broker.core.topics import MULTI_LEVEL, SEPARATOR, SINGLE_LEVEL, TopicTree

SMALL = 1_000
LARGE = 1_000_000

_REGIONS = ("EMEA", "AMER", "APAC", "LATAM")
_COUNTRIES_PER_REGION = 10
_SUBSCRIPTIONS_PER_SITE = 25
_DEVICE_KINDS = ("Pump", "Valve", "Meter", "Sensor", "Gateway")
_DEVICES_PER_KIND = 8
_METRICS = (
    "Temperature",
    "Pressure",
    "Flow",
    "Voltage",
    "Current",
    "Power",
    "Humidity",
    "Vibration",
    "Status",
    "Alarm",
    "Speed",
    "Level",
)
_STATISTICS = ("Last", "Min", "Max", "Avg", "P99")
_PERIODS = ("1m", "1h", "1d")
_MIN_DEPTH = 3
_SITE = 2
_MAX_DEPTH = 7
_USERS = 500
_QUEUES_PER_USER = 4


@dataclass(frozen=True, slots=True)
class SubscriptionRecord:
    """The shape of what the engine keeps per subscription, so memory figures include it."""

    id: int
    queue: str
    qmgr: str
    correl_id: bytes
    user_id: str
    options: int
    sub_point: str
    topic: str


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """The level values allowed at each depth of the modelled topic space."""

    levels: tuple[tuple[str, ...], ...]

    @classmethod
    def for_subscriptions(cls, subscriptions: int) -> Vocabulary:
        """Size the estate so that each site carries about ``_SUBSCRIPTIONS_PER_SITE``."""
        countries = tuple(f"C{number:02d}" for number in range(_COUNTRIES_PER_REGION))
        country_count = len(_REGIONS) * _COUNTRIES_PER_REGION
        sites_per_country = max(1, round(subscriptions / _SUBSCRIPTIONS_PER_SITE / country_count))
        sites = tuple(f"Site{number:05d}" for number in range(sites_per_country))
        devices = tuple(
            f"{kind}{number:02d}" for kind in _DEVICE_KINDS for number in range(_DEVICES_PER_KIND)
        )
        return cls((_REGIONS, countries, sites, devices, _METRICS, _STATISTICS, _PERIODS))

    def topic_levels(self, rng: random.Random) -> list[str]:
        depth = rng.randint(_MIN_DEPTH, _MAX_DEPTH)
        return [rng.choice(values) for values in self.levels[:depth]]

    def topic(self, rng: random.Random) -> str:
        return SEPARATOR.join(self.topic_levels(rng))

    def pattern(self, rng: random.Random) -> str:
        """70% literal, 20% with one or two '+', 10% with '#' (trailing, or mid-topic for 1 in 5).

        Wildcards sit below the site level, as an operator's subscriptions do ("every device of
        this site"): a '+' or '#' above it would collect subscriptions from every site of the
        estate, so the results per match, not the matching, would grow with the row size.
        """
        kind = rng.random()
        if kind < 0.7:
            return self.topic(rng)
        levels = self.topic_levels(rng)
        if kind < 0.9:
            below_site = _SITE + 1
            levels.extend(rng.choice(values) for values in self.levels[len(levels) : below_site + 1])
            wild = range(below_site, len(levels))
            for position in rng.sample(wild, min(len(wild), rng.choice((1, 1, 1, 2)))):
                levels[position] = SINGLE_LEVEL
            return SEPARATOR.join(levels)
        keep = rng.randint(_SITE + 1, len(levels))
        if keep < len(levels) and rng.random() < 0.2:
            return SEPARATOR.join((*levels[:keep], MULTI_LEVEL, levels[-1]))
        return SEPARATOR.join((*levels[:keep], MULTI_LEVEL))


def make_records(subscriptions: int, seed: int) -> list[SubscriptionRecord]:
    """``subscriptions`` records over a vocabulary sized for them; same seed, same records."""
    rng = random.Random(seed)
    vocabulary = Vocabulary.for_subscriptions(subscriptions)
    users = [f"user{number:04d}" for number in range(_USERS)]
    queues = [f"APP.{user.upper()}.SUB.Q{q}" for user in users for q in range(_QUEUES_PER_USER)]
    records = []
    for number in range(subscriptions):
        queue_index = rng.randrange(len(queues))
        records.append(
            SubscriptionRecord(
                id=1_000_000_000 + number,
                queue=queues[queue_index],
                qmgr="QM1",
                correl_id=rng.randbytes(24),
                user_id=users[queue_index // _QUEUES_PER_USER],
                options=rng.choice((0, 0x20, 0x40, 0x60)),
                sub_point="",
                topic=vocabulary.pattern(rng),
            )
        )
    return records


def make_topics(subscriptions: int, topics: int, seed: int) -> list[str]:
    """Concrete publication topics drawn from the same vocabulary as :func:`make_records`."""
    rng = random.Random(seed + 1)
    vocabulary = Vocabulary.for_subscriptions(subscriptions)
    return [vocabulary.topic(rng) for _ in range(topics)]


def build_tree(records: Sequence[SubscriptionRecord]) -> TopicTree[SubscriptionRecord]:
    tree: TopicTree[SubscriptionRecord] = TopicTree()
    for record in records:
        tree.add(record.topic, record)
    return tree


def _memory_per_subscription(subscriptions: int, seed: int) -> float:
    """Bytes still allocated after building records and tree, per subscription."""
    gc.collect()
    already_tracing = tracemalloc.is_tracing()
    if not already_tracing:
        tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tree = build_tree(make_records(subscriptions, seed))
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        if not already_tracing:
            tracemalloc.stop()
    del tree
    return used / subscriptions


def run(subscriptions: int, topics: int = 200_000, seed: int = 1) -> dict[str, float]:
    """Build ``subscriptions`` records into a tree and time ``topics`` matches over it.

    Memory is measured on a second, identical build: tracemalloc slows every allocation, so the
    timed build runs without it.
    """
    records = make_records(subscriptions, seed)
    started = time.perf_counter()
    tree = build_tree(records)
    build_seconds = time.perf_counter() - started
    sample = make_topics(subscriptions, topics, seed)
    match = tree.match
    results = 0
    started = time.perf_counter()
    for topic in sample:
        results += len(match(topic))
    match_seconds = time.perf_counter() - started
    del tree, records
    return {
        "subscriptions": subscriptions,
        "topics": topics,
        "build_seconds": build_seconds,
        "matches_per_second": topics / match_seconds,
        "results": results,
        "results_per_match": results / topics,
        "bytes_per_subscription": _memory_per_subscription(subscriptions, seed),
    }


def _table(rows: Sequence[dict[str, float]]) -> str:
    header = f"{'subscriptions':>13} {'build s':>8} {'matches/s':>10} {'results/match':>13} {'B/sub':>7}"
    lines = [header]
    for row in rows:
        lines.append(
            f"{row['subscriptions']:>13,.0f} {row['build_seconds']:>8.2f}"
            f" {row['matches_per_second']:>10,.0f} {row['results_per_match']:>13.2f}"
            f" {row['bytes_per_subscription']:>7,.0f}"
        )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options, shared by ``python -m broker.bench.matching`` and ``broker bench matching``."""
    parser.add_argument("--small", type=int, default=SMALL, help="subscriptions in the first row")
    parser.add_argument("--large", type=int, default=LARGE, help="subscriptions in the second row")
    parser.add_argument("--topics", type=int, default=200_000, help="matches timed per row")
    parser.add_argument("--seed", type=int, default=1)


def command(options: argparse.Namespace) -> None:
    rows = [run(size, options.topics, options.seed) for size in (options.small, options.large)]
    print(_table(rows))
    ratio = rows[1]["matches_per_second"] / rows[0]["matches_per_second"]
    print(f"matches/s at {options.large:,} subscriptions / at {options.small:,}: {ratio:.2f}")
