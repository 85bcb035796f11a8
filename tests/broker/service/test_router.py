"""The routing service in this process, on both dialects, driven a batch at a time.

Commands are put on the broker's input queues the way an IBM application puts them (an MQRFH2
request whose ``<psc>`` holds the command); ``run_once``/``route_queue`` route them; the test then
reads what an application would read: its ``<pscr>`` reply, its subscriber queues, the dead-letter
queue, and the state tables another process would see.
"""

from __future__ import annotations

import gc
import logging
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, update

from broker import store
from broker.client import BrokerResponse, decode_publication, read_response
from broker.core import engine as routing_engine
from broker.core.authority import AclRule, Permission, PrincipalKind
from broker.core.effects import AddSubscription, RemoveSubscription
from broker.core.outgoing import broker_correl_id
from broker.core.state import BrokerConfig
from broker.core.subscription import Identity, Subscription, SubscriptionKey
from broker.core.system import CONTROL_QUEUE, DEFAULT_STREAM
from broker.service import router as service_module
from broker.service.collector import COLLECTOR_THRESHOLDS
from broker.service.router import RoutingService
from queues import DEAD_LETTER_QUEUE, MQError, QueueManager, Reason, UnitOfWork, make_engine
from queues.message import MQFMT_RF_HEADER_2, MQFMT_STRING, MQMI_NONE, MQMT_DATAGRAM, MQRO_NAN
from queues.schema import queues as queue_table
from tests.broker.core.builders import command_queue, message, psc_text
from tests.conftest import DIALECTS
from tests.e2e.harness import (
    ServiceThread,
    bodies,
    dead_letters,
    drain,
    emptied_database,
    service,
    shared_database,
)
from tests.statements import recorded

# One database per dialect for the module, emptied before each test (see tests.e2e.harness).
shared = pytest.fixture(scope="module", params=DIALECTS)(shared_database)
engine = pytest.fixture(emptied_database)

REPLY = "APP.REPLY"
ALICE, BOB = "alice", "bob"
SCORE = "Sport/Soccer/State/LatestScore/Team1 Team2"
NOT_AUTHORIZED = Reason.MQRCCF_NOT_AUTHORIZED
FOUR_MIB = 4 * 1024 * 1024


class Broker:
    """A routing service and an application on one database."""

    def __init__(self, qm: QueueManager, routing: RoutingService) -> None:
        self.qm = qm
        self.service = routing

    def define(self, *names: str, **attrs: Any) -> None:
        for name in names:
            self.qm.define_queue(name, **attrs)

    def put(self, folder: str, queue: str | None = None, **md: Any) -> bytes:
        """Put a command (a request from ``alice`` answered on APP.REPLY unless told otherwise)."""
        md.setdefault("user_id", ALICE)
        md.setdefault("reply_to_q", REPLY)
        target = queue or command_queue(folder)
        return self.qm.put(target, message(folder, msg_id=MQMI_NONE, put_date="", put_time="", **md))

    def route(self) -> int:
        return self.service.run_once()

    def command(self, folder: str, queue: str | None = None, **md: Any) -> BrokerResponse:
        """Put, route, and return the broker's reply."""
        msg_id = self.put(folder, queue, **md)
        self.route()
        return self.reply(msg_id)

    def reply(self, msg_id: bytes) -> BrokerResponse:
        return read_response(self.qm.get(REPLY, correl_id=msg_id))

    def subscribe(self, topic: str, queue: str, *opts: str, **md: Any) -> None:
        response = self.command(psc_text("RegSub", topic, opts=opts, QName=queue), **md)
        assert response.completion == "ok", response.describe()

    def publish(self, body: str, *topics: str, opts: tuple[str, ...] = (), **md: Any) -> BrokerResponse:
        return self.command(psc_text("Publish", *topics, opts=opts), payload=body.encode(), **md)

    def subscriptions(self) -> list[tuple[str, str]]:
        with self.qm.reading() as conn:
            found = store.list_subscriptions(conn, store.SubscriptionFilter(), limit=1000)
        return [(s.key.topic, s.identity.queue) for _, s in found]

    def retained(self) -> list[str]:
        with self.qm.reading() as conn:
            return [p.topic for _, p in store.list_retained(conn)]

    def add_rule(self, user: str, pattern: str, permission: Permission, allow: bool) -> None:
        with self.qm.engine.begin() as conn:
            store.add_acl_rule(conn, AclRule(user, PrincipalKind.USER, pattern, permission, allow))


@pytest.fixture
def broker(qm: QueueManager) -> Broker:
    routing = service(qm, batch_size=20)
    qm.define_queue(REPLY)
    return Broker(qm, routing)


def items(response: BrokerResponse) -> list[tuple[int, str | None]]:
    return [(i.reason, i.topic) for i in response.items]


# -- the seed scenarios ------------------------------------------------------------------------


def test_match_started_publication_reaches_matching_subscribers(broker: Broker) -> None:
    broker.define("SPORT.Q", "EVENTS.Q", "TENNIS.Q")
    broker.subscribe("Sport/#", "SPORT.Q")
    broker.subscribe("Sport/Soccer/Event/+", "EVENTS.Q", user_id=BOB)
    broker.subscribe("Sport/Tennis/#", "TENNIS.Q")

    response = broker.command(
        psc_text("Publish", "Sport/Soccer/Event/MatchStarted"),
        extra=("<usr><Match>Team1 v Team2</Match></usr>",),
        payload=b"kick-off",
    )

    assert response.completion == "ok"
    for queue, user in (("SPORT.Q", ALICE), ("EVENTS.Q", BOB)):
        (pub,) = drain(broker.qm, queue)
        assert pub.topics == ("Sport/Soccer/Event/MatchStarted",)
        assert (pub.body, pub.retained, pub.sub_point) == (b"kick-off", False, None)
        assert pub.folders == ("<usr><Match>Team1 v Team2</Match></usr>",)
        md = pub.message
        assert (md.format, md.msg_type, md.user_id) == (MQFMT_RF_HEADER_2, MQMT_DATAGRAM, user)
        assert md.correl_id == broker_correl_id("QM1")
    assert drain(broker.qm, "TENNIS.Q") == []


def test_late_subscriber_gets_the_latest_retained_score(broker: Broker) -> None:
    broker.define("SCORES.Q", "PLAIN.Q")
    assert broker.publish("1-0", SCORE, opts=("RetainPub",)).completion == "ok"
    assert broker.publish("2-1", SCORE, opts=("RetainPub",)).completion == "ok"
    assert broker.retained() == [SCORE]

    broker.subscribe("Sport/Soccer/State/LatestScore/#", "SCORES.Q", "InformIfRet")
    broker.subscribe(SCORE, "PLAIN.Q")

    (flagged,) = drain(broker.qm, "SCORES.Q")
    assert (flagged.topics, flagged.text, flagged.retained) == ((SCORE,), "2-1", True)
    (plain,) = drain(broker.qm, "PLAIN.Q")
    assert (plain.topics, plain.text, plain.retained) == ((SCORE,), "2-1", False)


# -- the scenarios ---------------------------------------------------------------------


def test_multi_topic_publish_with_partial_authority(broker: Broker) -> None:
    broker.define("ALL.Q", "TENNIS.Q")
    broker.add_rule(BOB, "Sport/Tennis", Permission.PUBLISH, False)
    broker.add_rule(BOB, "Sport/Golf", Permission.PUBLISH, False)
    broker.subscribe("#", "ALL.Q")
    broker.subscribe("Sport/Tennis/#", "TENNIS.Q")

    topics = ("Sport/Soccer/A", "Sport/Tennis/B", "News/C", "Sport/Golf/D")
    response = broker.publish("mixed", *topics, user_id=BOB)

    assert response.completion == "warning"
    assert items(response) == [(NOT_AUTHORIZED, "Sport/Tennis/B"), (NOT_AUTHORIZED, "Sport/Golf/D")]
    assert response.refused_topics == ("Sport/Tennis/B", "Sport/Golf/D")
    (delivered,) = drain(broker.qm, "ALL.Q")
    assert delivered.topics == ("Sport/Soccer/A", "News/C")
    assert drain(broker.qm, "TENNIS.Q") == []

    refused = broker.publish("none", "Sport/Tennis/B", "Sport/Golf/D", user_id=BOB)
    assert (refused.completion, items(refused)) == ("error", [(NOT_AUTHORIZED, "Sport/Tennis/B")])
    assert drain(broker.qm, "ALL.Q") == []


def test_other_subs_only_conference(broker: Broker) -> None:
    rooms = ("CONF.A", "CONF.B", "CONF.C")
    broker.define(*rooms)
    for room in rooms:
        broker.subscribe("Conference/Room1", room)

    folder = psc_text("Publish", "Conference/Room1", opts=("OtherSubsOnly",), QName="CONF.A")
    assert broker.command(folder, payload=b"hello from A").completion == "ok"
    assert drain(broker.qm, "CONF.A") == []
    assert [bodies(drain(broker.qm, room)) for room in rooms[1:]] == [["hello from A"], ["hello from A"]]

    # Without OtherSubsOnly the speaker hears itself too.
    folder = psc_text("Publish", "Conference/Room1", QName="CONF.A")
    assert broker.command(folder, payload=b"echo").completion == "ok"
    assert [bodies(drain(broker.qm, room)) for room in rooms] == [["echo"]] * 3


def test_correl_as_id_subscribers_share_one_queue(broker: Broker) -> None:
    broker.define("SHARED.Q")
    ibm, every = b"IBM-DESK".ljust(24, b"\x00"), b"ALL-DESK".ljust(24, b"\x00")
    broker.subscribe("Stocks/IBM", "SHARED.Q", "CorrelAsId", correl_id=ibm)
    broker.subscribe("Stocks/#", "SHARED.Q", "CorrelAsId", correl_id=every)

    broker.publish("IBM 120", "Stocks/IBM")
    broker.publish("HPQ 30", "Stocks/HPQ")

    assert broker.qm.depth("SHARED.Q") == 3
    assert bodies(drain(broker.qm, "SHARED.Q", ibm)) == ["IBM 120"]
    everything = drain(broker.qm, "SHARED.Q", every)
    assert bodies(everything) == ["IBM 120", "HPQ 30"]
    assert {p.message.correl_id for p in everything} == {every}


def test_pub_on_req_only_and_request_update(broker: Broker) -> None:
    broker.define("ONREQ.Q")
    broker.publish("sunny", "Weather/London", opts=("RetainPub",))
    broker.subscribe("Weather/#", "ONREQ.Q", "PubOnReqOnly")
    broker.publish("rain", "Weather/London", opts=("RetainPub",))
    broker.publish("fog", "Weather/Paris")
    assert drain(broker.qm, "ONREQ.Q") == []

    response = broker.command(psc_text("ReqUpdate", "Weather/#", QName="ONREQ.Q"))
    assert response.completion == "ok"
    (update,) = drain(broker.qm, "ONREQ.Q")
    assert (update.topics, update.text) == (("Weather/London",), "rain")

    missing = broker.command(psc_text("ReqUpdate", "Weather/Paris", QName="ONREQ.Q"))
    assert (missing.completion, items(missing)) == (
        "error",
        [(Reason.MQRCCF_NOT_REGISTERED, "Weather/Paris")],
    )


def test_delete_publication(broker: Broker) -> None:
    broker.define("LATE.Q", "LATER.Q")
    broker.publish("sunny", "Weather/London", opts=("RetainPub",))
    broker.publish("cloudy", "Weather/Paris", opts=("RetainPub",))

    assert broker.command(psc_text("DeletePub", "Weather/London")).completion == "ok"
    assert broker.retained() == ["Weather/Paris"]
    broker.subscribe("Weather/#", "LATE.Q")
    assert bodies(drain(broker.qm, "LATE.Q")) == ["cloudy"]

    assert broker.command(psc_text("DeletePub", "Weather/#")).completion == "ok"
    assert broker.retained() == []
    broker.subscribe("Weather/#", "LATER.Q")
    assert drain(broker.qm, "LATER.Q") == []


@pytest.fixture
def later(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Move the service's clock forward, as if ``seconds`` had passed."""

    def advance(seconds: float) -> None:
        now = service_module.now_ms
        monkeypatch.setattr(service_module, "now_ms", lambda: now() + int(seconds * 1000))

    return advance


def test_expired_subscriptions_are_removed(broker: Broker, later: Any) -> None:
    broker.define("SHORT.Q", "IDLE.Q", "LONG.Q")
    broker.subscribe("News/#", "SHORT.Q", expiry=50)  # MQMD Expiry of the RegSub: 5 s
    broker.subscribe("Idle/#", "IDLE.Q", expiry=50)
    broker.subscribe("News/#", "LONG.Q")
    broker.publish("early", "News/Today")
    assert bodies(drain(broker.qm, "SHORT.Q")) == ["early"]
    with broker.qm.reading() as conn:
        (short,) = [s for _, s in store.list_subscriptions(conn, store.SubscriptionFilter(queue="SHORT.Q"))]
    assert short.expires_at is not None and 4_000 < short.expires_at - short.created_at <= 5_000

    later(6)
    broker.publish("late", "News/Today")

    assert drain(broker.qm, "SHORT.Q") == []
    assert bodies(drain(broker.qm, "LONG.Q")) == ["early", "late"]
    # Met while routing: removed by that batch; never met: removed by housekeeping.
    assert broker.subscriptions() == [("Idle/#", "IDLE.Q"), ("News/#", "LONG.Q")]
    broker.service.housekeeping()
    assert broker.subscriptions() == [("News/#", "LONG.Q")]


def test_expired_retained_publications_are_not_delivered(broker: Broker, later: Any) -> None:
    broker.define("LATE.Q")
    broker.publish("brief", "Flash/News", opts=("RetainPub",), expiry=50)
    broker.publish("lasting", "Flash/Sport", opts=("RetainPub",))
    later(6)

    broker.subscribe("Flash/#", "LATE.Q")

    assert bodies(drain(broker.qm, "LATE.Q")) == ["lasting"]
    assert broker.retained() == ["Flash/Sport"]
    missing = broker.command(psc_text("ReqUpdate", "Flash/#", QName="LATE.Q"))
    assert (missing.completion, items(missing)) == ("ok", [])
    assert bodies(drain(broker.qm, "LATE.Q")) == ["lasting"]


# -- poison messages and failing deliveries ----------------------------------------------------


BILLION_LAUGHS = (
    '<!DOCTYPE psc [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">'
    '<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">]>'
    "<psc><Command>Publish</Command><Topic>&c;</Topic></psc>"
)  # refused by the <psc> parser before any expansion: a DOCTYPE is a parameter error (2337)
ENTITY_REFERENCE = "<psc><Command>Publish</Command><Topic>&c;</Topic></psc>"  # refused by the <psc> parser


@pytest.fixture
def exploding_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine fails (a defect) on any message whose body mentions BOOM."""
    route = routing_engine.route

    def failing(m: Any, *args: Any, **kwargs: Any) -> Any:
        if b"BOOM" in m.body:
            raise RuntimeError("defect injected by the test")
        return route(m, *args, **kwargs)

    monkeypatch.setattr(routing_engine, "route", failing)


def test_poison_messages_in_the_middle_of_a_batch(broker: Broker, exploding_engine: None) -> None:
    broker.define("NEWS.Q")
    broker.subscribe("News/#", "NEWS.Q")
    good = lambda n: broker.put(psc_text("Publish", "News/Flash"), payload=f"good {n}".encode())  # noqa: E731
    good(1)
    not_rfh2 = broker.qm.put(
        DEFAULT_STREAM,
        message(
            "",
            body=b"plain text, no MQRFH2",
            format=MQFMT_STRING,
            msg_id=MQMI_NONE,
            user_id=ALICE,
            reply_to_q=REPLY,
        ),
    )
    good(2)
    laughs = broker.put(BILLION_LAUGHS)
    good(3)
    boom = broker.put(psc_text("Publish", "News/Flash"), payload=b"BOOM")
    silent = broker.put(ENTITY_REFERENCE, msg_type=MQMT_DATAGRAM)  # asks for no reply
    good(4)

    result = broker.service.route_queue(DEFAULT_STREAM)

    assert result.messages == 8
    assert bodies(drain(broker.qm, "NEWS.Q")) == ["good 1", "good 2", "good 3", "good 4"]
    assert broker.qm.depth(DEFAULT_STREAM) == 0
    dead = [(d.header.reason, d.header.dest_q_name, d.original.msg_id) for d in dead_letters(broker.qm)]
    assert dead == [
        (Reason.MQRCCF_MD_FORMAT_ERROR, DEFAULT_STREAM, not_rfh2),
        (Reason.MQRC_RFH_PARM_ERROR, DEFAULT_STREAM, laughs),
        (Reason.MQRCCF_COMMAND_FAILED, DEFAULT_STREAM, boom),
        (Reason.MQRC_RFH_PARM_ERROR, DEFAULT_STREAM, silent),
    ]
    assert items(broker.reply(not_rfh2)) == [(Reason.MQRCCF_MD_FORMAT_ERROR, None)]
    laughs_reply = broker.reply(laughs)
    assert (laughs_reply.completion, items(laughs_reply)) == ("error", [(Reason.MQRC_RFH_PARM_ERROR, None)])
    boom_reply = broker.reply(boom)
    assert (boom_reply.completion, items(boom_reply)) == ("error", [(Reason.MQRCCF_COMMAND_FAILED, None)])
    assert broker.qm.depth(REPLY) == 4  # the four good publications' ok replies
    assert broker.service.metrics.as_dict()["dead_lettered"] == 4


def test_a_hostile_prolog_is_dead_lettered_at_once_and_stalls_nothing(broker: Broker) -> None:
    """A 276-byte folder whose prolog a backtracking scan splits 2**26 ways before it gives up."""
    broker.define("NEWS.Q")
    broker.subscribe("News/#", "NEWS.Q")
    hostile = broker.put("<!---->" * 26 + "x", queue=DEFAULT_STREAM, msg_type=MQMT_DATAGRAM)
    publish_news(broker, 1)

    started = time.perf_counter()
    broker.route()

    assert time.perf_counter() - started < 2.0
    assert bodies(drain(broker.qm, "NEWS.Q")) == ["news 1"]
    assert [(d.header.reason, d.original.msg_id) for d in dead_letters(broker.qm)] == [
        (Reason.MQRC_RFH_ERROR, hostile)
    ]


def test_the_loop_is_not_stalled_by_poison(broker: Broker, exploding_engine: None) -> None:
    """The same mix through ``run``: every good message behind the poison is routed."""
    broker.define("NEWS.Q")
    broker.subscribe("News/#", "NEWS.Q")
    for n in range(6):
        broker.put(psc_text("Publish", "News/Flash"), payload=b"BOOM" if n % 3 == 1 else f"good {n}".encode())
        broker.put(BILLION_LAUGHS, msg_type=MQMT_DATAGRAM, report=MQRO_NAN)
    loop = ServiceThread(broker.service).start()
    try:
        deadline = time.monotonic() + 20
        while broker.qm.depth(DEFAULT_STREAM) and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        loop.stop()
    assert bodies(drain(broker.qm, "NEWS.Q")) == ["good 0", "good 2", "good 3", "good 5"]
    reasons = [d.header.reason for d in dead_letters(broker.qm)]
    assert sorted(reasons) == [Reason.MQRC_RFH_PARM_ERROR] * 6 + [Reason.MQRCCF_COMMAND_FAILED] * 2
    assert broker.qm.depth(REPLY) == 4 + 6 + 2  # ok for the good ones, errors for the NAN datagrams and BOOMs


def test_a_batch_that_fails_is_retried_message_by_message(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure while writing a batch's effects (a defect, a constraint) is pinned on the one message
    that causes it: that one is dead-lettered with 3008, the others go through."""
    broker.define("ALL.Q")
    broker.subscribe("#", "ALL.Q")
    write = store.StateStore.write

    def failing(self: store.StateStore, conn: Any, effects: Any) -> None:
        effects = list(effects)
        if any(getattr(e, "publication", None) and e.publication.topic == "Bad/Topic" for e in effects):
            raise RuntimeError("constraint violated")
        write(self, conn, effects)

    monkeypatch.setattr(store.StateStore, "write", failing)
    first = broker.put(psc_text("Publish", "Good/One", opts=("RetainPub",)), payload=b"1")
    bad = broker.put(psc_text("Publish", "Bad/Topic", opts=("RetainPub",)), payload=b"2")
    last = broker.put(psc_text("Publish", "Good/Two", opts=("RetainPub",)), payload=b"3")

    assert broker.service.route_queue(DEFAULT_STREAM).messages == 3

    assert bodies(drain(broker.qm, "ALL.Q")) == ["1", "3"]
    assert broker.retained() == ["Good/One", "Good/Two"]
    assert [(d.header.reason, d.original.msg_id) for d in dead_letters(broker.qm)] == [
        (Reason.MQRCCF_COMMAND_FAILED, bad)
    ]
    assert broker.reply(first).completion == broker.reply(last).completion == "ok"
    assert items(broker.reply(bad)) == [(Reason.MQRCCF_COMMAND_FAILED, None)]
    assert broker.qm.depth(DEFAULT_STREAM) == 0


def test_full_subscriber_queue_dead_letters_only_that_delivery(broker: Broker) -> None:
    broker.define("FULL.Q", max_depth=1)
    broker.define("OK.Q")
    broker.qm.put("FULL.Q", message("<x/>", msg_id=MQMI_NONE))
    broker.subscribe("Prices/#", "FULL.Q")
    broker.subscribe("Prices/#", "OK.Q")

    assert broker.publish("42", "Prices/Gold").completion == "ok"

    assert bodies(drain(broker.qm, "OK.Q")) == ["42"]
    (dead,) = dead_letters(broker.qm)
    assert (dead.header.reason, dead.header.dest_q_name) == (Reason.MQRC_Q_FULL, "FULL.Q")
    assert (dead.publication.topics, dead.publication.text) == (("Prices/Gold",), "42")
    assert broker.qm.depth("FULL.Q") == 1


def test_deleted_subscriber_queue_dead_letters_with_2085(broker: Broker) -> None:
    broker.define("GONE.Q", "OK.Q")
    broker.subscribe("Prices/#", "GONE.Q")
    broker.subscribe("Prices/#", "OK.Q")
    broker.qm.delete_queue("GONE.Q")

    assert broker.publish("42", "Prices/Gold").completion == "ok"

    assert bodies(drain(broker.qm, "OK.Q")) == ["42"]
    (dead,) = dead_letters(broker.qm)
    assert (dead.header.reason, dead.header.dest_q_name) == (Reason.MQRC_UNKNOWN_OBJECT_NAME, "GONE.Q")


def test_subscriptions_of_a_deleted_temporary_queue_are_removed(broker: Broker) -> None:
    broker.define("AMQ.TEMP.1", definition_type="tempdyn")
    broker.define("KEEP.Q")
    broker.subscribe("Prices/#", "AMQ.TEMP.1")
    broker.subscribe("News/#", "AMQ.TEMP.1")
    broker.subscribe("Prices/#", "KEEP.Q")
    broker.service.housekeeping()
    assert len(broker.subscriptions()) == 3  # the queue still exists

    broker.qm.delete_queue("AMQ.TEMP.1")
    broker.service.housekeeping()

    assert broker.subscriptions() == [("Prices/#", "KEEP.Q")]
    assert broker.publish("42", "Prices/Gold").completion == "ok"
    assert dead_letters(broker.qm) == []


def test_an_abandoned_temporary_queue_goes_with_its_subscriptions(broker: Broker) -> None:
    """A temporary dynamic queue nobody holds open any more (its creator ended without
    closing it) is deleted by housekeeping once past its grace period, as MQ deletes it
    with its connection; then its subscriptions go too."""
    broker.define("AMQ.ABANDONED", definition_type="tempdyn")
    broker.define("AMQ.YOUNG", definition_type="tempdyn")
    broker.subscribe("Prices/#", "AMQ.ABANDONED")
    with broker.qm.engine.begin() as conn:  # defined long ago
        conn.execute(update(queue_table).where(queue_table.c.name == "AMQ.ABANDONED").values(created_at=0))
    broker.service.housekeeping()
    assert [q.name for q in broker.qm.list_queues("AMQ.*")] == ["AMQ.YOUNG"]
    broker.service.housekeeping()
    assert broker.subscriptions() == []


# -- messages the dead-letter queue cannot hold ------------------------------------------------


def put_oversized_poison(broker: Broker) -> bytes:
    """A stream message that is not MQRFH2 and fills MAXMSGL (4 MiB) to within an MQDLH's 172
    bytes: the dead-letter queue, whose MAXMSGL is the same, cannot hold it behind its header."""
    size = broker.qm.inquire_queue(DEAD_LETTER_QUEUE).max_msg_length - 100
    poison = message("", body=b"x" * size, format=MQFMT_STRING, msg_id=MQMI_NONE, msg_type=MQMT_DATAGRAM)
    return broker.qm.put(DEFAULT_STREAM, poison)


def publish_news(broker: Broker, *numbers: int) -> None:
    for n in numbers:
        broker.put(psc_text("Publish", "News/Flash"), payload=f"news {n}".encode(), msg_type=MQMT_DATAGRAM)


def logged(caplog: pytest.LogCaptureFixture, msg: str) -> list[Any]:
    return [record for record in caplog.records if record.msg == msg]


def test_a_message_the_dead_letter_queue_cannot_hold_is_left_on_its_queue_and_passed_over(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    broker.define("NEWS.Q")
    broker.subscribe("News/#", "NEWS.Q")
    publish_news(broker, 0)
    poison = put_oversized_poison(broker)
    publish_news(broker, 1, 2)

    broker.route()

    assert bodies(drain(broker.qm, "NEWS.Q")) == ["news 0", "news 1", "news 2"]
    (left,) = [b.message for b in broker.qm.browse(DEFAULT_STREAM)]
    assert left.msg_id == poison and left.backout_count > 0  # each unit of work it failed in was backed out
    assert dead_letters(broker.qm) == []
    (record,) = logged(caplog, "message left on its queue: the dead-letter queue refused it")
    assert (record.levelname, record.queue, record.msg_id) == ("ERROR", DEFAULT_STREAM, poison.hex())
    assert record.dead_letter_reason == Reason.MQRC_MSG_TOO_BIG_FOR_Q

    publish_news(broker, 3)  # passed over: what follows is routed, the poison is not tried again
    broker.route()
    broker.route()
    assert bodies(drain(broker.qm, "NEWS.Q")) == ["news 3"]
    assert [b.message.backout_count for b in broker.qm.browse(DEFAULT_STREAM)] == [left.backout_count]


def test_a_message_the_dead_letter_queue_cannot_hold_goes_to_its_queues_backout_queue(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    broker.define("NEWS.Q")
    broker.define("STREAM.BOQ")
    broker.qm.alter_queue(DEFAULT_STREAM, backout_requeue_q="STREAM.BOQ")
    broker.subscribe("News/#", "NEWS.Q")
    poison = put_oversized_poison(broker)
    publish_news(broker, 1)

    broker.route()

    assert bodies(drain(broker.qm, "NEWS.Q")) == ["news 1"]
    assert broker.qm.depth(DEFAULT_STREAM) == 0
    moved = broker.qm.get("STREAM.BOQ")
    assert (moved.msg_id, moved.format, len(moved.body)) == (poison, MQFMT_STRING, FOUR_MIB - 100)
    (record,) = logged(caplog, "message moved to its queue's backout queue: the dead-letter queue refused it")
    assert (record.queue, record.backout_queue) == (DEFAULT_STREAM, "STREAM.BOQ")


def test_a_message_left_on_its_queue_is_dead_lettered_once_the_dead_letter_queue_can_hold_it(
    broker: Broker,
) -> None:
    poison = put_oversized_poison(broker)
    broker.route()
    assert broker.qm.depth(DEFAULT_STREAM) == 1

    broker.qm.alter_queue(DEAD_LETTER_QUEUE, max_msg_length=2 * FOUR_MIB)  # the operator makes room
    broker.route()

    assert broker.qm.depth(DEFAULT_STREAM) == 0
    (dead,) = dead_letters(broker.qm)
    assert (dead.original.msg_id, dead.header.dest_q_name) == (poison, DEFAULT_STREAM)


def test_the_loop_routes_on_past_a_message_the_dead_letter_queue_cannot_hold(broker: Broker) -> None:
    broker.define("NEWS.Q")
    broker.subscribe("News/#", "NEWS.Q")
    put_oversized_poison(broker)
    publish_news(broker, 1, 2)
    loop = ServiceThread(broker.service).start()
    try:
        deadline = time.monotonic() + 20
        while broker.qm.depth("NEWS.Q") < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        publish_news(broker, 3)
        while broker.qm.depth("NEWS.Q") < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        loop.stop()  # fails the test if the loop ended on its own
    assert bodies(drain(broker.qm, "NEWS.Q")) == ["news 1", "news 2", "news 3"]
    assert broker.qm.depth(DEFAULT_STREAM) == 1


# -- missing and inhibited broker queues -------------------------------------------------------


def test_an_inhibited_control_queue_is_passed_over_and_picked_up_again(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "broker.service")
    broker.define("NEWS.Q")
    broker.subscribe("News/#", "NEWS.Q")
    # A running broker holds its queues open (queues.opens): gets on one are inhibited while it
    # is stopped, or in the database itself; the broker starts again (its next round) with it so.
    broker.qm.close_queues(broker.service.instance)
    broker.qm.alter_queue(CONTROL_QUEUE, get_enabled=False)
    subscribe = broker.put(psc_text("RegSub", "Sport/#", QName="NEWS.Q"))
    publish_news(broker, 1)

    broker.route()
    broker.route()  # logged once, not at every round

    assert bodies(drain(broker.qm, "NEWS.Q")) == ["news 1"]
    assert broker.qm.depth(CONTROL_QUEUE) == 1
    (record,) = logged(caplog, "broker queue unusable")
    assert (record.levelname, record.queue, record.reason) == (
        "ERROR",
        CONTROL_QUEUE,
        Reason.MQRC_GET_INHIBITED,
    )

    broker.qm.alter_queue(CONTROL_QUEUE, get_enabled=True)
    broker.route()

    assert broker.reply(subscribe).completion == "ok"
    (record,) = logged(caplog, "broker queue usable again")
    assert record.queue == CONTROL_QUEUE


def test_a_queue_inhibited_between_the_look_and_the_get_routes_nothing(broker: Broker) -> None:
    broker.put(psc_text("RegSub", "Sport/#", QName=REPLY))
    broker.qm.alter_queue(CONTROL_QUEUE, get_enabled=False)

    assert broker.service.route_queue(CONTROL_QUEUE).messages == 0
    broker.qm.delete_queue(DEFAULT_STREAM)
    assert broker.service.route_queue(DEFAULT_STREAM).messages == 0
    assert broker.qm.depth(CONTROL_QUEUE) == 1


def test_without_a_dead_letter_queue_poison_stays_on_its_queue_until_there_is_one(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "broker.service")
    broker.qm.delete_queue(DEAD_LETTER_QUEUE)
    poison = broker.qm.put(
        CONTROL_QUEUE,
        message("", body=b"not MQRFH2", format=MQFMT_STRING, msg_id=MQMI_NONE, msg_type=MQMT_DATAGRAM),
    )
    subscribe = broker.put(psc_text("RegSub", "Sport/#", QName=REPLY))

    broker.route()

    assert broker.reply(subscribe).completion == "ok"  # the command behind it went through
    assert [b.message.msg_id for b in broker.qm.browse(CONTROL_QUEUE)] == [poison]
    (problem,) = logged(caplog, "broker queue unusable")
    assert (problem.queue, problem.reason) == (DEAD_LETTER_QUEUE, Reason.MQRC_UNKNOWN_OBJECT_NAME)
    (left,) = logged(caplog, "message left on its queue: the dead-letter queue refused it")
    assert left.dead_letter_reason == Reason.MQRC_UNKNOWN_OBJECT_NAME

    QueueManager.create(broker.qm.engine, "QM1")  # defines the dead-letter queue again
    broker.route()

    assert broker.qm.depth(CONTROL_QUEUE) == 0
    assert [(d.original.msg_id, d.header.reason) for d in dead_letters(broker.qm)] == [
        (poison, Reason.MQRCCF_MD_FORMAT_ERROR)
    ]
    assert logged(caplog, "broker queue usable again")[0].queue == DEAD_LETTER_QUEUE


def test_a_deleted_stream_is_reported_and_routed_again_once_defined(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    broker.define("NEWS.Q")
    broker.qm.delete_queue(DEFAULT_STREAM)
    broker.subscribe("News/#", "NEWS.Q")  # the control queue is served meanwhile
    (problem,) = logged(caplog, "broker queue unusable")
    assert (problem.queue, problem.reason) == (DEFAULT_STREAM, Reason.MQRC_UNKNOWN_OBJECT_NAME)

    broker.service.prepare()  # what a restart does: the system queues are defined again
    publish_news(broker, 1)
    broker.route()

    assert bodies(drain(broker.qm, "NEWS.Q")) == ["news 1"]


# -- state across processes and restarts -------------------------------------------------------


def test_restart_keeps_subscriptions_and_retained_publications(broker: Broker, engine: Engine) -> None:
    broker.define("EARLY.Q", "LATE.Q")
    broker.subscribe("Sport/#", "EARLY.Q")
    broker.publish("2-1", SCORE, opts=("RetainPub",))
    assert bodies(drain(broker.qm, "EARLY.Q")) == ["2-1"]

    url = engine.url.render_as_string(hide_password=False)
    with QueueManager(make_engine(url), appl_name="restarted") as qm:
        restarted = Broker(qm, service(qm, batch_size=20))
        assert restarted.publish("3-1", SCORE, opts=("RetainPub",)).completion == "ok"
        restarted.subscribe("Sport/Soccer/#", "LATE.Q")

    assert bodies(drain(broker.qm, "EARLY.Q")) == ["3-1"]
    assert bodies(drain(broker.qm, "LATE.Q")) == ["3-1"]


@pytest.fixture
def other_process(engine: Engine) -> Iterator[tuple[Engine, store.StateStore]]:
    """Another process's engine and state store on the same database (the admin API, the CLI)."""
    other = make_engine(engine.url.render_as_string(hide_password=False))
    yield other, store.StateStore(BrokerConfig("QM1"))
    other.dispose()


def test_changes_made_by_another_process_are_honoured_at_the_next_batch(
    broker: Broker, other_process: tuple[Engine, store.StateStore]
) -> None:
    other, other_store = other_process
    broker.define("ADMIN.Q")
    broker.publish("before", "Ops/Alert")  # the service has loaded its state
    made = Subscription(
        SubscriptionKey(Identity("QM1", "ADMIN.Q"), "", "Ops/#"), ALICE, 0, created_at=1, seq=1
    )
    with other.begin() as conn:
        other_store.write(conn, [AddSubscription(made)])

    broker.publish("after", "Ops/Alert")
    assert bodies(drain(broker.qm, "ADMIN.Q")) == ["after"]

    with other.begin() as conn:
        store.add_acl_rule(conn, AclRule(ALICE, PrincipalKind.USER, "Ops", Permission.PUBLISH, False))
    refused = broker.publish("denied", "Ops/Alert")
    assert (refused.completion, items(refused)) == ("error", [(NOT_AUTHORIZED, "Ops/Alert")])

    with other.begin() as conn:
        other_store.write(conn, [RemoveSubscription(made.key)])
    assert broker.publish("gone", "Ops/Alert", user_id=BOB).completion == "ok"
    assert drain(broker.qm, "ADMIN.Q") == []


@pytest.fixture
def statements(engine: Engine) -> Iterator[list[str]]:
    with recorded(engine) as seen:
        yield seen


def test_state_check_costs_one_query_per_batch_when_nothing_changed(
    broker: Broker, statements: list[str]
) -> None:
    broker.define("Q")
    broker.subscribe("A/#", "Q")  # the batch that wrote it needs no re-read afterwards
    for n in range(3):
        broker.put(psc_text("Publish", "A/B"), payload=str(n).encode())
    statements.clear()

    assert broker.service.route_queue(DEFAULT_STREAM).messages == 3

    # One state query, plus the stream's lease check (one indexed read; see broker.store.leases).
    state_queries = [s for s in statements if "psb_" in s and "psb_leases" not in s]
    assert [s.split(" WHERE ")[0] for s in state_queries] == ["SELECT psb_meta.version FROM psb_meta"]
    assert len([s for s in statements if "psb_leases" in s]) == 1
    assert len(drain(broker.qm, "Q")) == 3


def test_heartbeat_publishes_the_statistics(broker: Broker) -> None:
    broker.define("Q")
    broker.subscribe("A/#", "Q")
    broker.publish("x", "A/B")
    broker.put(BILLION_LAUGHS, msg_type=MQMT_DATAGRAM)
    broker.route()

    broker.service.heartbeat()

    with broker.qm.reading() as conn:
        (instance,) = store.list_instances(conn, alive_within_ms=60_000)
    assert instance["instance"] == broker.service.instance
    assert instance["role"] == "router"
    stats = instance["stats"]
    assert stats == broker.service.metrics.as_dict() | {"last_errors": stats["last_errors"]}
    assert (stats["messages"], stats["publications"], stats["deliveries"], stats["dead_lettered"]) == (
        3,
        1,
        1,
        1,
    )
    assert stats["replies"] == 2
    assert stats["refusals"] == {"2337 MQRC_RFH_PARM_ERROR": 1}


# -- exactly once ------------------------------------------------------------------------------


def _fail_once(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, error: BaseException) -> list[int]:
    calls: list[int] = []
    original = getattr(owner, name)

    def failing(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise error
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, failing)
    return calls


def test_effects_and_input_removal_are_one_transaction(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker.define("SUB.Q")
    broker.subscribe("Sport/#", "SUB.Q")
    msg_id = broker.put(psc_text("Publish", SCORE, opts=("RetainPub",)), payload=b"1-0")
    lost = MQError(Reason.MQRC_CONNECTION_BROKEN, "database went away")
    _fail_once(monkeypatch, store.StateStore, "write", lost)

    with pytest.raises(MQError) as raised:
        broker.service.route_queue(DEFAULT_STREAM)

    assert raised.value.reason == Reason.MQRC_CONNECTION_BROKEN
    assert (broker.qm.depth("SUB.Q"), broker.qm.depth(REPLY)) == (0, 0)
    assert broker.qm.depth(DEFAULT_STREAM) == 1
    assert broker.retained() == []
    assert dead_letters(broker.qm) == []

    assert broker.service.route_queue(DEFAULT_STREAM).messages == 1
    assert bodies(drain(broker.qm, "SUB.Q")) == ["1-0"]
    assert broker.reply(msg_id).completion == "ok"
    assert broker.qm.depth(REPLY) == 0
    assert broker.retained() == [SCORE]
    assert broker.qm.depth(DEFAULT_STREAM) == 0


def test_a_failed_commit_leaves_no_trace_in_memory(
    broker: Broker, monkeypatch: pytest.MonkeyPatch, other_process: tuple[Engine, store.StateStore]
) -> None:
    """The batch's changes were applied in memory and its version taken before the commit failed:
    the next batch must not trust either, or it misses what other processes committed meanwhile."""
    other, other_store = other_process
    broker.define("MINE.Q", "THEIRS.Q")
    broker.publish("warm-up", "X")
    broker.put(psc_text("RegSub", "Sport/#", QName="MINE.Q"))
    lost = MQError(Reason.MQRC_CONNECTION_BROKEN, "database went away at commit")
    _fail_once(monkeypatch, UnitOfWork, "commit", lost)
    with pytest.raises(MQError):
        broker.service.route_queue(CONTROL_QUEUE)
    monkeypatch.undo()

    theirs = Subscription(
        SubscriptionKey(Identity("QM1", "THEIRS.Q"), "", "Sport/#"), BOB, 0, created_at=1, seq=9
    )
    with other.begin() as conn:
        other_store.write(conn, [AddSubscription(theirs)])
    broker.route()  # the RegSub again, then the publication below
    broker.publish("goal", "Sport/Soccer")

    assert bodies(drain(broker.qm, "MINE.Q")) == ["goal"]
    assert bodies(drain(broker.qm, "THEIRS.Q")) == ["goal"]


@pytest.mark.parametrize(
    "error",
    [
        psycopg.errors.IdleInTransactionSessionTimeout(
            "terminating connection due to idle-in-transaction timeout"
        ),
        sqlite3.OperationalError("disk I/O error"),
    ],
    ids=["postgresql-session-ended", "sqlite-io"],
)
def test_a_database_lost_under_the_state_store_is_retried_not_isolated(
    broker: Broker, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    """A driver error that says the database is gone, raised by a statement the queue manager
    did not run, is the database's fault, not the batch's: no message is isolated or
    dead-lettered; the loop waits and routes the batch again."""
    broker.define("SUB.Q")
    broker.subscribe("#", "SUB.Q")
    broker.put(psc_text("Publish", "T"), payload=b"0")
    calls = _fail_once(monkeypatch, store.StateStore, "write", error)

    with pytest.raises(MQError) as raised:
        broker.service.route_queue(DEFAULT_STREAM)

    assert raised.value.reason == Reason.MQRC_CONNECTION_BROKEN
    assert len(calls) == 1
    assert dead_letters(broker.qm) == []
    assert broker.service.route_queue(DEFAULT_STREAM).messages == 1
    assert bodies(drain(broker.qm, "SUB.Q")) == ["0"]


def test_a_transient_batch_failure_delivers_exactly_once(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker.define("SUB.Q")
    broker.subscribe("#", "SUB.Q")
    for n in range(3):
        broker.put(psc_text("Publish", "T", opts=("RetainPub",)), payload=str(n).encode())
    calls = _fail_once(monkeypatch, store.StateStore, "write", RuntimeError("transient"))

    assert broker.service.route_queue(DEFAULT_STREAM).messages == 3

    assert len(calls) == 4  # the failed batch, then each message alone
    assert bodies(drain(broker.qm, "SUB.Q")) == ["0", "1", "2"]
    assert dead_letters(broker.qm) == []
    assert broker.qm.depth(REPLY) == 3


def test_on_sqlite_the_router_lingers_after_a_batch_that_was_not_full(
    qm: QueueManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pause after a partial batch lets a steady stream's next batch carry more messages
    (SQLite's one write lock is then held less per message); a full batch means a backlog,
    where pausing would only slow the drain; PostgreSQL never pauses."""
    routing = service(qm, batch_size=10, sqlite_linger_ms=30)
    rounds = iter([3, 10, 0])
    paused: list[float] = []
    waited: list[float] = []

    def run_once() -> int:
        routed = next(rounds)
        if not routed:
            routing.stop()
        return routed

    monkeypatch.setattr(routing, "run_once", run_once)
    monkeypatch.setattr(routing._stop, "wait", lambda seconds: paused.append(seconds))
    monkeypatch.setattr(qm, "wait_for_arrival", lambda queues, token, timeout: waited.append(timeout))
    routing._loop()

    assert paused == ([0.03] if qm.engine.dialect.name == "sqlite" else [])
    assert waited == []  # it stopped after the empty round instead of waiting for arrivals


def test_a_running_router_collects_young_objects_less_often(qm: QueueManager) -> None:
    """The loop's garbage is freed by reference counting; the cycle collector's default
    pace cost a tenth of the router's time (``COLLECTOR_THRESHOLDS``)."""
    before = gc.get_threshold()
    routing = service(qm, batch_size=10)
    routing.stop()  # the loop ends at once; the tuning happens before it
    try:
        gc.unfreeze()  # as a process starts (another test may have run a router in this one)
        gc.set_threshold(700, 10, 10)
        routing.run(channels=False)
        assert gc.get_threshold() == COLLECTOR_THRESHOLDS
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


@pytest.mark.parametrize("shared", ["sqlite"], indirect=True)  # PostgreSQL claims with row locks
def test_on_sqlite_a_backlogs_next_batch_is_claimed_with_the_last_and_given_back_at_stop(
    broker: Broker,
) -> None:
    """While a backlog lasts the write of one batch claims the next (``queues.claims``): no
    other getter takes it meanwhile, and a router that stops gives it back, in its place."""
    broker.define("SUB.Q")
    broker.subscribe("#", "SUB.Q")
    for n in range(45):
        broker.put(psc_text("Publish", "T"), payload=str(n).encode(), msg_type=MQMT_DATAGRAM)

    assert broker.service.route_queue(DEFAULT_STREAM).messages == 20
    assert decode_publication(broker.qm.get(DEFAULT_STREAM)).text == "40"  # 20-39 are claimed
    broker.service.stop()
    broker.service.run(channels=False)  # stops at once, giving the claim back
    with QueueManager(broker.qm.engine) as another:  # another router; the first one lives on
        restarted = service(another, batch_size=20)
        while restarted.route_queue(DEFAULT_STREAM).messages:
            pass

    assert bodies(drain(broker.qm, "SUB.Q")) == [str(n) for n in range(45) if n != 40]
