"""The health registry: one warning per database outage, a traceback only for other failures,
not ready after a task keeps failing or has died."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from broker.service.health import FAILING_AFTER, Health, database_unavailable
from queues.errors import MQError
from queues.reasons import Reason

GONE = MQError(Reason.MQRC_CONNECTION_BROKEN, "database unavailable: connection refused")


def messages(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "broker.health"]


def test_an_outage_is_logged_once_and_its_end_once_every_task_that_waited_works(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    registry = CollectorRegistry()
    health = Health(registry)
    for name in ("router", "mqtt-watcher"):
        health.watch(name, lambda: True)
    for _ in range(5):
        assert health.failed("router", GONE) is (_ == 0)
        health.failed("mqtt-watcher", GONE)
    assert messages(caplog) == [("WARNING", "database unavailable; background work waits for it")]
    assert not any(r.exc_info for r in caplog.records)
    report = health.report()
    assert report.outage is not None and report.outage.tasks == ("mqtt-watcher", "router")
    assert report.ready  # waiting for the database is not a fault of the process
    assert registry.get_sample_value("broker_database_available") == 0

    health.succeeded("router")
    assert health.report().outage is not None  # the watcher still waits
    health.succeeded("mqtt-watcher")
    assert health.report().outage is None
    assert messages(caplog)[-1] == ("INFO", "database available again")
    assert caplog.records[-1].tasks == "mqtt-watcher,router"  # type: ignore[attr-defined]
    assert registry.get_sample_value("broker_database_available") == 1


def test_another_failure_is_logged_with_its_traceback_and_repeated_ones_make_the_process_not_ready(
    caplog: pytest.LogCaptureFixture,
) -> None:
    health = Health()
    health.watch("mqtt-sys", lambda: True)
    try:
        raise ValueError("bad value")
    except ValueError as exc:
        failure = exc
    for _ in range(FAILING_AFTER - 1):
        health.failed("mqtt-sys", failure)
    assert health.report().ready
    assert [r.exc_info is not None for r in caplog.records] == [True]  # once, with the traceback
    health.failed("mqtt-sys", failure)
    report = health.report()
    assert not report.ready
    assert [(t.name, t.error) for t in report.failing] == [("mqtt-sys", "ValueError: bad value")]
    assert messages(caplog)[-1] == ("ERROR", "background task keeps failing; the process is not ready")

    health.failed("mqtt-sys", KeyError("other"))  # a new kind of failure: logged with its stack
    assert caplog.records[-1].exc_info is not None
    health.succeeded("mqtt-sys")
    assert health.report().ready


def test_a_dead_task_makes_the_process_not_ready_until_it_is_forgotten() -> None:
    health = Health()
    alive = [True]
    health.watch("channels", lambda: alive[0])
    assert health.report().ready
    alive[0] = False
    assert [t.name for t in health.report().failing] == ["channels"]
    health.forget("channels")
    assert health.report().ready


def test_what_counts_as_the_database_being_unavailable() -> None:
    import sqlite3

    assert database_unavailable(GONE)
    assert database_unavailable(sqlite3.OperationalError("database or disk is full"))
    assert database_unavailable(sqlite3.OperationalError("attempt to write a readonly database"))
    assert not database_unavailable(MQError(Reason.MQRC_UNKNOWN_OBJECT_NAME, "no such queue"))
    assert not database_unavailable(sqlite3.OperationalError("no such table: mq_messages"))
