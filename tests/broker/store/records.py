"""What the state store's tests write and read: subscriptions, retained publications as the
broker takes them off a stream, and a process's view of the state through its own StateStore."""

from __future__ import annotations

from sqlalchemy import Engine

from broker import store
from broker.core.retained import RetainedPublication
from broker.core.state import BrokerConfig, BrokerState
from broker.core.subscription import Identity, Subscription, SubscriptionKey
from broker.protocol import brokerpath, psc, rfh2
from broker.protocol.messages import command_message
from broker.protocol.options import PubOpt, RegOpt
from queues.message import MQFMT_STRING, MQMT_DATAGRAM, MQPER_PERSISTENT, derive

QMGR = "QM1"
NOW = 1_767_225_600_000


def sub(
    topic: str,
    queue: str = "SUBQ",
    *,
    user: str = "alice",
    sub_point: str = "",
    correl_id: bytes | None = None,
    seq: int = 1,
    **fields: object,
) -> Subscription:
    return Subscription(
        key=SubscriptionKey(Identity(QMGR, queue, correl_id), sub_point, topic, None),
        user_id=user,
        options=int(RegOpt.PersAsPub),
        created_at=NOW,
        seq=seq,
        **fields,  # type: ignore[arg-type]
    )


def published(
    topic: str,
    body: bytes = b"payload",
    *,
    sub_point: str = "",
    folders: tuple[str, ...] = (),
    msg_id: bytes = b"P".ljust(24, b"\x00"),
    expiry: int = -1,
) -> RetainedPublication:
    """A retained publication exactly as the broker would have taken it off a stream queue."""
    command = psc.Publish(
        topics=(topic,),
        sub_point=sub_point or None,
        options=PubOpt.RetainPub,
        pub_time="20260101000000",
        seq_num="7",
        q_mgr_name=None,
        q_name=None,
        correl_id=None,
        folder="",
    )
    message = derive(
        command_message(command, payload=body, payload_format=MQFMT_STRING, folders=folders),
        msg_id=msg_id,
        correl_id=b"C".ljust(24, b"\x00"),
        msg_type=MQMT_DATAGRAM,
        user_id="alice",
        persistence=MQPER_PERSISTENT,
        priority=4,
        expiry=expiry,
        put_appl_name="publisher",
        put_date="20260101",
        put_time="00000000",
    )
    headers = rfh2.decode(message.body, message.encoding, message.format)
    parsed = psc.parse(headers.folders[0])
    assert isinstance(parsed, psc.Publish)
    path = None
    for folder in headers.folders:
        if rfh2.folder_name(folder) == brokerpath.FOLDER:
            path = brokerpath.parse(folder)
    return RetainedPublication(sub_point, topic, message, parsed, headers, NOW, path=path)


class Process:
    """One process's StateStore and its view of the state."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.store = store.StateStore(BrokerConfig(QMGR))
        with engine.begin() as conn:
            self.state = self.store.load(conn)

    def write(self, *effects: object) -> None:
        with self.engine.begin() as conn:
            self.store.write(conn, effects)  # type: ignore[arg-type]
        self.state.apply_all(effects)  # type: ignore[arg-type]

    def refresh(self) -> BrokerState:
        with self.engine.begin() as conn:
            self.state = self.store.refresh(conn, self.state)
        return self.state


def subscriptions_of(state: BrokerState) -> list[Subscription]:
    return sorted(state.subscriptions(), key=lambda s: s.seq)


def retained_of(state: BrokerState) -> list[RetainedPublication]:
    return sorted(state.all_retained(), key=lambda p: (p.sub_point, p.topic))


def version(engine: Engine) -> int:
    with engine.connect() as conn:
        return store.current_version(conn)
