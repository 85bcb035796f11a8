"""MQRFH2 command messages, as applications put them, and the publications subscribers take:
the wire form of the ``<psc>`` protocol on queues. The application client builds and reads
them with these functions, and so do the broker's own shells (the MQTT bridge, the
benchmarks): one encoding of a command message, one decoding of a publication."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from broker.protocol import psc, rfh2
from broker.protocol.options import PubOpt
from queues.errors import MQError
from queues.message import (
    CCSID_UTF8,
    MQEI_UNLIMITED,
    MQENC_NATIVE,
    MQFMT_NONE,
    MQFMT_RF_HEADER_2,
    MQMT_DATAGRAM,
    MQMT_REQUEST,
    MQPER_PERSISTENCE_AS_Q_DEF,
    MQPRI_PRIORITY_AS_Q_DEF,
    Message,
)
from queues.reasons import Reason


@dataclass(frozen=True, slots=True)
class ReceivedPublication:
    """A publication taken from a subscriber queue."""

    topics: tuple[str, ...]
    sub_point: str | None
    retained: bool  # IsRetainedPub: it came from the retained store (InformIfRet subscribers)
    pub_time: str | None
    seq_num: str | None
    body: bytes
    folders: tuple[str, ...]  # the publisher's other folders (<mcd>, <usr>, ...)
    message: Message
    payload_format: str = MQFMT_NONE  # the MQRFH2's Format: the body's

    @property
    def topic(self) -> str:
        return self.topics[0]

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")


def decode_publication(message: Message) -> ReceivedPublication:
    """A subscriber-queue message as a publication; 2337/2334 if it is not one."""
    headers = rfh2.decode(message.body, message.encoding, message.format)
    commands, others = rfh2.find(headers.folders, psc.FOLDER)
    parsed = [psc.parse(folder) for folder in commands]
    command = next((c for c in reversed(parsed) if isinstance(c, psc.Publish)), None)
    if command is None:
        raise MQError(Reason.MQRC_RFH_PARM_MISSING, "the message holds no Publish <psc> folder")
    return ReceivedPublication(
        topics=command.topics,
        sub_point=command.sub_point,
        retained=bool(command.options & PubOpt.IsRetainedPub),
        pub_time=command.pub_time,
        seq_num=command.seq_num,
        body=headers.payload,
        folders=tuple(others),
        message=message,
        payload_format=headers.payload_format,
    )


def command_message(
    command: psc.Command,
    *,
    payload: bytes = b"",
    payload_format: str = MQFMT_NONE,
    folders: Sequence[str] = (),
    request: bool = True,
    reply_to_q: str = "",
    reply_to_qmgr: str = "",
    correl_id: bytes | None = None,
    user_id: str = "",
    persistence: int = MQPER_PERSISTENCE_AS_Q_DEF,
    priority: int = MQPRI_PRIORITY_AS_Q_DEF,
    expiry: int = MQEI_UNLIMITED,
    report: int = 0,
    encoding: int = MQENC_NATIVE,
) -> Message:
    """The MQRFH2 command message for ``command`` (plus extra folders and a payload)."""
    header = rfh2.RFH2Header(
        encoding=encoding, ccsid=CCSID_UTF8, format=payload_format, folders=(psc.render(command), *folders)
    )
    fields: dict[str, Any] = {}
    if correl_id is not None:
        fields["correl_id"] = correl_id
    return Message(
        body=rfh2.encode(rfh2.RFH2Body((header,), payload), encoding),
        format=MQFMT_RF_HEADER_2,
        encoding=encoding,
        msg_type=MQMT_REQUEST if request else MQMT_DATAGRAM,
        report=report,
        reply_to_q=reply_to_q,
        reply_to_qmgr=reply_to_qmgr,
        user_id=user_id,
        persistence=persistence,
        priority=priority,
        expiry=expiry,
        **fields,
    )
