"""A partition's turn, without Spark: committed in order, partitions leave every queue as the
service does; a second attempt writes nothing; a partition whose backlog changed under it, or
whose job lost the lease, writes nothing at all."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from sqlalchemy import delete, func, select

from broker import store
from broker.core.system import DEFAULT_STREAM
from broker.service.config import broker_config
from broker.spark import commit, runs
from broker.spark.partition import Routed, TaskSpec, route_rows
from broker.spark.plan import Part, make_plan
from broker.spark.snapshot import PutContext, capture
from broker.store import leases
from queues.ids import now_ms
from queues.schema import messages
from tests.broker.spark.scenario import BATCH, Broker, backlog, contents, load

OWNER = "spark:test-owner"


@dataclass
class Job:
    broker: Broker
    spec: TaskSpec

    def routed(self, part: Part) -> Routed:
        """Read and route ``part`` as a task does (the executor's state from the snapshot)."""
        plan, snapshot = self.spec.plan, self.spec.snapshot
        with self.broker.engine.connect() as conn:
            rows = conn.execute(select(messages).where(plan.where(part))).all()
        return route_rows(rows, snapshot, snapshot.state(), part, BATCH)

    def commit(self, part: Part) -> runs.PartSummary:
        return commit.commit_partition(self.broker.engine, self.spec, part, self.routed(part))


def counters(broker: Broker) -> dict[str, tuple[int, int]]:
    return {q.name: (q.put_count, q.get_count) for q in broker.qm.list_queues()}


def start(broker: Broker, partitions: int = 3) -> Job:
    """What the driver does before the Spark stage."""
    leases.take_over(broker.qm, DEFAULT_STREAM, OWNER)
    state_store = store.StateStore(broker_config("QM1", broker.settings))
    with broker.engine.begin() as conn:
        now = now_ms()
        context = PutContext("QM1", broker.qm.user_id, broker.qm.appl_name)
        snapshot, housekeeping = capture(
            conn, state_store, job="job-t", stream=DEFAULT_STREAM, now=now, context=context
        )
        assert housekeeping == []
        plan = make_plan(conn, DEFAULT_STREAM, now, batch_size=BATCH, partitions=partitions, cores=1)
        runs.start_run(conn, "job-t", DEFAULT_STREAM, plan.watermark, len(plan.parts), now)
    return Job(broker, TaskSpec(snapshot, plan, OWNER, BATCH, 5.0))


def test_partitions_committed_in_order_leave_every_queue_as_the_service_does(brokers):
    served, committed = brokers(), brokers()
    for broker in (served, committed):
        load(broker, backlog())
    served.route_with_service()

    job = start(committed)
    summaries = [job.commit(part) for part in job.spec.plan.parts]

    assert len(summaries) == 3
    assert contents(committed) == contents(served)
    assert counters(committed) == counters(served)  # puts and gets counted as the service counts them
    assert counters(committed)[DEFAULT_STREAM][1] == sum(s.messages for s in summaries)  # expired: no get
    assert sum(s.rows_read for s in summaries) == len(backlog())
    assert all(s.write_us > 0 for s in summaries)


def test_a_second_attempt_of_a_committed_partition_writes_nothing(brokers):
    broker = brokers()
    load(broker, backlog())
    job = start(broker)
    first = job.commit(job.spec.plan.parts[0])
    after = contents(broker)

    again = job.commit(job.spec.plan.parts[0])

    assert again == first
    assert contents(broker) == after


def test_a_partition_whose_backlog_changed_writes_nothing(brokers):
    broker = brokers()
    load(broker, backlog())
    job = start(broker)
    part = job.spec.plan.parts[0]
    routed = job.routed(part)
    with broker.engine.begin() as conn:  # something else took one of its messages
        (victim,) = conn.execute(select(messages.c.id).where(job.spec.plan.where(part)).limit(1)).one()
        conn.execute(delete(messages).where(messages.c.id == victim))
    before = contents(broker)

    with pytest.raises(commit.CommitError) as failed:
        commit.commit_partition(broker.engine, job.spec, part, routed)

    assert "something else took messages" in failed.value.detail
    assert contents(broker) == before
    with broker.engine.connect() as conn:
        assert runs.committed_parts(conn, "job-t") == {}


def test_a_job_that_lost_its_lease_commits_nothing(brokers):
    broker = brokers()
    load(broker, backlog())
    job = start(broker)
    with broker.engine.begin() as conn:
        leases.release(conn, leases.stream_resource(DEFAULT_STREAM), OWNER)
        leases.take(conn, leases.stream_resource(DEFAULT_STREAM), "spark:another", now_ms())
    before = contents(broker)

    with pytest.raises(leases.LeaseError):
        job.commit(job.spec.plan.parts[0])

    assert contents(broker) == before
    with broker.engine.connect() as conn:
        assert conn.execute(
            select(func.count()).where(messages.c.queue == DEFAULT_STREAM)
        ).scalar_one() == len(backlog())
