"""The backlog both routers are compared on, and the comparison.

``prepare`` builds a broker database: queues (one shallow enough to overflow,
with PersAsQueue persistence), ACL rules (bob may not publish on Secret, carol
may not receive Sport/Tennis), subscriptions registered through the control
queue by the service itself (wildcards, InformIfRet, CorrelAsId subscribers
sharing one queue, PersAsQueue) and a neighbour's proxy subscription, so that
publications are forwarded through its transmission queue. ``backlog`` is the stream's content: every
message with an explicit MsgId, PutDate and PutTime, so two databases loaded
with it hold identical input. It mixes priorities and holds retained
publications, Local and OtherSubsOnly ones, partially authorised multi-topic
ones, requests whose reply cannot be put, poison messages, an expired message
and wildcard DeletePubs between retained publications.

``contents`` reads back everything routing writes, with the router's clock
taken out: PutDate/PutTime (also inside an MQDLH, and in the MQMD an MQXQH carries
on a transmission queue), the retained store's
``retained_at`` and subscriptions' ``created_at``. Everything else must be
equal, byte for byte, queue by queue, in get order.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Engine

from broker import store
from broker.admin.neighbours import add_neighbour
from broker.core.authority import AclRule, Permission, PrincipalKind
from broker.core.system import CONTROL_QUEUE, DEFAULT_STREAM, INTER_BROKER_QUEUE
from broker.service.config import Settings
from broker.service.provision import prepare_database
from broker.service.router import RoutingService
from broker.store import SubscriptionFilter
from queues import DEAD_LETTER_QUEUE, Message, QueueDefinition, QueueManager, dlh, make_engine, xqh
from queues.message import MQMT_DATAGRAM, MQMT_REPLY, MQMT_REQUEST, derive
from tests.broker.core.builders import correl, message, msg_id, psc_text

BATCH = 50  # the service's batch size in these tests (and the job's --batch-size)
SMALL_DEPTH = 5
QUEUES = {
    "SUB.A": {},
    "SUB.B": {},
    "SUB.C": {},
    "SUB.SHARED": {},
    "SUB.SMALL": {"max_depth": SMALL_DEPTH, "def_persistence": 1},
    "REPLIES": {"max_depth": 100_000},
}
# (user, topic, queue, options, correl id)
SUBSCRIPTIONS = (
    ("alice", "Sport/#", "SUB.A", ("InformIfRet",), None),
    ("alice", "Sport/+/+/Score", "SUB.B", (), None),
    ("alice", "News/#", "SUB.B", (), None),
    ("carol", "#", "SUB.C", (), None),
    ("dave", "Sport/Soccer/#", "SUB.SHARED", ("CorrelAsId",), correl("dave-soccer")),
    ("dave", "News/#", "SUB.SHARED", ("CorrelAsId",), correl("dave-news")),
    ("erin", "Sport/#", "SUB.SMALL", ("PersAsQueue",), None),
)
NEIGHBOUR = "QM2"  # a linked broker holding a proxy subscription here
POISON_BODY = b"RFH \x00\x00\x00\x02 this is not an MQRFH2 header"


@dataclass
class Broker:
    url: str
    engine: Engine
    qm: QueueManager
    settings: Settings

    def close(self) -> None:
        self.qm.close()

    def service(self) -> RoutingService:
        return RoutingService(self.qm, self.settings)

    def route_with_service(self) -> None:
        service = self.service()
        while self.qm.depth(DEFAULT_STREAM):
            service.route_queue(DEFAULT_STREAM)


def prepare(url: str) -> Broker:
    engine = make_engine(url)
    prepare_database(engine, "QM1")
    qm = QueueManager(engine, appl_name="broker", user_id="broker")
    broker = Broker(url, engine, qm, Settings(database_url=url, batch_size=BATCH))
    service = broker.service()
    service.prepare()
    for name, attributes in QUEUES.items():
        qm.define_queue(name, **attributes)
    with qm.unit_of_work() as uow:
        for principal, pattern, permission in (
            ("bob", "Secret", Permission.PUBLISH),
            ("carol", "Sport/Tennis", Permission.SUBSCRIBE),
        ):
            rule = AclRule(principal, PrincipalKind.USER, pattern, permission, allow=False)
            store.add_acl_rule(uow.connection, rule)
    add_neighbour(qm, NEIGHBOUR, "http://127.0.0.1:9", "a-link-token-of-16+", check_topology=False)
    registrations = [
        message(
            psc_text("RegSub", topic, opts=options, QName=queue),
            msg_id=msg_id(900 + n),
            msg_type=MQMT_DATAGRAM,
            user_id=user,
            correl_id=correl_id or bytes(24),
        )
        for n, (user, topic, queue, options, correl_id) in enumerate(SUBSCRIPTIONS)
    ]
    proxy = psc_text(
        "RegSub", "Sport/Soccer/#", opts=("PersAsPub",), QName=INTER_BROKER_QUEUE, QMgrName=NEIGHBOUR
    )
    registrations.append(message(proxy, msg_id=msg_id(999), msg_type=MQMT_DATAGRAM, user_id="mqm"))
    qm.put_many([(CONTROL_QUEUE, m) for m in registrations])
    service.route_queue(CONTROL_QUEUE)
    return broker


def backlog(count: int = 240) -> list[Message]:
    """The stream's input, in put order; the last one expires before routing starts."""
    messages = [_input(k) for k in range(count)]
    messages.append(_publish(count, "Sport/Soccer/Team1/Score", expiry=1))
    return messages


def load(broker: Broker, messages: list[Message]) -> None:
    broker.qm.put_many([(DEFAULT_STREAM, m) for m in messages])
    time.sleep(0.2)  # the expiring message (0.1 s) is gone for either router


def _publish(k: int, *topics: str, opts: tuple[str, ...] = (), **md: Any) -> Message:
    fields: dict[str, Any] = {
        "msg_id": msg_id(k),
        "msg_type": MQMT_DATAGRAM,
        "priority": k * 7 % 10,
        "put_time": f"{k // 100:02d}{k % 100:02d}0000",
        "reply_to_q": "REPLIES",
    }
    fields.update(md)
    return message(psc_text("Publish", *topics, opts=opts), payload=f"payload {k}".encode(), **fields)


def _input(k: int) -> Message:
    request = {"msg_type": MQMT_REQUEST}
    kind = k % 12
    if kind == 0:
        return _publish(k, f"Sport/Soccer/Team{k % 5}/Score")
    if kind == 1:  # every other reply goes to the neighbour, through its transmission queue
        remote = {"reply_to_qmgr": NEIGHBOUR} if k % 24 == 13 else {}
        return _publish(k, f"Sport/Tennis/Player{k % 3}/Score", **request, **remote)
    if kind == 2:
        return _publish(k, f"News/World/{k % 4}", opts=("RetainPub",))
    if kind == 3:
        return _publish(k, f"Sport/Soccer/State/Team{k % 3}", opts=("RetainPub",), **request)
    if kind == 4:  # partly (or, every other time, not at all) authorised
        topics = ("Secret/Plans", "Sport/Soccer/Team1/Score") if k % 24 == 4 else ("Secret/Plans",)
        return _publish(k, *topics, user_id="bob", **request)
    if kind == 5:  # the publisher is SUB.A's identity: OtherSubsOnly leaves it out
        return _publish(k, "Sport/Cricket/Score", opts=("OtherSubsOnly",), reply_to_q="SUB.A")
    if kind == 6:
        return _publish(k, "News/Local/Weather", opts=("Local", "RetainPub"))
    if kind == 7:  # its reply cannot be put (no such queue, no route to that queue manager)
        where = {"reply_to_q": "MISSING.Q"} if k % 24 == 7 else {"reply_to_qmgr": "QM9"}
        return _publish(k, "News/World/1", **request, **where)
    if kind == 8:
        return message("", body=POISON_BODY, msg_id=msg_id(k), priority=k % 10, reply_to_q="REPLIES")
    if kind == 9:
        return _publish(k, "Sport/Soccer/Team3/Score", msg_type=MQMT_REPLY)
    if kind == 10:
        deleted = "Sport/Soccer/State/#" if k % 24 == 10 else "News/World/+"
        return message(
            psc_text("DeletePub", deleted),
            msg_id=msg_id(k),
            priority=k * 7 % 10,
            reply_to_q="REPLIES",
        )
    return _publish(k, "Sport/Soccer/Team2/Score", "News/Sport", user_id="dave", correl_id=correl("dave-pub"))


# -- reading back ------------------------------------------------------------------------------


def _unclocked(m: Message, definition: QueueDefinition) -> Message:
    if definition.name == DEAD_LETTER_QUEUE:
        header, payload = dlh.decode(m.body, m.encoding)
        header = replace(header, put_date="", put_time="")
        m = derive(m, body=dlh.encode(header, m.encoding) + payload)
    elif definition.usage == "xmitq":
        queue, q_mgr, inner = xqh.decode(m.body)
        m = derive(m, body=xqh.encode(queue, q_mgr, derive(inner, put_date="", put_time="")))
    return derive(m, put_date="", put_time="")


def contents(broker: Broker) -> dict[str, Any]:
    """Everything routing wrote, clock readings removed."""
    qm = broker.qm
    queues: dict[str, Any] = {}
    for definition in qm.list_queues():
        browsed = qm.browse(definition.name, limit=1_000_000)
        queues[definition.name] = (
            definition.depth,
            [_unclocked(b.message, definition) for b in browsed],
        )
    with qm.reading() as conn:
        retained = sorted(
            ((p.sub_point, p.topic, p.message) for _, p in store.list_retained(conn, limit=100_000)),
            key=lambda entry: (entry[0], entry[1]),
        )
        listed = store.list_subscriptions(conn, SubscriptionFilter(), limit=10_000)
        subscriptions = sorted((replace(s, created_at=0) for _, s in listed), key=lambda s: s.seq)
    return {"queues": queues, "retained": retained, "subscriptions": subscriptions}
