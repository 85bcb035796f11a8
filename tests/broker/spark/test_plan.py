"""Cutting a backlog into partitions: whole service batches, in get order, covering every
message once, and the same predicate for the JDBC read as for the consuming delete."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select, text

from broker.core.system import DEFAULT_STREAM
from broker.spark.plan import Part, make_plan, partition_size
from queues import Message, QueueManager
from queues.ids import now_ms
from queues.schema import messages


@pytest.mark.parametrize(
    ("live", "batch", "partitions", "cores", "size"),
    [
        (240, 50, 4, 2, 100),  # 5 batches over 4 partitions: two batches each
        (240, 50, None, 2, 100),  # small backlog: aiming at two partitions per core
        (1_000_000, 500, None, 2, 10_000),  # about ROWS_PER_PARTITION
        (240, 1000, 4, 2, 1000),  # never less than one batch
        (0, 50, None, 2, 50),
    ],
)
def test_a_partition_holds_whole_service_batches(live, batch, partitions, cores, size):
    assert partition_size(live, batch, partitions, cores) == size


def load(qm: QueueManager, priorities: list[int], expired: set[int]) -> list[tuple[int, int]]:
    """Put one message per priority (those at ``expired`` indexes already expired); their
    (priority, id) in put order."""
    qm.define_queue(DEFAULT_STREAM, replace_existing=True)
    qm.put_many(
        [
            (DEFAULT_STREAM, Message(body=str(n).encode(), priority=p, expiry=1 if n in expired else -1))
            for n, p in enumerate(priorities)
        ]
    )
    with qm.engine.connect() as conn:
        stmt = select(messages.c.priority, messages.c.id).where(messages.c.queue == DEFAULT_STREAM)
        return [tuple(row) for row in conn.execute(stmt.order_by(messages.c.id))]  # type: ignore[misc]


@pytest.mark.parametrize("mixed", [False, True], ids=["one priority", "mixed priorities"])
def test_the_partitions_cover_the_backlog_once_in_get_order(qm: QueueManager, mixed: bool):
    priorities = [(n * 7) % 10 if mixed else 4 for n in range(47)]
    expired = {0, 5, 6, 30, 46}
    keys = load(qm, priorities, expired)
    later = now_ms() + 1000  # the job's clock: the expiring messages are past it
    live_keys = [k for n, k in enumerate(keys) if n not in expired]
    get_order = sorted(live_keys, key=lambda k: (-k[0], k[1]))

    with qm.engine.begin() as conn:
        plan = make_plan(conn, DEFAULT_STREAM, later, batch_size=4, partitions=5, cores=2)
        # Every message in exactly one partition, and each partition's live messages the next
        # stretch of the get order, starting at its first rank.
        seen: list[tuple[int, int]] = []
        for part in plan.parts:
            rows = conn.execute(select(messages.c.priority, messages.c.id).where(plan.where(part))).all()
            seen.extend(tuple(r) for r in rows)  # type: ignore[misc]
            live = sorted((tuple(r) for r in rows if tuple(r) in live_keys), key=lambda k: (-k[0], k[1]))
            assert live == get_order[part.first_rank - 1 : part.first_rank - 1 + plan.size]
            text_count = conn.execute(
                text(f"SELECT count(*) FROM mq_messages WHERE {plan.predicate(part)}")
            ).scalar_one()
            assert text_count == len(rows)
        assert sorted(seen) == sorted(keys)

    assert (plan.rows, plan.live, plan.watermark) == (47, 42, keys[-1][1])
    assert plan.size == 12  # 11 batches of 4 in 5 partitions: three batches each
    assert [p.first_rank for p in plan.parts] == [1, 13, 25, 37]
    assert plan.one_priority is not mixed
    assert plan.parts[0].start is None and plan.parts[-1].end is None


def test_an_empty_stream_has_no_partitions(qm: QueueManager):
    qm.define_queue(DEFAULT_STREAM, replace_existing=True)
    with qm.engine.begin() as conn:
        plan = make_plan(conn, DEFAULT_STREAM, now_ms(), batch_size=50, partitions=None, cores=2)
        assert (plan.parts, plan.rows, plan.watermark) == ((), 0, 0)
        assert conn.execute(select(func.count()).select_from(messages)).scalar_one() == 0


def test_a_backlog_of_expired_messages_is_one_partition_that_consumes_them(qm: QueueManager):
    keys = load(qm, [3, 3, 3], {0, 1, 2})
    with qm.engine.begin() as conn:
        plan = make_plan(conn, DEFAULT_STREAM, now_ms() + 1000, batch_size=50, partitions=None, cores=2)
        assert plan.parts == (Part(0, 1, None, None),) and plan.live == 0
        assert len(conn.execute(select(messages.c.id).where(plan.where(plan.parts[0]))).all()) == len(keys)
