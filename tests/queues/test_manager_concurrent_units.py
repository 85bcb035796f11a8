"""Two units of work open at once on one queue: only PostgreSQL allows it.

SQLite runs one writing unit of work at a time (``BEGIN IMMEDIATE``), so the
same refusals are shown there in ``test_manager.py`` by changing the depth
counter on the unit's own connection; here another unit of work really does it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import migrations
from queues import Message, MQError, NoMessageAvailable, QueueManager, make_engine
from tests.conftest import PostgresDatabases


@pytest.fixture
def qm(postgres: PostgresDatabases) -> Iterator[QueueManager]:
    url = postgres.create()
    engine = make_engine(url)
    migrations.upgrade(engine)
    QueueManager.create(engine, "QM1")
    manager = QueueManager(engine, appl_name="pytest", user_id="tester")
    yield manager
    manager.close()
    postgres.drop(url)


def bodies(qm: QueueManager, queue: str) -> list[bytes]:
    got = []
    while True:
        try:
            got.append(qm.get(queue).body)
        except NoMessageAvailable:
            return got


def test_commit_is_refused_when_another_unit_of_work_filled_the_queue(qm: QueueManager) -> None:
    qm.define_queue("APP.Q", max_depth=2)
    with pytest.raises(MQError) as caught, qm.unit_of_work() as uow:
        uow.put("APP.Q", Message(body=b"m1"))
        qm.put_many([("APP.Q", Message(body=b"m2")), ("APP.Q", Message(body=b"m3"))])
    assert caught.value.reason == 2053
    assert bodies(qm, "APP.Q") == [b"m2", b"m3"]


def test_a_queue_deleted_before_commit_refuses_the_put(qm: QueueManager) -> None:
    qm.define_queue("APP.Q")
    with pytest.raises(MQError) as caught, qm.unit_of_work() as uow:
        uow.put("APP.Q", Message(body=b"m1"))
        qm.delete_queue("APP.Q")
    assert caught.value.reason == 2053
    with qm.reading() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM mq_messages").scalar_one() == 0
