"""Smoke test of the matching benchmark: it runs, and what it counts is what matches() says.

The timings themselves are not asserted (they depend on the machine); run
``python -m broker.bench.matching`` for the release figures.
"""

from __future__ import annotations

from collections import Counter

import pytest

from broker.bench import main
from broker.bench.matching import build_tree, make_records, make_topics, run
from broker.core.topics import is_wildcard, matches, split_levels

SUBSCRIPTIONS = 2_000
SEED = 3


def test_records_follow_the_documented_mix() -> None:
    records = make_records(SUBSCRIPTIONS, SEED)
    assert len({record.id for record in records}) == SUBSCRIPTIONS
    assert make_records(SUBSCRIPTIONS, SEED) == records
    depths = Counter(len(split_levels(record.topic)) for record in records)
    assert min(depths) >= 3
    assert max(depths) <= 8  # 7 levels, plus the level after a mid-topic '#'
    kinds = Counter(
        "#" if "#" in split_levels(r.topic) else "+" if is_wildcard(r.topic) else "literal" for r in records
    )
    assert 0.65 < kinds["literal"] / SUBSCRIPTIONS < 0.75
    assert 0.16 < kinds["+"] / SUBSCRIPTIONS < 0.24
    assert 0.07 < kinds["#"] / SUBSCRIPTIONS < 0.13


def test_tree_counts_agree_with_the_reference_matcher_on_a_sample() -> None:
    records = make_records(SUBSCRIPTIONS, SEED)
    tree = build_tree(records)
    sample = make_topics(SUBSCRIPTIONS, 500, SEED)
    total = 0
    for topic in sample:
        expected = Counter(record.id for record in records if matches(record.topic, topic))
        assert Counter(record.id for record in tree.match(topic)) == expected
        total += sum(expected.values())
    assert total > 0


def test_run_reports_consistent_figures() -> None:
    topics = 3_000
    row = run(SUBSCRIPTIONS, topics=topics, seed=SEED)
    tree = build_tree(make_records(SUBSCRIPTIONS, SEED))
    expected = sum(len(tree.match(topic)) for topic in make_topics(SUBSCRIPTIONS, topics, SEED))
    assert row["subscriptions"] == SUBSCRIPTIONS
    assert row["topics"] == topics
    assert row["results"] == expected
    assert row["results_per_match"] == pytest.approx(expected / topics)
    assert row["matches_per_second"] > 0
    assert row["build_seconds"] > 0
    assert 100 < row["bytes_per_subscription"] < 1024


def test_main_prints_both_rows_and_the_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    main("matching", ["--small", "300", "--large", "1200", "--topics", "500"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["subscriptions", "build", "s", "matches/s", "results/match", "B/sub"]
    assert lines[1].split()[0] == "300"
    assert lines[2].split()[0] == "1,200"
    assert lines[3].startswith("matches/s at 1,200 subscriptions / at 300: ")
