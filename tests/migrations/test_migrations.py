"""Alembic migrations on both dialects: they build exactly the models, and run down and up again."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, MetaData, Table, func, insert, inspect, select, text

import migrations
from broker.store import mqtt
from broker.store.schema import spark_runs as runs
from migrations.models import target_metadata
from queues import Message, QueueManager, make_engine, sql
from tests.conftest import PostgresDatabases

QUEUE_TABLES = {"mq_qmgr", "mq_queues", "mq_messages"}


@pytest.fixture
def empty(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url)
    yield engine
    engine.dispose()


def differences(engine: Engine) -> list[Any]:
    """What autogenerate would change to make the database match the models (as env.py compares)."""
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        # Alembic compares a list of MetaData as env.py passes it, though typed for one.
        return compare_metadata(context, target_metadata)  # type: ignore[arg-type]


def revisions() -> list[str]:
    """Every revision from the first to head, in order."""
    scripts = ScriptDirectory.from_config(migrations.config_without_engine())
    return [script.revision for script in reversed(list(scripts.walk_revisions()))]


def tables(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names())


def test_revisions_form_one_line_ending_at_head():
    found = revisions()
    assert found[0] == "0001"
    assert found[-1] == migrations.head()
    assert len(set(found)) == len(found)


def test_upgrade_of_an_empty_database_reaches_head(empty):
    assert migrations.current(empty) is None
    assert migrations.is_at_head(empty) is False
    migrations.upgrade(empty)
    assert migrations.current(empty) == migrations.head()
    assert migrations.is_at_head(empty) is True
    assert QUEUE_TABLES | {"alembic_version"} <= tables(empty)


def test_upgrade_one_revision_at_a_time(empty):
    *earlier, last = revisions()
    for revision in earlier:
        migrations.upgrade(empty, revision)
        assert migrations.current(empty) == revision
        assert migrations.is_at_head(empty) is False
    migrations.upgrade(empty, last)
    assert migrations.is_at_head(empty) is True
    assert differences(empty) == []


def test_upgrade_at_head_changes_nothing(engine):
    before = tables(engine)
    with QueueManager(engine) as qm:
        qm.define_queue("APP.Q")
        qm.put("APP.Q", Message(body=b"kept"))
    migrations.upgrade(engine)
    assert migrations.is_at_head(engine)
    assert tables(engine) == before
    with QueueManager(engine) as qm:
        assert qm.get("APP.Q").body == b"kept"


def test_migrated_schema_equals_the_models(engine):
    assert differences(engine) == []


def test_the_comparison_notices_a_schema_that_drifted(engine):
    with engine.begin() as conn:
        conn.execute(text("DROP INDEX ix_mq_messages_claim"))
        conn.execute(text("ALTER TABLE mq_queues ADD COLUMN extra INTEGER"))
    found = differences(engine)
    assert sorted(diff[0] for diff in found) == ["add_index", "remove_column"]
    index = next(diff[1] for diff in found if diff[0] == "add_index")
    column = next(diff for diff in found if diff[0] == "remove_column")
    assert index.name == "ix_mq_messages_claim"
    assert (column[2], column[3].name) == ("mq_queues", "extra")


def test_upgrade_downgrade_upgrade(empty):
    migrations.upgrade(empty)
    QueueManager.create(empty, "QM1")
    migrations.downgrade(empty, "base")
    assert migrations.current(empty) is None
    assert migrations.is_at_head(empty) is False
    assert tables(empty) == {"alembic_version"}
    migrations.upgrade(empty)
    assert migrations.is_at_head(empty)
    assert differences(empty) == []
    QueueManager.create(empty, "QM1")
    with QueueManager(empty) as qm:
        qm.define_queue("APP.Q")
        qm.put("APP.Q", Message(body=b"after a round trip"))
        assert qm.get("APP.Q").body == b"after a round trip"


def test_queues_defined_before_indxtype_keep_their_correl_id_index(empty):
    """0008: existing queues become INDXTYPE(CORRELID) and their messages get their key, so
    a get by CorrelId finds what was put before the upgrade; new queues default to NONE."""
    migrations.upgrade(empty, "0007")
    correl = b"C".ljust(24, b"\x00")
    with empty.begin() as conn:  # rows as 0007 held them (today's code cannot write that schema)
        conn.execute(text("INSERT INTO mq_qmgr (name, created_at) VALUES ('QM1', 0)"))
        conn.execute(
            text(
                "INSERT INTO mq_queues (name, max_depth, max_msg_length, depth, created_at, altered_at) "
                "VALUES ('OLD.Q', 10, 100, 1, 0, 0)"
            )
        )
        conn.execute(
            text(
                "INSERT INTO mq_messages (queue, priority, msg_id, correl_id, format, encoding, ccsid,"
                " msg_type, report, reply_to_q, reply_to_qmgr, user_id, persistence, expiry,"
                " put_appl_type, put_appl_name, put_date, put_time, backout_count, put_at, body) VALUES"
                " ('OLD.Q', 0, :m, :c, 'MQSTR   ', 273, 1208, 8, 0, '', '', 'u', 0, -1, 6, 'a',"
                " '20261122', '00000000', 0, 0, :b)"
            ),
            {"m": b"M".ljust(24, b"\x00"), "c": correl, "b": b"before"},
        )
    migrations.upgrade(empty)
    qm = QueueManager(empty)
    assert qm.inquire_queue("OLD.Q").index_type == "correlid"
    assert qm.define_queue("NEW.Q").index_type == "none"
    assert qm.get("OLD.Q", correl_id=correl).body == b"before"


def _staged_put() -> dict[str, Any]:
    return dict.fromkeys(STAGED_PUT_COLUMNS, 0) | {
        "job": "J1",
        "seq": 7,
        "idx": 2,
        "queue": "SUB.Q",
        "expires_at": None,
        "msg_id": b"M" * 24,
        "correl_id": b"C" * 24,
        "format": "MQHRF2",
        "reply_to_q": "",
        "reply_to_qmgr": "QM1",
        "user_id": "u",
        "put_appl_name": "a",
        "put_date": "20261122",
        "put_time": "00000000",
        "body": b"staged before",
        "correl_key": None,
    }


STAGED_PUT_COLUMNS = (
    "job", "seq", "idx", "phase", "asked_priority", "asked_persistence", "queue", "priority", "expires_at",
    "msg_id", "correl_id", "format", "encoding", "ccsid", "msg_type", "report", "reply_to_q",
    "reply_to_qmgr", "user_id", "persistence", "expiry", "put_appl_type", "put_appl_name", "put_date",
    "put_time", "backout_count", "put_at", "body", "correl_key",
)  # fmt: skip


def _staged_puts(engine: Engine) -> tuple[bool, list[Any]]:
    """Whether psb_spark_puts is WITHOUT ROWID (SQLite), and its rows' keys and bodies."""
    puts = Table("psb_spark_puts", MetaData(), autoload_with=engine)
    with engine.connect() as conn:
        rows = [tuple(r) for r in conn.execute(select(puts.c.job, puts.c.seq, puts.c.idx, puts.c.body))]
        if engine.dialect.name != "sqlite":
            return False, rows
        ddl = conn.exec_driver_sql("SELECT sql FROM sqlite_master WHERE name = 'psb_spark_puts'").scalar_one()
        return ddl.rstrip().endswith("WITHOUT ROWID"), rows


def test_staged_puts_were_stored_in_key_order_on_sqlite_and_kept_across_0009(empty):
    """0009 rebuilt SQLite's staged puts WITHOUT ROWID (the old merge read them in key order),
    keeping any row staged before; on PostgreSQL it changed nothing; downgrade undoes it."""
    migrations.upgrade(empty, "0008")
    puts = Table("psb_spark_puts", MetaData(), autoload_with=empty)
    with empty.begin() as conn:
        conn.execute(insert(puts), [_staged_put()])

    assert _staged_puts(empty) == (False, [("J1", 7, 2, b"staged before")])
    migrations.upgrade(empty, "0011")
    assert _staged_puts(empty) == (empty.dialect.name == "sqlite", [("J1", 7, 2, b"staged before")])
    migrations.downgrade(empty, "0008")
    assert _staged_puts(empty) == (False, [("J1", 7, 2, b"staged before")])


def test_0012_drops_the_staging_and_logs_the_partition_markers(empty):
    """Partitions commit their own results from 0012 on: the staging tables go, a run the old
    release left cannot be finished and goes too; downgrade brings the old tables back."""
    migrations.upgrade(empty, "0011")
    puts = Table("psb_spark_puts", MetaData(), autoload_with=empty)
    with empty.begin() as conn:
        conn.execute(insert(puts), [_staged_put()])
        conn.execute(
            insert(runs),
            [{"job": "J1", "stream": "S", "watermark": 1, "partitions": 1, "started_at": 0}],
        )

    migrations.upgrade(empty)

    names = set(inspect(empty).get_table_names())
    assert {"psb_spark_puts", "psb_spark_retained", "psb_spark_deferred"}.isdisjoint(names)
    assert differences(empty) == []
    with empty.connect() as conn:
        assert conn.execute(select(func.count()).select_from(runs)).scalar_one() == 0
        if empty.dialect.name == "postgresql":  # logged now: it stands beside logged deliveries
            persistence = conn.exec_driver_sql(
                "SELECT relpersistence FROM pg_class WHERE relname = 'psb_spark_parts'"
            ).scalar_one()
            assert persistence == "p"
    migrations.downgrade(empty, "0011")
    assert _staged_puts(empty) == (empty.dialect.name == "sqlite", [])
    migrations.upgrade(empty)
    assert differences(empty) == []


def test_claim_turns_are_a_cycling_sequence_on_postgresql_only(empty):
    """0010: the sequence claim turns are drawn from (``queues.sql.take_turn``)."""
    migrations.upgrade(empty)
    if empty.dialect.name == "sqlite":
        with empty.connect() as conn:
            assert sql.take_turn(conn) is None
        return
    with empty.connect() as first, empty.connect() as second:
        first.begin()
        second.begin()
        assert sql.take_turn(first) == 0  # turn 1: nothing before it is running
        assert sql.take_turn(second) == 2  # turn 2 must wait: turn 1's transaction is open
        first.rollback()
        sql.await_turn(second, 2)  # at once now
        second.exec_driver_sql("SELECT setval('mq_claim_turns', 2147483646)")
        assert sql.take_turn(second) == 0
        last = second.exec_driver_sql("SELECT last_value FROM mq_claim_turns").scalar_one()
        assert last == 1  # after the last turn comes the first again
    migrations.downgrade(empty, "0009")
    with empty.connect() as conn:
        assert not conn.exec_driver_sql("SELECT to_regclass('mq_claim_turns')").scalar_one()


def test_0019_keeps_each_outbound_message_in_flight_as_a_run_of_its_own(empty):
    """Sessions keep what they had in flight across 0019, in their order, PUBREC'd ones
    included; downgrade gives the rows back."""
    migrations.upgrade(empty, "0018")
    old = Table("psb_mqtt_outbound", MetaData(), autoload_with=empty)
    key = mqtt.session_key("phone")
    rows = [
        {
            "packet_id": 9,
            "seq": 4,
            "topic": "b/ü",
            "payload": b"second",
            "qos": 2,
            "retain": 0,
            "released": 1,
        },
        {"packet_id": 3, "seq": 2, "topic": "a", "payload": b"first", "qos": 1, "retain": 1, "released": 0},
    ]
    with empty.begin() as conn:
        conn.execute(insert(old), [{"session_key": key, **row} for row in rows])
    migrations.upgrade(empty, "0019")
    expected = [
        mqtt.OutboundRow(3, "a", b"first", 1, True, False),
        mqtt.OutboundRow(9, "b/ü", b"second", 2, False, True),
    ]
    with empty.begin() as conn:
        assert mqtt.unacknowledged(conn, "phone") == expected
        assert max(run.seq for run in mqtt.load_runs(conn, "phone")) == 4
    migrations.downgrade(empty, "0018")
    with empty.begin() as conn:
        back = conn.execute(select(old.c.packet_id, old.c.topic, old.c.released).order_by(old.c.seq)).all()
    assert [tuple(row) for row in back] == [(3, "a", 0), (9, "b/ü", 1)]


def test_outbound_runs_are_not_compressed_on_postgresql(postgres: PostgresDatabases) -> None:
    """PostgreSQL would compress every run of payloads it stores (EXTENDED); compressing cost
    more than the rest of a batch's writes, so the column is stored EXTERNAL (SQLite has no
    such setting: it never compresses)."""
    url = postgres.create()
    engine = make_engine(url)
    try:
        migrations.upgrade(engine)
        with engine.connect() as conn:
            storage = conn.execute(
                text(
                    "SELECT attstorage FROM pg_attribute"
                    " WHERE attrelid = 'psb_mqtt_outbound_runs'::regclass AND attname = 'messages'"
                )
            ).scalar_one()
    finally:
        engine.dispose()
        postgres.drop(url)
    assert storage == "e"
