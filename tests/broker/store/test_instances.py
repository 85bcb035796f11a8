"""broker.store.instances: each process's statistics, for any API process to report."""

from __future__ import annotations

from sqlalchemy import Engine, update

from broker import store
from tests.broker.store.records import (
    NOW,
)


def test_instances(engine: Engine) -> None:
    with engine.begin() as conn:
        store.write_instance(conn, "host:1:1", "router", NOW, {"batches": 1})
        store.write_instance(conn, "host:1:1", "router", NOW, {"batches": 2})
        store.write_instance(conn, "host:2:2", "api", NOW + 1, {})
        table = store.schema.instances
        conn.execute(update(table).where(table.c.instance == "host:2:2").values(heartbeat_at=NOW))
    with engine.connect() as conn:
        everything = store.list_instances(conn)
        alive = store.list_instances(conn, alive_within_ms=60_000)
    assert [(i["instance"], i["role"], i["stats"]) for i in everything] == [
        ("host:1:1", "router", {"batches": 2}),
        ("host:2:2", "api", {}),
    ]
    assert [i["instance"] for i in alive] == ["host:1:1"]
