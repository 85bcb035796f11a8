"""Where a message effect goes: the decision the service's writer and the Spark job share."""

from __future__ import annotations

from broker.core.effects import FORWARD, DeadLetter, Put
from broker.core.writes import Write, write_of
from queues import xqh
from queues.message import MQFMT_XMIT_Q_HEADER, Message
from queues.reasons import Reason

MESSAGE = Message(body=b"payload")


def test_a_local_put_goes_to_its_queue() -> None:
    assert write_of(Put("SUB", MESSAGE), ()) == Write("SUB", MESSAGE)


def test_a_put_for_a_neighbour_goes_to_its_transmission_queue_behind_an_mqxqh() -> None:
    write = write_of(Put("SYSTEM.BROKER.CONTROL.QUEUE", MESSAGE, "QMB", FORWARD), {"QMB"})
    assert (write.queue, write.reason, write.message.format) == ("QMB", 0, MQFMT_XMIT_Q_HEADER)
    queue, q_mgr, original = xqh.decode(write.message.body)
    assert (queue, q_mgr, original.body) == ("SYSTEM.BROKER.CONTROL.QUEUE", "QMB", b"payload")


def test_a_put_for_a_queue_manager_that_is_no_neighbour_is_dead_lettered_naming_it() -> None:
    write = write_of(Put("Q", MESSAGE, "QMZ"), {"QMB"})
    assert write == Write("Q", MESSAGE, Reason.MQRC_UNKNOWN_REMOTE_Q_MGR, "QMZ")


def test_a_dead_letter_keeps_its_reason_and_names_this_queue_manager() -> None:
    effect = DeadLetter(MESSAGE, "SYSTEM.BROKER.DEFAULT.STREAM", Reason.MQRC_RFH_ERROR)
    assert write_of(effect, {"QMB"}) == Write("SYSTEM.BROKER.DEFAULT.STREAM", MESSAGE, Reason.MQRC_RFH_ERROR)
