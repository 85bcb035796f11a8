"""MQRFH2 command messages and publications (``broker.protocol.messages``)."""

from __future__ import annotations

import pytest

from broker.protocol import psc
from broker.protocol.messages import command_message, decode_publication
from queues.errors import MQError
from queues.message import MQFMT_RF_HEADER_2, MQFMT_STRING, MQMT_DATAGRAM, MQMT_REQUEST
from queues.reasons import Reason

PUBLISH = "<psc><Command>Publish</Command><Topic>Sport/Soccer</Topic><Topic>Sport</Topic></psc>"
USR = "<usr><team>Rovers</team></usr>"


def test_a_publish_command_message_reads_back_as_the_publication_subscribers_take() -> None:
    message = command_message(
        psc.parse(PUBLISH), payload=b"3-1", payload_format=MQFMT_STRING, folders=(USR,), request=False
    )
    assert (message.format, message.msg_type) == (MQFMT_RF_HEADER_2, MQMT_DATAGRAM)
    publication = decode_publication(message)
    assert (publication.topics, publication.text, publication.retained) == (
        ("Sport/Soccer", "Sport"),
        "3-1",
        False,
    )
    assert publication.folders == (USR,)
    assert publication.message is message


def test_a_command_is_a_request_unless_told_otherwise_and_carries_its_descriptor() -> None:
    message = command_message(psc.parse(PUBLISH), reply_to_q="REPLY", correl_id=b"c" * 24, user_id="alice")
    assert (message.msg_type, message.reply_to_q, message.correl_id, message.user_id) == (
        MQMT_REQUEST,
        "REPLY",
        b"c" * 24,
        "alice",
    )


def test_a_message_without_a_publish_folder_is_refused_with_2337() -> None:
    registration = psc.parse("<psc><Command>RegSub</Command><Topic>Sport/#</Topic><QName>Q</QName></psc>")
    with pytest.raises(MQError) as refused:
        decode_publication(command_message(registration))
    assert refused.value.reason == Reason.MQRC_RFH_PARM_MISSING
