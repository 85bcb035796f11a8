"""Making a database ready for the broker.

``broker serve`` (and ``broker db upgrade``) bring the schema to head, name the
queue manager and define the system queues with depths that suit a broker
rather than MQ's 5,000-message default. Every step is idempotent.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Engine

import migrations
from broker.core.system import CONTROL_QUEUE, DEFAULT_STREAM, INTER_BROKER_QUEUE, SYSTEM_QUEUE_DESCRIPTIONS
from queues import QueueManager
from queues.definition import MAX_MAX_DEPTH
from queues.errors import MQError
from queues.names import DEAD_LETTER_QUEUE
from queues.reasons import Reason


def prepare_database(engine: Engine, qmgr_name: str) -> None:
    """Migrate to head and name the queue manager."""
    migrations.upgrade(engine)
    QueueManager.create(engine, qmgr_name)


def ensure_system_queues(qm: QueueManager, stream_queues: Iterable[str] = (DEFAULT_STREAM,)) -> list[str]:
    """Define any missing broker queue; returns the names it defined."""
    wanted = dict.fromkeys([*stream_queues, CONTROL_QUEUE, INTER_BROKER_QUEUE, DEAD_LETTER_QUEUE])
    created = []
    for name in wanted:
        try:
            qm.define_queue(
                name,
                max_depth=MAX_MAX_DEPTH,
                description=SYSTEM_QUEUE_DESCRIPTIONS.get(name, "Publication stream"),
                def_persistence=1,
            )
        except MQError as exc:
            if exc.reason != Reason.MQRCCF_OBJECT_ALREADY_EXISTS:
                raise
        else:
            created.append(name)
    return created
