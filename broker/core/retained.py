"""Retained publications: the last publication kept per (subscription point, topic).

The broker keeps the publication as it arrived (descriptor and body) together
with its decoded headers and parsed command, so that delivering it to a late
subscriber costs the same as delivering a live publication. Expiry follows the
publication's MQMD Expiry: the retained copy is never delivered after it, and
the remaining time shrinks by the time it was held (reference 4.4).
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.protocol.brokerpath import BrokerPath
from broker.protocol.psc import Publish
from broker.protocol.rfh2 import RFH2Body
from queues.message import MQEI_UNLIMITED, Message


@dataclass(frozen=True, slots=True)
class RetainedPublication:
    sub_point: str
    topic: str
    message: Message
    publish: Publish
    rfh2: RFH2Body
    retained_at: int
    seq: int = 0  # arrival order, so replays (the Spark job) keep the last writer
    path: BrokerPath | None = None  # set when it came from a neighbouring broker

    @property
    def origin_msg_id(self) -> bytes:
        """The MsgId the publication had where it was first published."""
        return self.path.origin_msg_id if self.path is not None else self.message.msg_id

    @property
    def expires_at(self) -> int | None:
        if self.message.expiry == MQEI_UNLIMITED:
            return None
        return self.retained_at + self.message.expiry * 100

    def expired(self, now: int) -> bool:
        expires_at = self.expires_at
        return expires_at is not None and expires_at <= now

    def remaining_expiry(self, now: int) -> int:
        """MQMD Expiry (tenths of a second) left at ``now``; at least 1 while live."""
        expires_at = self.expires_at
        if expires_at is None:
            return MQEI_UNLIMITED
        return max(1, -(-(expires_at - now) // 100))
