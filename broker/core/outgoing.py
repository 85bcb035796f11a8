"""The publications the broker sends: to subscribers, and to neighbouring brokers.

A subscriber receives a Publish command message (reference 2.6, 3.3): the
publisher's headers and body, its ``<psc>`` replaced by one naming the topics
this subscriber matched, the subscription point, and ``IsRetainedPub`` when it
comes from the retained store and the subscriber registered InformIfRet. The
descriptor is the broker's: a datagram, CorrelId the subscriber's (CorrelAsId)
or the broker's fixed non-zero value, persistence per the subscriber's option,
priority and remaining expiry from the publisher, the subscriber's user ID,
PutApplType MQAT_BROKER. Other folders (``<mcd>``, ``<usr>``, ``<jms>``...)
pass through unchanged; ``<pscr>`` and ``<brokerpath>`` never reach subscribers.

Bodies depend only on (topics, retained flag), so one incoming publication
encodes each variant once however many subscribers receive it. MsgIds are
hashes of the publication and the subscriber, so replays produce the same ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from hashlib import blake2b

from broker.core.replies import encoding_of
from broker.core.subscription import Identity, Subscription
from broker.protocol import brokerpath, psc, pscr, rfh2
from broker.protocol.options import PubOpt, RegOpt
from queues.ids import derived_id, mq_date_time
from queues.message import (
    MQAT_BROKER,
    MQFMT_RF_HEADER_2,
    MQMT_DATAGRAM,
    MQPER_NOT_PERSISTENT,
    MQPER_PERSISTENCE_AS_Q_DEF,
    MQPER_PERSISTENT,
    USER_ID_LENGTH,
    Message,
)

# Folders a subscriber must not see: commands/responses of the broker protocol.
_BROKER_FOLDERS = frozenset({psc.FOLDER, pscr.FOLDER, brokerpath.FOLDER})
# Options a publication keeps when a broker forwards it to a neighbour.
_FORWARDED_OPTIONS = PubOpt.RetainPub | PubOpt.OtherSubsOnly | PubOpt.CorrelAsId


@lru_cache(maxsize=4096)
def _identity_bytes(identity: Identity) -> bytes:
    """An identity as bytes, unambiguously framed, for hashing into delivery MsgIds."""
    correl = identity.correl_id or b""
    return b"".join(
        len(p).to_bytes(2, "big") + p for p in (identity.q_mgr.encode(), identity.queue.encode(), correl)
    )


@lru_cache(maxsize=64)
def broker_correl_id(qmgr: str) -> bytes:
    """The fixed, non-zero CorrelId of publications to subscribers without CorrelAsId."""
    return (b"PSCPUB  " + qmgr.encode("ascii", "replace")[:16]).ljust(24, b"\x00")


@dataclass
class Publication:
    """One publication being routed: decoded once, bodies cached per variant."""

    message: Message
    headers: rfh2.RFH2Body
    command: psc.Publish
    sub_point: str
    qmgr: str
    now: int
    path: brokerpath.BrokerPath | None = None
    _bodies: dict[tuple[tuple[str, ...], bool], bytes] = field(default_factory=dict)
    _stamp: tuple[str, str] | None = None
    _seeds: dict[bytes, bytes] = field(default_factory=dict)

    @property
    def stamp(self) -> tuple[str, str]:
        if self._stamp is None:
            self._stamp = mq_date_time(self.now)
        return self._stamp

    @property
    def origin_msg_id(self) -> bytes:
        return self.path.origin_msg_id if self.path is not None else self.message.msg_id

    def _id_seed(self, cause: bytes) -> bytes:
        """What every delivery MsgId of this publication (and cause) is derived from."""
        seed = self._seeds.get(cause)
        if seed is None:
            m = self.message
            seed = self._seeds[cause] = derived_id(
                b"pub", self.origin_msg_id, cause, m.put_date.encode(), m.put_time.encode()
            )
        return seed

    def body(self, topics: tuple[str, ...], retained: bool) -> bytes:
        key = (topics, retained)
        body = self._bodies.get(key)
        if body is None:
            delivered = psc.Publish(
                topics=topics,
                sub_point=self.sub_point or None,
                options=PubOpt.IsRetainedPub if retained else PubOpt(0),
                pub_time=self.command.pub_time,
                seq_num=self.command.seq_num,
            )
            body = self._encode(psc.render(delivered), extra=None)
            self._bodies[key] = body
        return body

    def _encode(self, psc_folder: str, extra: str | None) -> bytes:
        """The publisher's headers with its ``<psc>`` replaced and broker folders dropped."""
        headers = []
        placed = False
        for header in self.headers.headers:
            folders: list[str] = []
            for folder in header.folders:
                name = rfh2.folder_name(folder)
                if name == psc.FOLDER and not placed:
                    folders.append(psc_folder)
                    if extra is not None:
                        folders.append(extra)
                    placed = True
                elif name not in _BROKER_FOLDERS:
                    folders.append(folder)
            headers.append(replace(header, folders=tuple(folders)))
        return rfh2.encode(rfh2.RFH2Body(tuple(headers), self.headers.payload), encoding_of(self.message))

    def to_subscriber(
        self,
        subscription: Subscription,
        identity: Identity,
        topics: tuple[str, ...],
        *,
        retained: bool,
        expiry: int,
        cause: bytes = b"",
    ) -> Message:
        """The message for one subscriber. ``cause`` is the MsgId of the command that
        made the broker send it (RegSub/ReqUpdate for retained deliveries)."""
        flagged = retained and bool(subscription.options & _INFORM_IF_RET)
        date, time = self.stamp
        m = self.message
        return Message(
            body=self.body(topics, flagged),
            msg_id=blake2b(self._id_seed(cause) + _identity_bytes(identity), digest_size=24).digest(),
            correl_id=identity.correl_id or broker_correl_id(self.qmgr),
            format=MQFMT_RF_HEADER_2,
            encoding=encoding_of(m),
            ccsid=m.ccsid,
            msg_type=MQMT_DATAGRAM,
            report=0,
            reply_to_q="",
            reply_to_qmgr=self.qmgr,
            user_id=subscription.user_id[:USER_ID_LENGTH],
            persistence=_persistence(subscription.options, m.persistence),
            priority=m.priority,
            expiry=expiry,
            put_appl_type=MQAT_BROKER,
            put_appl_name=self.qmgr[:28],
            put_date=date,
            put_time=time,
        )

    def to_neighbour(
        self,
        neighbour: str,
        topics: tuple[str, ...],
        publisher: Identity,
        *,
        retained: bool,
        expiry: int,
        user_id: str,
        cause: bytes = b"",
    ) -> Message:
        """The publication re-published at ``neighbour``, carrying the path so far.
        ``cause`` distinguishes a retained copy sent for a proxy registration from
        the live forward, so the two never share a MsgId."""
        command = self.command
        options = command.options & _FORWARDED_OPTIONS
        if retained:
            options |= PubOpt.IsRetainedPub | PubOpt.RetainPub
        forwarded = psc.Publish(
            topics=topics,
            sub_point=self.sub_point or None,
            options=PubOpt(options),
            pub_time=command.pub_time,
            seq_num=command.seq_num,
            q_mgr_name=publisher.q_mgr,
            q_name=publisher.queue or None,
            correl_id=publisher.correl_id,
        )
        path = (
            self.path.through(self.qmgr)
            if self.path is not None
            else brokerpath.BrokerPath(self.message.msg_id, (self.qmgr,))
        )
        date, time = self.stamp
        m = self.message
        return Message(
            body=self._encode(psc.render(forwarded), extra=brokerpath.render(path)),
            msg_id=derived_id(b"fwd", self.origin_msg_id, cause, neighbour.encode(), m.put_date.encode()),
            correl_id=m.correl_id,
            format=MQFMT_RF_HEADER_2,
            encoding=encoding_of(m),
            ccsid=m.ccsid,
            msg_type=MQMT_DATAGRAM,
            report=0,
            reply_to_q="",
            reply_to_qmgr=self.qmgr,
            user_id=user_id[:USER_ID_LENGTH],
            persistence=m.persistence,
            priority=m.priority,
            expiry=expiry,
            put_appl_type=MQAT_BROKER,
            put_appl_name=self.qmgr[:28],
            put_date=date,
            put_time=time,
        )


_NON_PERS, _PERS, _PERS_AS_QUEUE = int(RegOpt.NonPers), int(RegOpt.Pers), int(RegOpt.PersAsQueue)
_INFORM_IF_RET = int(RegOpt.InformIfRet)


def _persistence(options: int, publisher: int) -> int:
    if options & _NON_PERS:
        return MQPER_NOT_PERSISTENT
    if options & _PERS:
        return MQPER_PERSISTENT
    if options & _PERS_AS_QUEUE:
        return MQPER_PERSISTENCE_AS_Q_DEF
    return publisher
