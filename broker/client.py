"""What an application uses instead of pymqi + rfhutil: build and put the five
``<psc>`` commands, wait for the broker's ``<pscr>`` reply, and read
publications from a subscriber queue already decoded.

Replies are matched the way IBM's samples match them: the command is a
request, and the reply's CorrelId is the command's MsgId. Unless told
otherwise the client creates its own temporary dynamic reply queue
(``AMQ.<hex>``), deleted by :meth:`BrokerClient.close`; subscriptions that
point at it are then removed by the broker, as MQ does.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from broker.core.system import CONTROL_QUEUE, DEFAULT_STREAM
from broker.protocol import psc, pscr, rfh2
from broker.protocol.messages import ReceivedPublication, command_message, decode_publication
from broker.protocol.options import DelOpt, PubOpt, RegOpt
from broker.protocol.psc import NO_DEL_OPTIONS, NO_PUB_OPTIONS, NO_REG_OPTIONS
from queues import Message, QueueManager
from queues.errors import MQError, UnknownObject
from queues.message import (
    MQFMT_NONE,
    MQFMT_STRING,
)
from queues.opens import QueueOpen
from queues.owners import owner_name
from queues.reasons import Reason, reason_name

# The options an application passes, and the messages it builds and reads, come with the
# client: one import for all.
__all__ = [
    "BrokerClient",
    "BrokerResponse",
    "DelOpt",
    "PubOpt",
    "ReceivedPublication",
    "RegOpt",
    "command_message",
    "decode_publication",
    "read_response",
]

DEFAULT_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class BrokerResponse:
    """The broker's answer to a command."""

    completion: str
    items: tuple[pscr.ResponseItem, ...] = ()
    attributes: tuple[tuple[str, str], ...] = ()
    message: Message | None = None

    @property
    def ok(self) -> bool:
        return self.completion == pscr.OK

    @property
    def reason(self) -> int:
        return self.items[0].reason if self.items else 0

    @property
    def refused_topics(self) -> tuple[str, ...]:
        return tuple(item.topic for item in self.items if item.topic is not None)

    def describe(self) -> str:
        """The response in words, e.g. ``warning: MQRCCF_NOT_AUTHORIZED (3081) on topic 'a'``."""
        lines = [self.completion]
        for item in self.items:
            text = f"  {reason_name(item.reason)} ({item.reason})"
            if item.topic is not None:
                text += f" on topic {item.topic!r}"
            if item.parameter is not None:
                text += f" [{item.parameter}]"
            if item.detail is not None:
                text += f": {item.detail}"
            lines.append(text)
        lines += [f"  {name}: {value}" for name, value in self.attributes]
        return "\n".join(lines)


def read_response(message: Message) -> BrokerResponse:
    headers = rfh2.decode(message.body, message.encoding, message.format)
    response = pscr.parse_folders(headers.folders)
    return BrokerResponse(response.completion, response.items, response.attributes, message)


class BrokerClient:
    """Commands to one broker (queue manager) and publications from its queues."""

    def __init__(
        self,
        qm: QueueManager,
        *,
        reply_queue: str | None = None,
        stream: str = DEFAULT_STREAM,
        control_queue: str = CONTROL_QUEUE,
        user_id: str = "",
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.qm = qm
        self.stream = stream
        self.control_queue = control_queue
        self.user_id = user_id
        self.timeout = timeout
        self._own_reply_queue = reply_queue is None
        self.reply_queue = reply_queue or f"AMQ.{os.urandom(8).hex().upper()}"
        # The reply queue is held open by this process: if it dies without closing, the broker
        # deletes the queue, as MQ deletes a temporary dynamic queue with its connection.
        self._holder = owner_name(f"client {self.reply_queue}")
        if self._own_reply_queue:
            qm.define_queue(
                self.reply_queue,
                definition_type="tempdyn",
                index_type="correlid",  # replies are got by CorrelId
                description="broker client replies",
            )
            qm.open_queues(
                self._holder, [QueueOpen(self.reply_queue, "broker client replies", reads=True)], None
            )

    def close(self) -> None:
        if self._own_reply_queue:
            self.qm.close_queues(self._holder)
            self.qm.delete_queue(self.reply_queue, purge=True)
            self._own_reply_queue = False

    def __enter__(self) -> BrokerClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- commands --------------------------------------------------------------------------

    def send(
        self,
        command: psc.Command,
        queue: str,
        *,
        wait: bool = True,
        timeout: float | None = None,
        **fields: Any,
    ) -> BrokerResponse | None:
        """Put ``command`` on ``queue``; with ``wait``, return the broker's reply
        (2033 MQRC_NO_MSG_AVAILABLE if none comes within the timeout)."""
        fields.setdefault("user_id", self.user_id)
        message = command_message(
            command, request=wait, reply_to_q=self.reply_queue if wait else "", **fields
        )
        try:
            msg_id = self.qm.put(queue, message)
        except UnknownObject as exc:
            if queue not in (CONTROL_QUEUE, self.stream):
                raise
            raise MQError(
                exc.reason,
                f"{queue} is not defined on this database: no broker has been started on it "
                "('broker serve' defines its queues, as does 'broker db upgrade')",
            ) from None
        if not wait:
            return None
        limit = self.timeout if timeout is None else timeout
        try:
            reply = self.qm.get(self.reply_queue, wait=limit, correl_id=msg_id)
        except MQError as exc:
            if exc.reason == Reason.MQRC_NO_MSG_AVAILABLE:
                raise MQError(
                    Reason.MQRC_NO_MSG_AVAILABLE,
                    f"no response from the broker within {limit:g} s: is 'broker serve' running on this "
                    f"database? The {type(command).__name__} stays on {queue} and takes effect "
                    "when a broker routes it",
                ) from None
            raise
        return read_response(reply)

    def publish(
        self,
        topics: str | Iterable[str],
        body: bytes | str = b"",
        *,
        options: PubOpt = NO_PUB_OPTIONS,
        sub_point: str | None = None,
        pub_time: str | None = None,
        seq_num: str | None = None,
        q_name: str | None = None,
        q_mgr_name: str | None = None,
        correl_id: bytes | None = None,
        folders: Sequence[str] = (),
        stream: str | None = None,
        wait: bool = True,
        **fields: Any,
    ) -> BrokerResponse | None:
        command = psc.Publish(
            _topics(topics),
            sub_point=sub_point,
            options=options,
            pub_time=pub_time,
            seq_num=seq_num,
            q_mgr_name=q_mgr_name,
            q_name=q_name,
        )
        payload = body.encode("utf-8") if isinstance(body, str) else body
        fields.setdefault("payload_format", MQFMT_STRING if isinstance(body, str) else MQFMT_NONE)
        if correl_id is not None:
            fields["correl_id"] = correl_id
        return self.send(
            command, stream or self.stream, wait=wait, payload=payload, folders=folders, **fields
        )

    def subscribe(
        self,
        topics: str | Iterable[str],
        queue: str | None = None,
        *,
        q_mgr: str | None = None,
        options: RegOpt = NO_REG_OPTIONS,
        sub_point: str | None = None,
        sub_name: str | None = None,
        sub_identity: str | None = None,
        sub_user_data: str | None = None,
        filter: str | None = None,
        correl_id: bytes | None = None,
        **fields: Any,
    ) -> BrokerResponse:
        command = psc.RegSub(
            _topics(topics),
            sub_point=sub_point,
            filter=filter,
            q_mgr_name=q_mgr,
            q_name=queue,
            options=options,
            sub_name=sub_name,
            sub_identity=sub_identity,
            sub_user_data=sub_user_data,
        )
        return self._control(command, correl_id, fields)

    def unsubscribe(
        self,
        topics: str | Iterable[str] = (),
        queue: str | None = None,
        *,
        q_mgr: str | None = None,
        options: RegOpt = NO_REG_OPTIONS,
        sub_point: str | None = None,
        sub_name: str | None = None,
        sub_identity: str | None = None,
        filter: str | None = None,
        correl_id: bytes | None = None,
        **fields: Any,
    ) -> BrokerResponse:
        command = psc.DeregSub(
            _topics(topics),
            sub_point=sub_point,
            filter=filter,
            q_mgr_name=q_mgr,
            q_name=queue,
            options=options,
            sub_name=sub_name,
            sub_identity=sub_identity,
        )
        return self._control(command, correl_id, fields)

    def request_update(
        self,
        topic: str,
        queue: str | None = None,
        *,
        q_mgr: str | None = None,
        options: RegOpt = NO_REG_OPTIONS,
        sub_point: str | None = None,
        sub_name: str | None = None,
        filter: str | None = None,
        correl_id: bytes | None = None,
        **fields: Any,
    ) -> BrokerResponse:
        command = psc.ReqUpdate(
            topic,
            sub_point=sub_point,
            filter=filter,
            q_mgr_name=q_mgr,
            q_name=queue,
            options=options,
            sub_name=sub_name,
        )
        return self._control(command, correl_id, fields)

    def delete_publication(
        self,
        topics: str | Iterable[str],
        *,
        options: DelOpt = NO_DEL_OPTIONS,
        sub_point: str | None = None,
        stream: str | None = None,
        **fields: Any,
    ) -> BrokerResponse:
        command = psc.DeletePub(_topics(topics), sub_point=sub_point, options=options)
        response = self.send(command, stream or self.stream, **fields)
        assert response is not None
        return response

    def _control(
        self, command: psc.Command, correl_id: bytes | None, fields: dict[str, Any]
    ) -> BrokerResponse:
        if correl_id is not None:
            fields["correl_id"] = correl_id
        response = self.send(command, self.control_queue, **fields)
        assert response is not None
        return response

    # -- publications ----------------------------------------------------------------------

    def receive(
        self, queue: str, *, wait: float = 0.0, correl_id: bytes | None = None
    ) -> ReceivedPublication:
        """Get the next publication from a subscriber queue (2033 if none arrives in time)."""
        return decode_publication(self.qm.get(queue, wait=wait, correl_id=correl_id))


def _topics(topics: str | Iterable[str]) -> tuple[str, ...]:
    return (topics,) if isinstance(topics, str) else tuple(topics)
