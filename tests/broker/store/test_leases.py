"""The stream lease: a Spark job and a routing service never both route a stream queue."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, select

from broker.core import engine as routing_engine
from broker.core.system import CONTROL_QUEUE, DEFAULT_STREAM
from broker.service.config import Settings
from broker.service.router import RoutingService
from broker.store import leases
from broker.store.schema import leases as lease_rows
from queues import QueueManager
from queues.ids import now_ms
from queues.owners import machine_key
from tests.broker.core.builders import message, msg_id, psc_text

STREAM = leases.stream_resource(DEFAULT_STREAM)
NOW = 1_000_000


def row(engine: Engine) -> tuple[str, int] | None:
    with engine.connect() as conn:
        stmt = select(lease_rows.c.owner, lease_rows.c.until).where(lease_rows.c.resource == STREAM)
        found = conn.execute(stmt).first()
    return None if found is None else (found.owner, found.until)


def test_the_resource_of_a_stream_is_named_after_it():
    assert leases.stream_resource("APP.STREAM") == "stream:APP.STREAM"


def test_holder_creates_a_free_lease_on_first_use(engine):
    with engine.begin() as conn:
        assert leases.holder(conn, STREAM, NOW) is None
    assert row(engine) == ("", 0)


def test_take_holds_the_lease_until_it_lapses(engine):
    with engine.begin() as conn:
        leases.take(conn, STREAM, "job-1", NOW, 5_000)
    assert row(engine) == ("job-1", NOW + 5_000)
    with engine.begin() as conn:
        assert leases.holder(conn, STREAM, NOW + 4_999) == "job-1"
        assert leases.holder(conn, STREAM, NOW + 5_000) is None


def test_another_owner_cannot_take_an_unexpired_lease(engine):
    with engine.begin() as conn:
        leases.take(conn, STREAM, "job-1", NOW, 5_000)
    with pytest.raises(leases.LeaseError) as refused, engine.begin() as conn:
        leases.take(conn, STREAM, "job-2", NOW + 4_999, 5_000)
    assert refused.value.reason == 2042
    assert "leased by job-1" in refused.value.detail
    with engine.begin() as conn:
        leases.take(conn, STREAM, "job-2", NOW + 5_000, 5_000)
    assert row(engine) == ("job-2", NOW + 10_000)


def test_renew_extends_a_live_lease_and_refuses_a_lapsed_one(engine):
    with engine.begin() as conn:
        leases.take(conn, STREAM, "job-1", NOW, 5_000)
        leases.renew(conn, STREAM, "job-1", NOW + 4_000, 5_000)
    assert row(engine) == ("job-1", NOW + 9_000)
    with pytest.raises(leases.LeaseError), engine.begin() as conn:
        leases.renew(conn, STREAM, "job-1", NOW + 9_000, 5_000)
    with pytest.raises(leases.LeaseError), engine.begin() as conn:
        leases.renew(conn, STREAM, "job-2", NOW + 1_000, 5_000)


def test_verify_fails_once_the_lease_lapsed_or_changed_hands(engine):
    with engine.begin() as conn:
        leases.take(conn, STREAM, "job-1", NOW, 5_000)
        leases.verify(conn, STREAM, "job-1", NOW + 4_999)
    for owner, now in (("job-1", NOW + 5_000), ("job-2", NOW)):
        with pytest.raises(leases.LeaseError), engine.begin() as conn:
            leases.verify(conn, STREAM, owner, now)


def test_release_frees_only_the_owners_lease(engine):
    with engine.begin() as conn:
        leases.take(conn, STREAM, "job-1", NOW, 5_000)
        leases.release(conn, STREAM, "job-2")
    assert row(engine) == ("job-1", NOW + 5_000)
    with engine.begin() as conn:
        leases.release(conn, STREAM, "job-1")
    assert row(engine) == ("", 0)


# -- with the routing service ------------------------------------------------------------------


@pytest.fixture
def service(qm: QueueManager) -> Iterator[RoutingService]:
    routing = RoutingService(qm, Settings(batch_size=10))
    routing.prepare()
    qm.define_queue("SUB")
    qm.put(CONTROL_QUEUE, message(psc_text("RegSub", "A/#", QName="SUB"), msg_id=msg_id(1), reply_to_q=""))
    routing.run_once()
    yield routing


def publish(qm: QueueManager, count: int) -> None:
    publication = psc_text("Publish", "A/B")
    qm.put_many(
        [(DEFAULT_STREAM, message(publication, msg_id=msg_id(10 + n), reply_to_q="")) for n in range(count)]
    )


def test_a_running_service_leaves_a_leased_stream_alone(qm, service):
    publish(qm, 3)
    qm.put(CONTROL_QUEUE, message(psc_text("RegSub", "C/#", QName="SUB"), msg_id=msg_id(2), reply_to_q=""))
    with qm.engine.begin() as conn:
        leases.take(conn, STREAM, "spark:elsewhere", now_ms(), 60_000)

    service.run_once()

    assert qm.depth(DEFAULT_STREAM) == 3
    assert qm.depth("SUB") == 0
    assert qm.depth(CONTROL_QUEUE) == 0  # control commands stay with the service
    with qm.engine.begin() as conn:
        leases.release(conn, STREAM, "spark:elsewhere")
    service.run_once()
    assert (qm.depth(DEFAULT_STREAM), qm.depth("SUB")) == (0, 3)


def test_a_lapsed_lease_does_not_hold_the_service_back(qm, service):
    publish(qm, 2)
    with qm.engine.begin() as conn:
        leases.take(conn, STREAM, "spark:dead", now_ms() - 120_000, 60_000)

    service.run_once()

    assert (qm.depth(DEFAULT_STREAM), qm.depth("SUB")) == (0, 2)


def test_taking_the_lease_waits_for_a_service_batch_in_flight(qm, service, monkeypatch):
    """The job's watermark must not include what a service batch is routing: taking the
    lease waits until that batch has committed, and the backlog then excludes it."""
    publish(qm, 25)
    routing = threading.Event()
    finish = threading.Event()
    route = routing_engine.route

    def slow_route(*args, **kwargs):
        routing.set()
        finish.wait(10)
        return route(*args, **kwargs)

    monkeypatch.setattr(routing_engine, "route", slow_route)
    batch = threading.Thread(target=service.route_queue, args=(DEFAULT_STREAM,))
    batch.start()
    assert routing.wait(10)
    taken = threading.Event()

    def take() -> None:
        leases.take_over(qm, DEFAULT_STREAM, "spark:job")
        taken.set()

    taker = threading.Thread(target=take)
    taker.start()
    assert not taken.wait(0.5)  # held back by the batch in flight
    finish.set()
    batch.join(10)
    taker.join(10)
    assert taken.is_set()
    assert qm.depth(DEFAULT_STREAM) == 15
    assert qm.depth("SUB") == 10


def test_a_lease_of_a_dead_job_driver_of_this_machine_is_free_at_once(engine):
    """A killed ``broker spark route`` on this machine does not keep its stream for the
    lease's full term: routers and the next job take it up at once."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    dead = f"spark:job:host:1/{process.pid}@{machine_key()}"
    with engine.begin() as conn:
        leases.take(conn, STREAM, dead, NOW, 60_000)
    with engine.begin() as conn:
        assert leases.holder(conn, STREAM, NOW + 1) is None
        leases.take(conn, STREAM, "job-2", NOW + 1, 5_000)
    assert row(engine) == ("job-2", NOW + 5_001)
