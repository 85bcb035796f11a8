"""The queue manager's behaviour, on SQLite and PostgreSQL (the ``qm`` fixture runs every test on both).

``engine`` is overridden to share one migrated database per dialect (see ``tests.queues.databases``).
After every test the depth counter of every queue must equal the rows it holds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
from sqlalchemy import Engine, text

from queues import DEAD_LETTER_QUEUE, Message, QueueManager, dlh, make_engine, sql
from queues.definition import QueueDefinition
from queues.errors import MQError, NoMessageAvailable, UnknownObject
from queues.ids import now_ms
from tests.conftest import DIALECTS
from tests.queues import databases
from tests.statements import exchanges

FOUR_MIB = 4 * 1024 * 1024
NUL = b"\x00"


def msg(n: int, **fields: object) -> Message:
    return Message(body=f"m{n}".encode(), **fields)  # type: ignore[arg-type]


def rows_on(engine: Engine, queue: str) -> int:
    """The rows really there (``SELECT count(*)``), to hold the depth counter against."""
    with engine.connect() as conn:
        return sql.count_messages(conn, queue)


def bodies(qm: QueueManager, queue: str) -> list[bytes]:
    return [b.message.body for b in qm.browse(queue, limit=10_000)]


def drain(qm: QueueManager, queue: str) -> list[Message]:
    got = []
    while True:
        try:
            got.append(qm.get(queue))
        except NoMessageAvailable:
            return got


def reason_of(excinfo: pytest.ExceptionInfo[MQError]) -> int:
    return excinfo.value.reason


@pytest.fixture(scope="module", params=DIALECTS)
def shared(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    yield from databases.shared_engine(request, tmp_path_factory)


@pytest.fixture
def engine(shared: Engine) -> Engine:
    return databases.emptied(shared)


@pytest.fixture(autouse=True)
def depths_match_rows(qm: QueueManager, engine: Engine) -> Iterator[None]:
    yield
    for queue in qm.list_queues():
        assert queue.depth == rows_on(engine, queue.name), queue.name


# -- the queue manager itself ------------------------------------------------------------------


def test_queue_manager_knows_its_name_and_has_a_dead_letter_queue(qm):
    assert qm.name == "QM1"
    assert [q.name for q in qm.list_queues()] == [DEAD_LETTER_QUEUE]
    assert qm.inquire_queue(DEAD_LETTER_QUEUE).max_depth == 999_999_999


def test_create_is_idempotent_and_refuses_another_name(qm, engine):
    QueueManager.create(engine, "QM1")
    with pytest.raises(MQError) as caught:
        QueueManager.create(engine, "QM2")
    assert reason_of(caught) == 2058
    with pytest.raises(MQError) as caught:
        QueueManager.create(engine, "BAD NAME")
    assert reason_of(caught) == 2058


def test_a_database_without_a_queue_manager_is_2059(qm, tmp_path):
    unmigrated = make_engine(f"sqlite:///{tmp_path / 'empty.db'}")
    with pytest.raises(MQError) as caught:
        QueueManager(unmigrated)
    assert reason_of(caught) == 2059
    assert caught.value.reason_name == "MQRC_Q_MGR_NOT_AVAILABLE"
    unmigrated.dispose()
    with qm.engine.begin() as conn:
        conn.execute(text("DELETE FROM mq_qmgr"))
    with pytest.raises(MQError) as caught:
        QueueManager(qm.engine)
    assert reason_of(caught) == 2059
    QueueManager.create(qm.engine, "QM1")


# -- define, alter, list, inquire, delete, purge -----------------------------------------------


def test_define_gives_mqs_defaults(qm):
    before = now_ms()
    q = qm.define_queue("APP.Q")
    assert replace(q, created_at=0, altered_at=0) == QueueDefinition(
        name="APP.Q",
        max_depth=5000,
        max_msg_length=4 * 1024 * 1024,
        backout_threshold=0,
        backout_requeue_q="",
        def_priority=0,
        def_persistence=0,
        put_enabled=True,
        get_enabled=True,
        usage="normal",
        definition_type="predefined",
        depth=0,
    )
    assert before <= q.created_at == q.altered_at <= now_ms()
    assert qm.inquire_queue("APP.Q") == q


def test_define_with_attributes(qm):
    q = qm.define_queue(
        "APP.Q",
        max_depth=10,
        max_msg_length=100,
        backout_threshold=3,
        backout_requeue_q="APP.BO",
        def_priority=4,
        def_persistence=1,
        description="orders",
        put_enabled=False,
        get_enabled=False,
        usage="xmitq",
        definition_type="permdyn",
    )
    assert (q.max_depth, q.max_msg_length, q.backout_threshold, q.backout_requeue_q) == (10, 100, 3, "APP.BO")
    assert (q.def_priority, q.def_persistence, q.description) == (4, 1, "orders")
    assert (q.put_enabled, q.get_enabled, q.usage, q.definition_type) == (False, False, "xmitq", "permdyn")


def test_define_twice_is_4001_and_keeps_the_first_definition(qm):
    qm.define_queue("APP.Q", max_depth=10)
    with pytest.raises(MQError) as caught:
        qm.define_queue("APP.Q", max_depth=20)
    assert reason_of(caught) == 4001
    assert caught.value.reason_name == "MQRCCF_OBJECT_ALREADY_EXISTS"
    assert qm.inquire_queue("APP.Q").max_depth == 10


def test_define_replace_changes_attributes_and_keeps_messages(qm):
    first = qm.define_queue("APP.Q", max_depth=10, description="old")
    qm.put("APP.Q", msg(1))
    second = qm.define_queue("APP.Q", replace_existing=True, max_depth=20)
    assert (second.max_depth, second.description, second.depth) == (20, "old", 1)
    assert second.created_at == first.created_at
    assert second.altered_at >= first.altered_at
    assert bodies(qm, "APP.Q") == [b"m1"]


def test_define_replace_of_a_new_queue_defines_it(qm):
    assert qm.define_queue("APP.Q", replace_existing=True, max_depth=7).max_depth == 7


def test_alter_changes_only_what_it_is_given(qm):
    qm.define_queue("APP.Q", max_depth=10, description="orders")
    altered = qm.alter_queue("APP.Q", def_priority=5, put_enabled=False)
    assert (altered.max_depth, altered.description) == (10, "orders")
    assert (altered.def_priority, altered.put_enabled) == (5, False)
    assert qm.inquire_queue("APP.Q") == altered


def test_alter_unknown_queue_is_2085(qm):
    with pytest.raises(UnknownObject) as caught:
        qm.alter_queue("NOPE", max_depth=1)
    assert reason_of(caught) == 2085
    assert caught.value.reason_name == "MQRC_UNKNOWN_OBJECT_NAME"


def test_bad_attributes_are_4005_and_change_nothing(qm):
    with pytest.raises(MQError) as caught:
        qm.define_queue("APP.Q", max_depth=-1)
    assert reason_of(caught) == 4005
    with pytest.raises(UnknownObject):
        qm.inquire_queue("APP.Q")
    qm.define_queue("APP.Q")
    with pytest.raises(MQError) as caught:
        qm.alter_queue("APP.Q", max_depth=5, def_priority=10)
    assert reason_of(caught) == 4005
    assert qm.inquire_queue("APP.Q").max_depth == 5000


@pytest.mark.parametrize("name", ["", "BAD NAME", "Q-1", "Q" * 49, "Qé"])
def test_bad_queue_names_are_2152(qm, name):
    with pytest.raises(MQError) as caught:
        qm.define_queue(name)
    assert reason_of(caught) == 2152
    assert caught.value.reason_name == "MQRC_OBJECT_NAME_ERROR"


def test_list_matches_patterns_and_sorts_by_name(qm):
    for name in ("APP.B", "APP.A", "APP.AB", "OTHER"):
        qm.define_queue(name)
    assert [q.name for q in qm.list_queues()] == ["APP.A", "APP.AB", "APP.B", "OTHER", DEAD_LETTER_QUEUE]
    assert [q.name for q in qm.list_queues("APP.*")] == ["APP.A", "APP.AB", "APP.B"]
    assert [q.name for q in qm.list_queues("APP.?")] == ["APP.A", "APP.B"]
    assert [q.name for q in qm.list_queues("*.A*")] == ["APP.A", "APP.AB"]
    assert qm.list_queues("NOTHING*") == []


def test_list_patterns_match_in_sql_exactly_as_mq_names_are_written(qm):
    for name in ("APP_X", "APPAX", "A%B", "AXB", "app.low", "APP.LOW"):
        qm.define_queue(name)
    assert [q.name for q in qm.list_queues("APP_*")] == ["APP_X"]  # _ is a character, not a wildcard
    assert [q.name for q in qm.list_queues("A%B")] == ["A%B"]
    assert [q.name for q in qm.list_queues("app.*")] == ["app.low"]  # case-sensitive on both
    assert qm.count_queues("APP*") == 3
    assert qm.count_queues() == 7


def test_list_pages_are_cut_in_order(qm):
    for n in range(7):
        qm.define_queue(f"PAGE.{n}")
    assert [q.name for q in qm.list_queues("PAGE.*", offset=2, limit=3)] == ["PAGE.2", "PAGE.3", "PAGE.4"]
    assert [q.name for q in qm.list_queues("PAGE.*", offset=6, limit=3)] == ["PAGE.6"]
    assert qm.list_queues("PAGE.*", offset=7, limit=3) == []


def test_queue_pages_follow_each_other_by_name_and_match_patterns(qm):
    for name in ("APP.B", "APP.A", "APP.AB", "APP_X", "OTHER", "A%B"):
        qm.define_queue(name)
    every = [q.name for q in qm.list_queues()]
    paged: list[str] = []
    after = ""
    while page := qm.queue_page(after=after, limit=2):
        paged += [h.definition.name for h in page]
        after = page[-1].definition.name
    assert paged == every
    assert [h.definition.name for h in qm.queue_page("APP.*", limit=10)] == ["APP.A", "APP.AB", "APP.B"]
    assert [h.definition.name for h in qm.queue_page("APP.*", after="APP.A", limit=1)] == ["APP.AB"]
    assert [h.definition.name for h in qm.queue_page("*.A?", limit=10)] == ["APP.AB"]
    assert [h.definition.name for h in qm.queue_page("A%*", limit=10)] == ["A%B"]  # % is literal
    assert qm.queue_page("NOTHING*") == []
    backwards: list[str] = []
    after = ""
    while page := qm.queue_page(after=after, limit=2, descending=True):
        backwards += [h.definition.name for h in page]
        after = page[-1].definition.name
    assert backwards == every[::-1]
    assert [h.definition.name for h in qm.queue_page("APP.*", limit=2, descending=True)] == [
        "APP.B",
        "APP.AB",
    ]
    assert [h.definition.name for h in qm.queue_page("APP.*", after="APP.AB", descending=True)] == ["APP.A"]


def test_queue_page_gives_the_put_time_of_the_message_a_get_takes_next(qm):
    qm.define_queue("HEAD.Q")
    qm.define_queue("HEAD.EMPTY")
    before = now_ms()
    qm.put("HEAD.Q", msg(1, priority=0))
    time.sleep(0.01)
    qm.put("HEAD.Q", msg(2, priority=9))
    heads = {h.definition.name: h for h in qm.queue_page("HEAD.*")}
    assert heads["HEAD.EMPTY"].head_put_at is None
    second = qm.browse("HEAD.Q")[0]
    assert second.message.body == b"m2"
    assert heads["HEAD.Q"].head_put_at == second.put_at > before
    assert heads["HEAD.Q"].definition.depth == 2


def test_deepest_queues_come_first_and_empty_ones_never(qm):
    qm.define_queue("DEEP.EMPTY")
    for name, depth in (("DEEP.ONE", 1), ("DEEP.THREE", 3), ("DEEP.TWO", 2)):
        qm.define_queue(name)
        for n in range(depth):
            qm.put(name, msg(n))
    assert [q.name for q in qm.deepest_queues(2)] == ["DEEP.THREE", "DEEP.TWO"]
    assert [q.depth for q in qm.deepest_queues(3)] == [3, 2, 1]
    assert "DEEP.EMPTY" not in [q.name for q in qm.deepest_queues(100)]


def test_a_queue_ensured_in_a_unit_of_work_commits_with_it_and_an_existing_one_is_left_alone(qm):
    qm.define_queue("MADE.BEFORE", max_depth=7)
    with pytest.raises(RuntimeError), qm.unit_of_work() as uow:
        uow.ensure_queue("ON.DEMAND", max_depth=9)
        raise RuntimeError("backed out")
    assert qm.inquire_queues(["ON.DEMAND"]) == {"ON.DEMAND": None}
    with qm.unit_of_work() as uow:
        uow.ensure_queue("ON.DEMAND", max_depth=9, description="made on demand")
        uow.ensure_queue("MADE.BEFORE", max_depth=9)
        uow.put("ON.DEMAND", msg(1))
        assert uow.depth("ON.DEMAND") == 1
    assert (qm.inquire_queue("ON.DEMAND").max_depth, qm.depth("ON.DEMAND")) == (9, 1)
    assert qm.inquire_queue("ON.DEMAND").description == "made on demand"
    assert qm.inquire_queue("MADE.BEFORE").max_depth == 7


def test_nonempty_under_a_prefix_names_only_the_queues_holding_messages(qm):
    for name in ("SESS.A", "SESS.B", "SESS.C", "SESSX", "OTHER.A"):
        qm.define_queue(name)
    for name in ("SESS.A", "SESS.C", "SESSX", "OTHER.A"):
        qm.put(name, msg(1))
    qm.get("SESS.C")
    assert qm.nonempty_under("SESS.") == ["SESS.A"]  # not SESSX: "." is part of the prefix


def test_list_and_inquire_show_depth(qm):
    qm.define_queue("APP.Q")
    qm.put_many([("APP.Q", msg(i)) for i in range(3)])
    assert qm.inquire_queue("APP.Q").depth == 3
    assert qm.depth("APP.Q") == 3
    assert [q.depth for q in qm.list_queues("APP.Q")] == [3]


def test_inquire_unknown_is_2085(qm):
    with pytest.raises(UnknownObject):
        qm.inquire_queue("NOPE")
    with pytest.raises(UnknownObject):
        qm.depth("NOPE")


def test_delete_empty_queue(qm):
    qm.define_queue("APP.Q")
    assert qm.delete_queue("APP.Q") == 0
    with pytest.raises(UnknownObject):
        qm.inquire_queue("APP.Q")


def test_delete_non_empty_queue_is_2055_and_keeps_everything(qm):
    qm.define_queue("APP.Q")
    qm.put("APP.Q", msg(1))
    with pytest.raises(MQError) as caught:
        qm.delete_queue("APP.Q")
    assert reason_of(caught) == 2055
    assert caught.value.reason_name == "MQRC_Q_NOT_EMPTY"
    assert bodies(qm, "APP.Q") == [b"m1"]


def test_delete_with_purge_removes_messages_and_queue(qm, engine):
    qm.define_queue("APP.Q")
    qm.define_queue("OTHER")
    qm.put_many([("APP.Q", msg(i)) for i in range(4)] + [("OTHER", msg(9))])
    assert qm.delete_queue("APP.Q", purge=True) == 4
    assert rows_on(engine, "APP.Q") == 0
    assert [q.name for q in qm.list_queues("APP.*")] == []
    assert bodies(qm, "OTHER") == [b"m9"]


def test_a_queue_deleted_in_a_unit_of_work_goes_with_it_and_its_own_puts_and_gets(qm, engine):
    qm.define_queue("ON.DEMAND")
    qm.define_queue("OTHER")
    qm.put_many([("ON.DEMAND", msg(1)), ("ON.DEMAND", msg(2)), ("OTHER", msg(9))])
    with pytest.raises(RuntimeError), qm.unit_of_work() as uow:
        uow.delete_queue("ON.DEMAND")
        raise RuntimeError("backed out")
    assert qm.depth("ON.DEMAND") == 2
    with qm.unit_of_work() as uow:
        uow.put("ON.DEMAND", msg(3))
        assert [m.body for m in uow.get_batch("ON.DEMAND", 1)] == [b"m1"]
        uow.put("OTHER", msg(8))
        assert uow.delete_queue("ON.DEMAND") == 2  # m2 and m3: m1 was gotten
        with pytest.raises(UnknownObject):
            uow.depth("ON.DEMAND")
        with pytest.raises(UnknownObject):
            uow.delete_queue("ON.DEMAND")
    assert qm.inquire_queues(["ON.DEMAND"]) == {"ON.DEMAND": None}
    assert rows_on(engine, "ON.DEMAND") == 0
    assert bodies(qm, "OTHER") == [b"m9", b"m8"]


def test_delete_unknown_is_2085(qm):
    with pytest.raises(UnknownObject):
        qm.delete_queue("NOPE")
    with pytest.raises(UnknownObject):
        qm.delete_queue("NOPE", purge=True)


def test_purge_returns_count_and_empties_the_queue(qm):
    qm.define_queue("APP.Q")
    qm.define_queue("OTHER")
    qm.put_many([("APP.Q", msg(i)) for i in range(5)] + [("OTHER", msg(9))])
    assert qm.purge_queue("APP.Q") == 5
    assert qm.depth("APP.Q") == 0
    assert qm.purge_queue("APP.Q") == 0
    assert qm.depth("OTHER") == 1
    qm.put("APP.Q", msg(6))
    assert bodies(qm, "APP.Q") == [b"m6"]


def test_purge_unknown_is_2085(qm):
    with pytest.raises(UnknownObject):
        qm.purge_queue("NOPE")


# -- put and get -------------------------------------------------------------------------------


def test_every_mqmd_field_and_the_body_round_trip(qm):
    qm.define_queue("APP.Q")
    original = Message(
        body=b"\x00binary\x00\xff\xfe data with NULs\x00",
        msg_id=bytes(range(1, 25)),
        correl_id=bytes(range(100, 124)),
        format="MQHRF2  ",
        encoding=273,
        ccsid=819,
        msg_type=1,
        report=0x40 | 0x80,
        reply_to_q="APP.REPLY",
        reply_to_qmgr="QM2",
        user_id="alice",
        persistence=1,
        priority=7,
        expiry=-1,
        put_appl_type=26,
        put_appl_name="amqsput",
        put_date="20240229",
        put_time="23595999",
    )
    assert qm.put("APP.Q", original) == original.msg_id
    assert qm.get("APP.Q") == original


def test_blank_context_is_filled_by_the_queue_manager(qm):
    qm.define_queue("APP.Q")
    before = time.gmtime()
    qm.put("APP.Q", Message(body=b"x"))
    got = qm.get("APP.Q")
    assert (got.user_id, got.put_appl_name) == ("tester", "pytest")
    assert got.put_date in {time.strftime("%Y%m%d", before), time.strftime("%Y%m%d", time.gmtime())}
    assert len(got.put_time) == 8 and got.put_time.isdigit()
    assert got.format == "        "


@pytest.mark.parametrize("size", [0, 1, FOUR_MIB])
def test_bodies_up_to_4_mib_are_stored_byte_exact(qm, size):
    qm.define_queue("APP.Q")
    body = (NUL * 3 + bytes(range(256)) * (size // 256 + 1))[:size]
    qm.put("APP.Q", Message(body=body))
    assert qm.get("APP.Q").body == body


def test_one_byte_over_max_msg_length_is_2030(qm):
    qm.define_queue("APP.Q")
    with pytest.raises(MQError) as caught:
        qm.put("APP.Q", Message(body=NUL * (FOUR_MIB + 1)))
    assert reason_of(caught) == 2030
    assert caught.value.reason_name == "MQRC_MSG_TOO_BIG_FOR_Q"
    qm.define_queue("SMALL", max_msg_length=10)
    qm.put("SMALL", Message(body=b"x" * 10))
    with pytest.raises(MQError) as caught:
        qm.put("SMALL", Message(body=b"x" * 11))
    assert reason_of(caught) == 2030
    assert qm.depth("SMALL") == 1


def test_msg_id_is_generated_when_none_and_kept_when_given(qm):
    qm.define_queue("APP.Q")
    generated = [qm.put("APP.Q", Message()) for _ in range(2)]
    given = qm.put("APP.Q", Message(msg_id=b"MINE"))
    assert all(len(i) == 24 and i.startswith(b"AMQ QM1         ") for i in generated)
    assert generated[0] != generated[1]
    assert given == b"MINE" + NUL * 20
    assert [m.msg_id for m in drain(qm, "APP.Q")] == [*generated, given]


@pytest.mark.parametrize("none", [b"", NUL * 5, NUL * 24])
def test_a_msg_id_that_pads_to_none_is_generated(qm, none):
    qm.define_queue("APP.Q")
    msg_id = qm.put("APP.Q", Message(msg_id=none))
    assert msg_id.startswith(b"AMQ QM1")
    assert qm.get("APP.Q").msg_id == msg_id


def test_short_ids_are_nul_padded(qm):
    qm.define_queue("APP.Q")
    qm.put("APP.Q", Message(correl_id=b"C1"))
    assert qm.get("APP.Q").correl_id == b"C1" + NUL * 22


def test_priority_and_persistence_as_queue_default_are_resolved(qm):
    qm.define_queue("APP.Q", def_priority=4, def_persistence=1)
    qm.put("APP.Q", Message(priority=-1, persistence=2))
    qm.put("APP.Q", Message(priority=0, persistence=0))
    resolved, explicit = drain(qm, "APP.Q")
    assert (resolved.priority, resolved.persistence) == (4, 1)
    assert (explicit.priority, explicit.persistence) == (0, 0)


PRIORITIES = [0, 5, 9, 5, 0, 9, 1, 5]
EXPECTED_ORDER = [b"m2", b"m5", b"m1", b"m3", b"m7", b"m6", b"m0", b"m4"]


def test_priority_then_fifo_across_puts(qm):
    qm.define_queue("APP.Q")
    for i, priority in enumerate(PRIORITIES):
        qm.put("APP.Q", msg(i, priority=priority))
    assert [m.body for m in drain(qm, "APP.Q")] == EXPECTED_ORDER


def test_puts_queued_behind_a_commit_share_the_next_and_fail_alone(qm):
    qm.define_queue("APP.Q")
    qm.define_queue("FULL.Q", max_depth=1)
    qm.put("FULL.Q", msg(0))
    commit, groups = qm._puts._commit, []
    entered, release = threading.Event(), threading.Event()

    def held(items):
        groups.append([queue for queue, _ in items])
        entered.set()
        assert release.wait(10)
        return commit(items)

    qm._puts._commit = held
    first = threading.Thread(target=qm.put, args=("APP.Q", msg(1)))
    first.start()
    assert entered.wait(10)
    outcomes = {}

    def put(queue, n):
        try:
            outcomes[queue] = qm.put(queue, msg(n))
        except MQError as exc:
            outcomes[queue] = exc.reason

    others = [
        threading.Thread(target=put, args=(q, n)) for n, q in enumerate(("APP.Q", "FULL.Q", "NO.SUCH.Q"), 2)
    ]
    for thread in others:
        thread.start()
    while len(qm._puts._queued) < 3:
        time.sleep(0.005)
    release.set()
    for thread in (first, *others):
        thread.join(10)
    assert len(groups) == 2 and sorted(groups[1]) == ["APP.Q", "FULL.Q", "NO.SUCH.Q"]
    assert outcomes["FULL.Q"] == 2053 and outcomes["NO.SUCH.Q"] == 2085
    assert [b.message.msg_id for b in qm.browse("APP.Q", limit=10)][1:] == [outcomes["APP.Q"]]
    assert bodies(qm, "APP.Q") == [b"m1", b"m2"]
    assert bodies(qm, "FULL.Q") == [b"m0"]


def test_priority_then_fifo_within_one_put_many_and_get_batch(qm):
    qm.define_queue("APP.Q")
    qm.put_many([("APP.Q", msg(i, priority=p)) for i, p in enumerate(PRIORITIES)])
    with qm.unit_of_work() as uow:
        first = uow.get_batch("APP.Q", 3)
        rest = uow.get_batch("APP.Q", 100)
    assert [m.body for m in first] == EXPECTED_ORDER[:3]
    assert [m.body for m in rest] == EXPECTED_ORDER[3:]


def test_a_bulk_put_keeps_every_descriptor_field_and_byte(qm):
    """Enough messages for PostgreSQL's binary COPY path: every field comes back as put,
    whatever the bytes, the extremes of each integer column and the unset expiry."""
    qm.define_queue("APP.Q")
    every_byte = bytes(range(256)) * 3
    sent = [
        Message(
            body=every_byte[i:] + NUL * i,
            msg_id=bytes([i + 1]) * 24,
            correl_id=bytes([255 - i]) * 24,
            format="MQSTR",
            encoding=2**31 - 1 if i % 2 else 273,
            ccsid=1208,
            msg_type=8,
            report=-(2**31) if i == 3 else 0,
            reply_to_q="REPLY.Q",
            reply_to_qmgr="QM2",
            user_id="app",
            persistence=i % 2,
            priority=9 - i % 10,
            expiry=-1 if i % 3 else 2**31 - 1,
            put_appl_name="bulk",
        )
        for i in range(25)
    ]
    qm.put_many([("APP.Q", m) for m in sent])
    got = {m.msg_id: m for m in drain(qm, "APP.Q")}
    assert len(got) == len(sent)
    for m in sent:
        back = got[m.msg_id]
        assert back.body == m.body
        assert back.format == "MQSTR   "
        assert (back.correl_id, back.encoding, back.report, back.persistence, back.priority) == (
            m.correl_id,
            m.encoding,
            m.report,
            m.persistence,
            m.priority,
        )
        assert back.expiry == -1 if m.expiry == -1 else 0 < back.expiry <= m.expiry
        assert (back.reply_to_q, back.reply_to_qmgr, back.user_id, back.put_appl_name) == (
            "REPLY.Q",
            "QM2",
            "app",
            "bulk",
        )


def test_get_by_msg_id(qm):
    qm.define_queue("APP.Q")
    ids = [qm.put("APP.Q", msg(i)) for i in range(3)]
    assert qm.get("APP.Q", msg_id=ids[1]).body == b"m1"
    with pytest.raises(NoMessageAvailable):
        qm.get("APP.Q", msg_id=ids[1])
    assert bodies(qm, "APP.Q") == [b"m0", b"m2"]


@pytest.mark.parametrize("index_type", ["none", "correlid"])
def test_get_by_correl_id_in_order(qm, index_type):
    qm.define_queue("APP.Q", index_type=index_type)
    for i, correl in enumerate([b"A", b"B", b"A"]):
        qm.put("APP.Q", msg(i, correl_id=correl))
    assert qm.get("APP.Q", correl_id=b"A").body == b"m0"
    assert qm.get("APP.Q", correl_id=b"A" + NUL * 23).body == b"m2"
    with pytest.raises(NoMessageAvailable):
        qm.get("APP.Q", correl_id=b"A")
    assert bodies(qm, "APP.Q") == [b"m1"]


def keyed(qm: QueueManager, queue: str) -> list[bytes | None]:
    """The CorrelId index keys of ``queue``'s messages, in get order."""
    with qm.reading() as conn:
        query = text("SELECT correl_key FROM mq_messages WHERE queue = :q ORDER BY id")
        return [None if key is None else bytes(key) for (key,) in conn.execute(query, {"q": queue})]


def test_only_a_queue_indexed_by_correl_id_puts_its_messages_in_that_index(qm):
    qm.define_queue("PLAIN.Q")
    qm.define_queue("REPLY.Q", index_type="correlid")
    qm.put_many([("PLAIN.Q", msg(0, correl_id=b"A")), ("REPLY.Q", msg(1, correl_id=b"A"))])
    assert (keyed(qm, "PLAIN.Q"), keyed(qm, "REPLY.Q")) == ([None], [b"A" + NUL * 23])


def test_altering_the_index_type_reindexes_the_messages_already_there(qm):
    qm.define_queue("APP.Q")
    for i, correl in enumerate([b"A", b"B"]):
        qm.put("APP.Q", msg(i, correl_id=correl))
    assert qm.alter_queue("APP.Q", index_type="correlid").index_type == "correlid"
    assert keyed(qm, "APP.Q") == [b"A" + NUL * 23, b"B" + NUL * 23]
    assert qm.get("APP.Q", correl_id=b"B").body == b"m1"
    qm.alter_queue("APP.Q", index_type="none")
    assert keyed(qm, "APP.Q") == [None]
    assert qm.get("APP.Q", correl_id=b"A").body == b"m0"


def test_an_unknown_index_type_is_4005(qm):
    with pytest.raises(MQError) as refused:
        qm.define_queue("APP.Q", index_type="msgid")
    assert refused.value.reason == 4005
    assert "index_type='msgid' is not valid: use none or correlid" in refused.value.detail


def test_a_put_written_for_the_old_index_type_is_refused_at_commit(qm):
    """A unit of work that read the definition before INDXTYPE changed must not commit rows
    keyed the old way (a get by CorrelId would miss them): it fails, and a retry succeeds."""
    qm.define_queue("APP.Q")
    with pytest.raises(MQError) as refused, qm.unit_of_work() as uow:
        uow.put("APP.Q", msg(0, correl_id=b"A"))
        # As another process's ALTER would have done on PostgreSQL, where nothing stops it
        # between this unit of work's read of the definition and its commit:
        sql.update_queue(uow.connection, "APP.Q", {"index_type": "correlid"})
    assert refused.value.reason == 2053
    assert "re-indexed" in refused.value.detail
    qm.put("APP.Q", msg(0, correl_id=b"A"))
    assert qm.get("APP.Q", correl_id=b"A").body == b"m0"


def test_depth_counters_of_several_queues_change_together_or_not_at_all(qm):
    """One statement changes every queue's counter on PostgreSQL; a queue that cannot grow
    (here: made full after the unit of work looked) is named, and nothing commits."""
    for name in ("A.Q", "B.Q", "C.Q"):
        qm.define_queue(name)
    qm.put_many([("A.Q", msg(0)), ("A.Q", msg(1))])
    with qm.unit_of_work() as uow:
        uow.get("A.Q")
        uow.put_many([("B.Q", msg(2)), ("C.Q", msg(3)), ("C.Q", msg(4))])
    assert [qm.depth(name) for name in ("A.Q", "B.Q", "C.Q")] == [1, 1, 2]
    with pytest.raises(MQError) as refused, qm.unit_of_work() as uow:
        uow.get("A.Q")
        uow.put_many([("B.Q", msg(5)), ("C.Q", msg(6))])
        sql.update_queue(uow.connection, "C.Q", {"max_depth": 2})  # another process's ALTER
    assert refused.value.reason == 2053
    assert refused.value.detail.endswith(": C.Q")
    assert [qm.depth(name) for name in ("A.Q", "B.Q", "C.Q")] == [1, 1, 2]
    assert [m.body for m in drain(qm, "A.Q")] == [b"m1"]


def counts(qm: QueueManager, name: str) -> tuple[int, int]:
    found = qm.inquire_queue(name)
    return found.put_count, found.get_count


def test_puts_and_gets_are_counted_per_queue_when_they_commit(qm):
    """The counters change in the depth's statement: on commit only, gets by every path
    (single, batch, claim), a put and a get that leave the depth as it was included, a
    backed-out get or a refused unit of work not at all; expiry and purge are not gets."""
    for name in ("A.Q", "B.Q"):
        qm.define_queue(name)
    qm.put_many([("A.Q", msg(n)) for n in range(5)])
    qm.put("B.Q", msg(9))
    qm.get("A.Q")
    with qm.unit_of_work() as uow:
        uow.get_batch("A.Q", 2)
    assert [counts(qm, "A.Q"), counts(qm, "B.Q")] == [(5, 3), (1, 0)]
    with qm.unit_of_work() as uow:  # as many in as out: the depth stays, the counters move
        uow.put("B.Q", msg(10))
        uow.get("B.Q")
    assert counts(qm, "B.Q") == (2, 1) and qm.depth("B.Q") == 1
    with pytest.raises(RuntimeError), qm.unit_of_work() as uow:
        uow.get("A.Q")
        raise RuntimeError("backed out")
    with pytest.raises(MQError), qm.unit_of_work() as uow:
        uow.put("B.Q", msg(11))
        sql.update_queue(uow.connection, "B.Q", {"max_depth": 1})  # full at commit
    assert [counts(qm, "A.Q"), counts(qm, "B.Q")] == [(5, 3), (2, 1)]
    with qm.unit_of_work() as uow:
        claimed = uow.claim_batch("A.Q", 1)
    with qm.unit_of_work() as uow:
        uow.consume(claimed)
    qm.put("A.Q", msg(12, expiry=1))
    time.sleep(0.2)
    qm.purge_queue("B.Q")
    assert [counts(qm, "A.Q"), counts(qm, "B.Q")] == [(6, 4), (2, 1)]
    assert len(drain(qm, "A.Q")) == 1
    assert counts(qm, "A.Q") == (6, 5)


def test_get_by_msg_id_and_correl_id_needs_both_to_match(qm):
    qm.define_queue("APP.Q")
    first = qm.put("APP.Q", msg(0, correl_id=b"A"))
    qm.put("APP.Q", msg(1, correl_id=b"B"))
    with pytest.raises(NoMessageAvailable):
        qm.get("APP.Q", msg_id=first, correl_id=b"B")
    assert qm.get("APP.Q", msg_id=first, correl_id=b"A").body == b"m0"


def test_empty_queue_and_no_match_are_2033(qm):
    qm.define_queue("APP.Q")
    with pytest.raises(NoMessageAvailable) as caught:
        qm.get("APP.Q")
    assert reason_of(caught) == 2033
    assert caught.value.reason_name == "MQRC_NO_MSG_AVAILABLE"
    qm.put("APP.Q", msg(1))
    with pytest.raises(NoMessageAvailable):
        qm.get("APP.Q", msg_id=b"OTHER")
    with pytest.raises(NoMessageAvailable):
        qm.get("APP.Q", correl_id=b"OTHER")
    assert qm.depth("APP.Q") == 1


def test_unknown_queues_are_2085_for_put_get_and_browse(qm):
    with pytest.raises(UnknownObject):
        qm.put("NOPE", msg(1))
    with pytest.raises(UnknownObject):
        qm.get("NOPE")
    with pytest.raises(UnknownObject):
        qm.browse("NOPE")


# -- browse ------------------------------------------------------------------------------------


def test_browse_first_and_next_without_removing(qm):
    qm.define_queue("APP.Q")
    for i, priority in enumerate(PRIORITIES):
        qm.put("APP.Q", msg(i, priority=priority))
    seen = []
    cursor = None
    while found := qm.browse("APP.Q", after=cursor):
        assert len(found) == 1
        cursor = found[0].cursor
        seen.append(found[0].message.body)
        assert cursor[0] == found[0].message.priority
    assert seen == EXPECTED_ORDER
    assert qm.depth("APP.Q") == len(PRIORITIES)
    assert [m.body for m in drain(qm, "APP.Q")] == EXPECTED_ORDER


def test_browse_in_pages_and_from_a_cursor(qm):
    qm.define_queue("APP.Q")
    qm.put_many([("APP.Q", msg(i, priority=p)) for i, p in enumerate(PRIORITIES)])
    page1 = qm.browse("APP.Q", limit=3)
    page2 = qm.browse("APP.Q", after=page1[-1].cursor, limit=3)
    page3 = qm.browse("APP.Q", after=page2[-1].cursor, limit=3)
    assert [b.message.body for b in page1 + page2 + page3] == EXPECTED_ORDER
    assert len(page3) == 2
    assert qm.browse("APP.Q", after=page3[-1].cursor) == []
    before = now_ms()
    assert all(before - 60_000 < b.put_at <= before for b in page1)


def test_browse_by_msg_id_finds_only_the_messages_with_it_in_get_order(qm):
    qm.define_queue("APP.Q")
    twin = b"\x07" * 24
    qm.put_many(
        [("APP.Q", msg(1)), ("APP.Q", msg(2, msg_id=twin)), ("APP.Q", msg(3, msg_id=twin, priority=5))]
    )
    assert [b.message.body for b in qm.browse("APP.Q", msg_id=twin, limit=10)] == [b"m3", b"m2"]
    assert [b.message.body for b in qm.browse("APP.Q", msg_id=b"\x07")] == []  # padded: no such MsgId
    assert qm.depth("APP.Q") == 3


def test_browse_does_not_change_backout_count_or_depth(qm):
    qm.define_queue("APP.Q")
    qm.put("APP.Q", msg(1))
    for _ in range(3):
        assert qm.browse("APP.Q")[0].message.backout_count == 0
    assert qm.get("APP.Q").backout_count == 0


# -- units of work -----------------------------------------------------------------------------


def test_puts_and_gets_are_committed_together(qm):
    qm.define_queue("IN")
    qm.define_queue("OUT")
    qm.put_many([("IN", msg(i)) for i in range(3)])
    with qm.unit_of_work() as uow:
        got = [uow.get("IN").body, uow.get("IN").body]
        uow.put("OUT", msg(10))
        uow.put_many([("OUT", msg(11)), ("OUT", msg(12))])
        assert uow.depth("IN") == 1
        assert uow.depth("OUT") == 3
        # Nothing is visible outside the unit of work before it commits.
        assert (qm.depth("IN"), qm.depth("OUT")) == (3, 0)
        assert bodies(qm, "IN") == [b"m0", b"m1", b"m2"]
        assert bodies(qm, "OUT") == []
    assert got == [b"m0", b"m1"]
    assert bodies(qm, "IN") == [b"m2"]
    assert bodies(qm, "OUT") == [b"m10", b"m11", b"m12"]


def test_backout_restores_gotten_messages_in_order_with_backout_count_plus_one(qm):
    qm.define_queue("APP.Q")
    qm.define_queue("OUT")
    qm.put_many([("APP.Q", msg(i, priority=p)) for i, p in enumerate([1, 1, 5, 1, 0])])
    with qm.unit_of_work() as uow:
        got = [m.body for m in uow.get_batch("APP.Q", 2)] + [uow.get("APP.Q").body]
        uow.put("OUT", msg(9))
        uow.backout()
        assert not uow.open
    assert got == [b"m2", b"m0", b"m1"]
    browsed = [(b.message.body, b.message.backout_count) for b in qm.browse("APP.Q", limit=10)]
    assert browsed == [(b"m2", 1), (b"m0", 1), (b"m1", 1), (b"m3", 0), (b"m4", 0)]
    assert qm.depth("OUT") == 0
    with qm.unit_of_work() as uow:
        uow.get("APP.Q")
        uow.backout()
    assert qm.browse("APP.Q")[0].message.backout_count == 2


def test_an_exception_in_a_unit_of_work_backs_it_out(qm):
    qm.define_queue("APP.Q")
    qm.define_queue("OUT")
    qm.put("APP.Q", msg(1))
    with pytest.raises(ZeroDivisionError), qm.unit_of_work() as uow:
        uow.get("APP.Q")
        uow.put("OUT", msg(2))
        _ = 1 / 0
    assert qm.depth("OUT") == 0
    back = qm.get("APP.Q")
    assert (back.body, back.backout_count) == (b"m1", 1)


def test_a_2033_inside_a_unit_of_work_backs_out_what_it_did(qm):
    qm.define_queue("APP.Q")
    qm.put("APP.Q", msg(1))
    with pytest.raises(NoMessageAvailable), qm.unit_of_work() as uow:
        uow.get("APP.Q")
        uow.get("APP.Q")
    assert qm.browse("APP.Q")[0].message.backout_count == 1


def _driver_insert(uow, n: int) -> None:
    """A write through the driver's cursor, as the hot paths that may go in a pipeline do."""
    cursor = uow.connection.connection.driver_connection.cursor()
    placeholder = "%s" if uow.connection.dialect.name == "postgresql" else "?"
    cursor.execute(f"INSERT INTO pipelined (n) VALUES ({placeholder})", [n])


def _pipelined_rows(engine: Engine) -> list[int]:
    with engine.connect() as conn:
        return [row.n for row in conn.execute(text("SELECT n FROM pipelined ORDER BY n"))]


@pytest.fixture
def pipelined_table(engine: Engine) -> Iterator[None]:
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE pipelined (n INTEGER PRIMARY KEY)"))
    yield
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE pipelined"))


@pytest.mark.usefixtures("pipelined_table")
def test_a_write_only_unit_of_work_sends_its_statements_and_the_commit_in_one_exchange(qm, engine):
    with exchanges(engine) as sent, qm.unit_of_work() as uow, uow.pipelined():
        _driver_insert(uow, 1)
        _driver_insert(uow, 2)
    assert _pipelined_rows(engine) == [1, 2]
    if engine.dialect.name == "postgresql":
        assert sent == [["BEGIN", "INSERT", "INSERT", "COMMIT"]]
    with qm.unit_of_work() as uow:  # the connection is back as it was: a transaction of its own
        _driver_insert(uow, 3)
        uow.backout()
    assert _pipelined_rows(engine) == [1, 2]


@pytest.mark.usefixtures("pipelined_table")
def test_a_statement_that_fails_in_a_write_only_unit_of_work_takes_all_of_it_back(qm, engine):
    with pytest.raises(Exception, match=r"(?i)unique|duplicate"), qm.unit_of_work() as uow, uow.pipelined():
        _driver_insert(uow, 1)
        _driver_insert(uow, 1)
        _driver_insert(uow, 2)
    assert _pipelined_rows(engine) == []
    with qm.unit_of_work() as uow, uow.pipelined():
        _driver_insert(uow, 5)
    assert _pipelined_rows(engine) == [5]


@pytest.mark.usefixtures("pipelined_table")
def test_a_unit_of_work_that_has_read_commits_after_the_block_as_usual(qm, engine):
    qm.define_queue("APP.Q")
    qm.put("APP.Q", msg(1))
    with exchanges(engine) as sent, qm.unit_of_work() as uow:
        uow.get("APP.Q")
        with uow.pipelined():
            _driver_insert(uow, 1)
    assert _pipelined_rows(engine) == [1]
    assert qm.depth("APP.Q") == 0
    if engine.dialect.name == "postgresql":
        assert ["COMMIT"] in sent  # a commit of its own, after the depth's statement


def test_a_get_passes_over_the_messages_it_is_told_to_skip(qm):
    qm.define_queue("APP.Q")
    qm.put_many([("APP.Q", msg(n)) for n in range(4)])
    with qm.unit_of_work() as uow:
        uow.get_batch("APP.Q", 2)
        skipped = uow.gotten
        uow.backout()

    with qm.unit_of_work() as uow:
        assert [m.body for m in uow.get_batch("APP.Q", 5, skip=skipped)] == [b"m2", b"m3"]
        assert uow.get_batch("APP.Q", 5, skip=skipped) == []
    assert [(m.body, m.backout_count) for m in drain(qm, "APP.Q")] == [(b"m0", 1), (b"m1", 1)]


def _get_and_back_out(qm: QueueManager, queue: str) -> Message:
    with qm.unit_of_work() as uow:
        got = uow.get(queue)
        uow.backout()
    return got


def test_backout_threshold_moves_the_message_to_the_backout_queue(qm):
    qm.define_queue("APP.Q", backout_threshold=2, backout_requeue_q="APP.BO")
    qm.define_queue("APP.BO")
    original = qm.put("APP.Q", msg(1, correl_id=b"C"))
    qm.put("APP.Q", msg(2))
    assert _get_and_back_out(qm, "APP.Q").backout_count == 0
    assert qm.browse("APP.Q")[0].message.backout_count == 1
    assert _get_and_back_out(qm, "APP.Q").backout_count == 1
    assert bodies(qm, "APP.Q") == [b"m2"]
    moved = qm.get("APP.BO")
    assert (moved.msg_id, moved.correl_id, moved.body) == (original, b"C" + NUL * 23, b"m1")
    assert qm.depth(DEAD_LETTER_QUEUE) == 0


def _dead_letters(qm: QueueManager) -> list[tuple[Message, dlh.DeadLetterHeader, bytes]]:
    found = []
    for message in drain(qm, DEAD_LETTER_QUEUE):
        assert message.format == "MQDEAD  "
        header, data = dlh.decode(message.body, message.encoding)
        found.append((message, header, data))
    return found


def test_backout_threshold_without_backout_queue_dead_letters_with_an_mqdlh(qm):
    qm.define_queue("APP.Q", backout_threshold=1)
    original = Message(
        body=b"\x00payload\xff",
        correl_id=b"C",
        format="MQSTR   ",
        encoding=273,
        ccsid=819,
        priority=6,
        persistence=1,
        put_appl_name="app",
    )
    msg_id = qm.put("APP.Q", original)
    _get_and_back_out(qm, "APP.Q")
    assert qm.depth("APP.Q") == 0
    [(message, header, data)] = _dead_letters(qm)
    assert (header.reason, header.dest_q_name, header.dest_q_mgr_name) == (2362, "APP.Q", "QM1")
    assert (header.encoding, header.ccsid, header.format) == (273, 819, "MQSTR   ")
    assert (header.put_appl_type, header.put_appl_name) == (6, "pytest")
    assert len(header.put_date) == 8 and header.put_date.isdigit()
    assert len(header.put_time) == 8 and header.put_time.isdigit()
    assert data == b"\x00payload\xff"
    assert (message.encoding, message.ccsid) == (273, 1208)
    assert (message.msg_id, message.correl_id) == (msg_id, b"C" + NUL * 23)
    assert (message.priority, message.persistence, message.put_appl_name) == (6, 1, "app")


def test_dead_letter_header_of_an_encoding_without_byte_order_is_native(qm):
    qm.define_queue("APP.Q", backout_threshold=1)
    qm.put("APP.Q", Message(body=b"x", encoding=0))
    _get_and_back_out(qm, "APP.Q")
    [(message, header, data)] = _dead_letters(qm)
    assert (message.encoding, header.encoding, data) == (546, 0, b"x")


def test_an_undefined_backout_queue_means_the_dead_letter_queue(qm):
    qm.define_queue("APP.Q", backout_threshold=1, backout_requeue_q="NOT.DEFINED")
    qm.put("APP.Q", msg(1))
    _get_and_back_out(qm, "APP.Q")
    [(_, header, data)] = _dead_letters(qm)
    assert (header.reason, header.dest_q_name, data) == (2362, "APP.Q", b"m1")


def test_a_full_backout_queue_means_the_dead_letter_queue_with_2053(qm):
    qm.define_queue("APP.Q", backout_threshold=1, backout_requeue_q="APP.BO")
    qm.define_queue("APP.BO", max_depth=0)
    qm.put("APP.Q", msg(1))
    _get_and_back_out(qm, "APP.Q")
    [(_, header, data)] = _dead_letters(qm)
    assert (header.reason, header.dest_q_name, data) == (2053, "APP.BO", b"m1")


@pytest.mark.parametrize("dead_letter_queue", ["too small", "deleted"])
def test_a_backout_leaves_a_message_that_nothing_can_take_where_it_is(
    qm: QueueManager, dead_letter_queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Past the threshold, a message that neither its backout queue nor the dead-letter
    queue takes stays on its queue with its count raised: the backout itself never fails."""
    qm.define_queue("APP.Q", backout_threshold=1, backout_requeue_q="APP.BO")
    qm.define_queue("APP.BO", max_depth=0)
    if dead_letter_queue == "deleted":
        qm.delete_queue(DEAD_LETTER_QUEUE)
    else:
        qm.alter_queue(DEAD_LETTER_QUEUE, max_msg_length=100)
    qm.put("APP.Q", Message(body=b"x" * 200))

    _get_and_back_out(qm, "APP.Q")

    (left,) = [b.message for b in qm.browse("APP.Q")]
    assert (left.body, left.backout_count) == (b"x" * 200, 1)
    (record,) = [r for r in caplog.records if r.msg == "backout threshold reached; message left on its queue"]
    reason = 2085 if dead_letter_queue == "deleted" else 2030
    assert (record.queue, record.reason) == ("APP.Q", reason)  # type: ignore[attr-defined]


def test_put_many_dead_letters_what_cannot_be_put(qm):
    qm.define_queue("APP.Q")
    qm.define_queue("FULL", max_depth=1)
    qm.define_queue("SMALL", max_msg_length=10)
    qm.define_queue("INHIBITED", put_enabled=False)
    qm.put("FULL", msg(99))
    items = [
        ("APP.Q", msg(0)),
        ("NOPE", msg(1)),
        ("FULL", msg(2)),
        ("SMALL", Message(body=b"x" * 11)),
        ("INHIBITED", msg(4)),
        ("APP.Q", msg(5)),
    ]
    with qm.unit_of_work() as uow:
        result = uow.put_many(items, dead_letter_failures=True)
    assert result.dead_lettered == [(1, 2085), (2, 2053), (3, 2030), (4, 2051)]
    assert len(result.msg_ids) == 6 and len(set(result.msg_ids)) == 6
    delivered = drain(qm, "APP.Q")
    assert [(m.body, m.msg_id) for m in delivered] == [(b"m0", result.msg_ids[0]), (b"m5", result.msg_ids[5])]
    dead = _dead_letters(qm)
    assert [(h.reason, h.dest_q_name, data) for _, h, data in dead] == [
        (2085, "NOPE", b"m1"),
        (2053, "FULL", b"m2"),
        (2030, "SMALL", b"x" * 11),
        (2051, "INHIBITED", b"m4"),
    ]
    assert [m.msg_id for m, _, _ in dead] == result.msg_ids[1:5]
    assert bodies(qm, "FULL") == [b"m99"]


def test_put_many_without_dead_lettering_writes_nothing_on_the_first_failure(qm):
    qm.define_queue("APP.Q")
    with pytest.raises(UnknownObject):
        qm.put_many([("APP.Q", msg(0)), ("NOPE", msg(1)), ("APP.Q", msg(2))])
    assert qm.depth("APP.Q") == 0
    assert qm.depth(DEAD_LETTER_QUEUE) == 0


def test_put_many_result_without_failures(qm):
    qm.define_queue("APP.Q")
    result = qm.put_many([("APP.Q", msg(0)), ("APP.Q", msg(1, msg_id=b"ID1"))])
    assert result.dead_lettered == []
    assert result.msg_ids[1] == b"ID1" + NUL * 21
    assert [m.msg_id for m in drain(qm, "APP.Q")] == result.msg_ids


def test_descriptor_errors_are_never_dead_lettered(qm):
    qm.define_queue("APP.Q")
    with pytest.raises(MQError) as caught, qm.unit_of_work() as uow:
        uow.put_many([("APP.Q", msg(0)), ("APP.Q", msg(1, correl_id=b"c" * 25))], dead_letter_failures=True)
    assert reason_of(caught) == 2026
    assert (qm.depth("APP.Q"), qm.depth(DEAD_LETTER_QUEUE)) == (0, 0)


def test_explicit_dead_letter(qm):
    with qm.unit_of_work() as uow:
        msg_id = uow.dead_letter("REMOTE.Q", msg(1, encoding=273), 2085, dest_qmgr="QM9")
    [(message, header, data)] = _dead_letters(qm)
    assert message.msg_id == msg_id
    assert (header.reason, header.dest_q_name, header.dest_q_mgr_name) == (2085, "REMOTE.Q", "QM9")
    assert data == b"m1"


# -- limits and inhibits -----------------------------------------------------------------------


def test_exactly_max_depth_messages_fit(qm):
    qm.define_queue("APP.Q", max_depth=3)
    qm.put_many([("APP.Q", msg(i)) for i in range(3)])
    with pytest.raises(MQError) as caught:
        qm.put("APP.Q", msg(3))
    assert reason_of(caught) == 2053
    assert caught.value.reason_name == "MQRC_Q_FULL"
    qm.get("APP.Q")
    qm.put("APP.Q", msg(4))
    assert bodies(qm, "APP.Q") == [b"m1", b"m2", b"m4"]


def test_a_put_many_over_max_depth_writes_nothing(qm):
    qm.define_queue("APP.Q", max_depth=3)
    with pytest.raises(MQError) as caught:
        qm.put_many([("APP.Q", msg(i)) for i in range(4)])
    assert reason_of(caught) == 2053
    assert qm.depth("APP.Q") == 0


def test_max_depth_counts_this_units_uncommitted_puts_and_gets(qm):
    qm.define_queue("APP.Q", max_depth=2)
    qm.put("APP.Q", msg(0))
    with qm.unit_of_work() as uow:
        uow.put("APP.Q", msg(1))
        with pytest.raises(MQError) as caught:
            uow.put("APP.Q", msg(2))
        assert reason_of(caught) == 2053
        uow.get("APP.Q")
        uow.put("APP.Q", msg(3))
    assert bodies(qm, "APP.Q") == [b"m1", b"m3"]


def test_max_depth_zero_takes_nothing(qm):
    qm.define_queue("APP.Q", max_depth=0)
    with pytest.raises(MQError) as caught:
        qm.put("APP.Q", msg(0))
    assert reason_of(caught) == 2053


def test_commit_is_refused_when_the_queue_filled_meanwhile(qm):
    """What a concurrent unit of work does to the depth counter, done on this one's connection
    (on SQLite no other writer can run meanwhile; test_manager_concurrent_units does it for real
    on PostgreSQL)."""
    qm.define_queue("APP.Q", max_depth=2)
    with pytest.raises(MQError) as caught, qm.unit_of_work() as uow:
        uow.put("APP.Q", msg(1))
        uow.connection.execute(text("UPDATE mq_queues SET depth = 2 WHERE name = 'APP.Q'"))
    assert reason_of(caught) == 2053
    assert qm.depth("APP.Q") == 0


def test_put_inhibited_is_2051(qm):
    qm.define_queue("APP.Q", put_enabled=False)
    with pytest.raises(MQError) as caught:
        qm.put("APP.Q", msg(1))
    assert reason_of(caught) == 2051
    assert caught.value.reason_name == "MQRC_PUT_INHIBITED"
    qm.alter_queue("APP.Q", put_enabled=True)
    qm.put("APP.Q", msg(2))
    assert bodies(qm, "APP.Q") == [b"m2"]


def test_get_inhibited_is_2016_even_with_messages_and_a_wait(qm):
    qm.define_queue("APP.Q")
    qm.put("APP.Q", msg(1))
    qm.alter_queue("APP.Q", get_enabled=False)
    started = time.monotonic()
    with pytest.raises(MQError) as caught:
        qm.get("APP.Q", wait=5)
    assert time.monotonic() - started < 1
    assert reason_of(caught) == 2016
    assert caught.value.reason_name == "MQRC_GET_INHIBITED"
    with pytest.raises(MQError) as caught, qm.unit_of_work() as uow:
        uow.get_batch("APP.Q", 10)
    assert reason_of(caught) == 2016
    assert qm.depth("APP.Q") == 1


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"priority": 10}, 2050),
        ({"priority": -2}, 2050),
        ({"persistence": 3}, 2047),
        ({"persistence": -1}, 2047),
        ({"expiry": 0}, 2013),
        ({"expiry": -2}, 2013),
        ({"msg_id": b"x" * 25}, 2026),
        ({"correl_id": b"x" * 25}, 2026),
        ({"format": "MQSTRING1"}, 2026),
        ({"reply_to_q": "Q" * 49}, 2026),
        ({"reply_to_qmgr": "M" * 49}, 2026),
        ({"user_id": "u" * 13}, 2026),
        ({"put_appl_name": "a" * 29}, 2026),
    ],
)
def test_invalid_descriptor_fields_are_refused_with_their_reason(qm, fields, reason):
    qm.define_queue("APP.Q")
    with pytest.raises(MQError) as caught:
        qm.put("APP.Q", Message(body=b"x", **fields))
    assert reason_of(caught) == reason
    assert qm.depth("APP.Q") == 0


def test_oversized_ids_in_a_get_are_2026(qm):
    qm.define_queue("APP.Q")
    with pytest.raises(MQError) as caught:
        qm.get("APP.Q", msg_id=b"x" * 25)
    assert reason_of(caught) == 2026
    with pytest.raises(MQError) as caught:
        qm.get("APP.Q", correl_id=b"x" * 25)
    assert reason_of(caught) == 2026


# -- expiry ------------------------------------------------------------------------------------


def test_an_expired_message_is_never_returned_and_is_removed(qm, engine):
    qm.define_queue("APP.Q")
    doomed = qm.put("APP.Q", msg(1, expiry=1))
    qm.put("APP.Q", msg(2, expiry=600))
    time.sleep(0.15)
    assert [b.message.body for b in qm.browse("APP.Q", limit=10)] == [b"m2"]
    with pytest.raises(NoMessageAvailable):
        qm.get("APP.Q", msg_id=doomed)
    assert qm.depth("APP.Q") == 1
    assert rows_on(engine, "APP.Q") == 1
    live = qm.get("APP.Q")
    assert live.body == b"m2"
    assert 598 <= live.expiry <= 600
    with pytest.raises(NoMessageAvailable):
        qm.get("APP.Q")
    assert qm.depth("APP.Q") == 0


def test_an_expired_message_on_an_otherwise_empty_queue_is_removed_by_a_get(qm, engine):
    qm.define_queue("APP.Q")
    qm.put("APP.Q", msg(1, expiry=1))
    assert qm.depth("APP.Q") == 1
    time.sleep(0.15)
    with pytest.raises(NoMessageAvailable):
        qm.get("APP.Q")
    assert qm.depth("APP.Q") == 0
    assert rows_on(engine, "APP.Q") == 0


def test_expiry_on_get_is_the_remaining_time(qm):
    qm.define_queue("APP.Q")
    qm.put("APP.Q", msg(1, expiry=50))
    time.sleep(0.3)
    browsed = qm.browse("APP.Q")[0].message.expiry
    got = qm.get("APP.Q").expiry
    assert 44 <= got <= browsed <= 47


def test_unlimited_expiry_stays_unlimited(qm):
    qm.define_queue("APP.Q")
    qm.put("APP.Q", msg(1))
    assert qm.get("APP.Q").expiry == -1
