"""queues.opens: a queue held open by a live process cannot be deleted, nor altered into something
its holder cannot use; a lapsed or dead holder holds nothing (both databases for the manager)."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from queues import MQError, QueueManager, Reason
from queues.opens import UNTIL_CLOSED, Holder, QueueOpen, check_alter, check_delete, live
from queues.owners import owner_name

NOW = 1_767_225_600_000
READER = Holder("router:h/1@k", "broker QM1 routes from it", reads=True, writes=False, min_msg_length=1000)
WRITER = Holder("router:h/1@k", "broker QM1 dead-letters to it", reads=False, writes=True, min_msg_length=0)


def refused(check, *args) -> str:
    with pytest.raises(MQError) as caught:
        check(*args)
    assert caught.value.reason == Reason.MQRC_OBJECT_IN_USE
    return caught.value.detail


def test_a_held_queue_cannot_be_deleted_and_the_refusal_names_the_holder():
    detail = refused(check_delete, "Q", [READER])
    assert detail.startswith("queue Q is in use: broker QM1 routes from it (router:h/1@k)")
    check_delete("Q", [])


@pytest.mark.parametrize(
    ("holder", "values", "why"),
    [
        (READER, {"get_enabled": 0}, "gets must stay enabled"),
        (READER, {"max_msg_length": 999}, "max_msg_length 999 is below the 1000 bytes"),
        (WRITER, {"put_enabled": 0}, "puts must stay enabled"),
    ],
)
def test_what_the_holder_needs_cannot_be_altered_away(holder, values, why):
    assert why in refused(check_alter, "Q", values, [holder])


@pytest.mark.parametrize(
    ("holder", "values"),
    [
        (READER, {"put_enabled": 0, "max_msg_length": 1000, "description": "x"}),
        (WRITER, {"get_enabled": 0, "max_msg_length": 0}),
        (READER, {"get_enabled": 1}),
    ],
)
def test_what_the_holder_does_not_need_is_the_operators_to_change(holder, values):
    check_alter("Q", values, [holder])


def row(owner: str, until: int) -> SimpleNamespace:
    return SimpleNamespace(owner=owner, purpose="p", reads=1, writes=0, min_msg_length=0, until=until)


def test_a_record_lapses_at_its_until_and_with_its_process():
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead = (
        owner_name("router").rsplit("/", 1)[0]
        + f"/{gone.stdout.strip()}@"
        + owner_name("x").rsplit("@", 1)[1]
    )
    here = owner_name("router")
    holders = live(
        [row(here, NOW + 1), row("router:elsewhere/7@otherbox", NOW + 1), row(here, NOW), row(dead, NOW + 1)],
        NOW,
    )
    assert [h.owner for h in holders] == [here, "router:elsewhere/7@otherbox"]
    assert live([row("neighbour:QMB", UNTIL_CLOSED)], NOW)[0].owner == "neighbour:QMB"


def test_the_manager_refuses_while_a_queue_is_held_and_not_after(qm: QueueManager):
    qm.define_queue("IN.Q")
    qm.define_queue("OUT.Q")
    me = owner_name("router")
    qm.open_queues(
        me,
        [
            QueueOpen("IN.Q", "broker QM1 routes from it", reads=True, min_msg_length=2048),
            QueueOpen("OUT.Q", "broker QM1 dead-letters to it", writes=True),
        ],
    )
    assert [h.owner for h in qm.holders("IN.Q")] == [me]
    with pytest.raises(MQError) as deleted:
        qm.delete_queue("IN.Q")
    assert deleted.value.reason == Reason.MQRC_OBJECT_IN_USE and f"({me})" in deleted.value.detail
    with pytest.raises(MQError) as in_unit, qm.unit_of_work() as uow:
        uow.delete_queue("IN.Q")
    assert in_unit.value.reason == Reason.MQRC_OBJECT_IN_USE
    for queue, change in (
        ("IN.Q", {"get_enabled": False}),
        ("IN.Q", {"max_msg_length": 100}),
        ("OUT.Q", {"put_enabled": False}),
    ):
        with pytest.raises(MQError) as altered:
            qm.alter_queue(queue, **change)
        assert altered.value.reason == Reason.MQRC_OBJECT_IN_USE
    with pytest.raises(MQError) as replaced:  # DEFINE ... REPLACE alters: the same refusals
        qm.define_queue("IN.Q", replace_existing=True, get_enabled=False)
    assert replaced.value.reason == Reason.MQRC_OBJECT_IN_USE
    assert qm.alter_queue("IN.Q", put_enabled=False, max_msg_length=4096).max_msg_length == 4096
    assert qm.inquire_queue("IN.Q").get_enabled is True

    qm.open_queues(me, [QueueOpen("IN.Q", "broker QM1 routes from it", reads=True)])  # replaces the set
    assert qm.holders("OUT.Q") == []
    assert qm.delete_queue("OUT.Q") == 0
    qm.close_queues(me)
    assert qm.delete_queue("IN.Q") == 0


def test_an_open_that_is_not_renewed_lapses(qm: QueueManager):
    qm.define_queue("Q")
    qm.open_queues(
        "router:elsewhere/7@otherbox", [QueueOpen("Q", "a broker elsewhere", reads=True)], lease_ms=-1
    )
    assert qm.holders("Q") == []
    assert qm.delete_queue("Q") == 0


def test_an_open_held_until_closed_does_not_lapse(qm: QueueManager):
    qm.define_queue("XMIT")
    qm.open_queues("neighbour:QMB", [QueueOpen("XMIT", "the channel to QMB", reads=True)], lease_ms=None)
    assert [h.purpose for h in qm.holders("XMIT")] == ["the channel to QMB"]
    qm.close_queues("neighbour:QMB")
    assert qm.holders("XMIT") == []


def test_the_holders_of_a_page_of_queues_are_read_at_once(qm: QueueManager):
    for name in ("A", "B", "C"):
        qm.define_queue(name)
    qm.open_queues("router:h/2@box", [QueueOpen("A", "broker QM1 routes from it", reads=True)], lease_ms=None)
    qm.open_queues(
        "neighbour:QMB",
        [QueueOpen("A", "the channel to QMB", reads=True), QueueOpen("B", "the channel to QMB", writes=True)],
        lease_ms=None,
    )
    qm.open_queues("router:gone/3@box", [QueueOpen("C", "a broker that stopped", reads=True)], lease_ms=-1)
    held = qm.holders_of(["A", "B", "C", "NOT.DEFINED"])
    assert {name: [h.owner for h in found] for name, found in held.items()} == {
        "A": ["neighbour:QMB", "router:h/2@box"],  # by owner
        "B": ["neighbour:QMB"],
        "C": [],  # its lease lapsed
        "NOT.DEFINED": [],
    }
    assert held["B"][0].writes and not held["B"][0].reads
    assert qm.holders_of([]) == {}


def test_a_process_of_this_machine_holds_until_it_exits(qm: QueueManager, database_url: str):
    """A holder that dies without closing is judged by its pid at once, not its lease."""
    qm.define_queue("Q")
    code = (
        "from queues import QueueManager, make_engine; from queues.opens import QueueOpen;"
        "from queues.owners import owner_name;"
        f"qm = QueueManager(make_engine({database_url!r}));"
        "qm.open_queues(owner_name('router'), [QueueOpen('Q', 'a router', reads=True)]);"
        "import os; os._exit(0)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ})
    assert qm.holders("Q") == []
    assert qm.delete_queue("Q") == 0
