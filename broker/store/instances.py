"""Each broker process's statistics, written by its heartbeat and read by any API
process (``/status``, ``/metrics``), so an API serves figures of routers elsewhere."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection, delete, insert, select

from broker.store.schema import instances
from queues.ids import now_ms


def write_instance(
    conn: Connection, instance: str, role: str, started_at: int, stats: dict[str, Any]
) -> None:
    """Publish one process's statistics, for status pages served by any process."""
    conn.execute(delete(instances).where(instances.c.instance == instance))
    conn.execute(
        insert(instances).values(
            instance=instance,
            role=role,
            started_at=started_at,
            heartbeat_at=now_ms(),
            stats=json.dumps(stats),
        )
    )


def list_instances(conn: Connection, *, alive_within_ms: int | None = None) -> list[dict[str, Any]]:
    stmt = select(instances).order_by(instances.c.started_at)
    if alive_within_ms is not None:
        stmt = stmt.where(instances.c.heartbeat_at >= now_ms() - alive_within_ms)
    return [
        {
            "instance": row.instance,
            "role": row.role,
            "started_at": row.started_at,
            "heartbeat_at": row.heartbeat_at,
            "stats": json.loads(row.stats),
        }
        for row in conn.execute(stmt)
    ]
