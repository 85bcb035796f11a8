"""BrokerClient against a routing service running its loop in a background thread, on both dialects.

The client is what applications use instead of pymqi + rfhutil, so each test does what an
application does: send a command, wait for the broker's answer, read publications back decoded.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from broker import store
from broker.client import BrokerClient, BrokerResponse, command_message
from broker.core.authority import AclRule, Permission, PrincipalKind
from broker.core.outgoing import broker_correl_id
from broker.core.system import DEFAULT_STREAM
from broker.protocol import psc, rfh2
from broker.protocol.options import DelOpt, PubOpt, RegOpt
from queues import Message, MQError, QueueManager, Reason
from queues.message import (
    MQFMT_NONE,
    MQFMT_RF_HEADER_2,
    MQFMT_STRING,
    MQMT_DATAGRAM,
    MQMT_REPLY,
    MQPER_NOT_PERSISTENT,
    MQPER_PERSISTENT,
)
from tests.conftest import DIALECTS
from tests.e2e.harness import (
    ServiceThread,
    bodies,
    drain,
    emptied_database,
    running,
    service,
    shared_database,
)

# One database per dialect for the module, emptied before each test (see tests.e2e.harness).
shared = pytest.fixture(scope="module", params=DIALECTS)(shared_database)
engine = pytest.fixture(emptied_database)

SCORE = "Sport/Soccer/State/LatestScore/Team1 Team2"


@pytest.fixture
def serving(qm: QueueManager) -> Iterator[ServiceThread]:
    with running(qm, batch_size=10) as thread:
        yield thread


@pytest.fixture
def client(qm: QueueManager, serving: ServiceThread) -> Iterator[BrokerClient]:
    for name in ("SUB.A", "SUB.B", "SHARED"):
        qm.define_queue(name)
    with BrokerClient(qm, user_id="alice", timeout=20) as c:
        yield c


def ok(response: BrokerResponse | None) -> BrokerResponse:
    assert response is not None
    assert response.completion == "ok", response.describe()
    return response


def test_publish_with_options_folders_and_text(client: BrokerClient) -> None:
    ok(client.subscribe("Sport/#", "SUB.A", options=RegOpt.InformIfRet | RegOpt.Pers))
    response = ok(
        client.publish(
            ["Sport/Soccer/Event/MatchStarted", "Sport/Live"],
            "Team1 v Team2",
            options=PubOpt.RetainPub,
            pub_time="20260101120000",
            seq_num="17",
            folders=("<usr><Match>42</Match></usr>",),
            persistence=MQPER_NOT_PERSISTENT,
            priority=7,
        )
    )
    assert (response.reason, response.items, response.refused_topics) == (0, (), ())
    assert response.message is not None and response.message.msg_type == MQMT_REPLY

    pub = client.receive("SUB.A")
    assert pub.topics == ("Sport/Soccer/Event/MatchStarted", "Sport/Live")
    assert pub.topic == "Sport/Soccer/Event/MatchStarted"
    assert (pub.text, pub.retained, pub.sub_point, pub.pub_time, pub.seq_num) == (
        "Team1 v Team2",
        False,
        None,
        "20260101120000",
        "17",
    )
    assert pub.folders == ("<usr><Match>42</Match></usr>",)
    md = pub.message
    assert (md.format, md.msg_type, md.priority, md.persistence) == (
        MQFMT_RF_HEADER_2,
        MQMT_DATAGRAM,
        7,
        MQPER_PERSISTENT,
    )
    assert md.correl_id == broker_correl_id("QM1")
    assert _retained(client.qm) == ["Sport/Live", "Sport/Soccer/Event/MatchStarted"]


def _retained(qm: QueueManager) -> list[str]:
    with qm.reading() as conn:
        return sorted(p.topic for _, p in store.list_retained(conn))


def test_publish_bytes_and_no_wait_datagram(client: BrokerClient) -> None:
    ok(client.subscribe("Raw/#", "SUB.A"))
    assert client.publish("Raw/Data", b"\x00\x01binary", wait=False) is None
    pub = client.receive("SUB.A", wait=20)
    assert (pub.body, pub.topics) == (b"\x00\x01binary", ("Raw/Data",))
    assert payload_format(pub.message) == MQFMT_NONE
    ok(client.publish("Raw/Text", "text"))
    assert payload_format(client.receive("SUB.A").message) == MQFMT_STRING
    assert client.qm.depth(client.reply_queue) == 0  # the datagram asked for no answer


def payload_format(m: Message) -> str:
    """The Format the MQRFH2 gives its payload (what the publisher said the body is)."""
    return rfh2.decode(m.body, m.encoding, m.format).payload_format


def test_publish_other_subs_only_and_correl_as_id(client: BrokerClient) -> None:
    ok(client.subscribe("Conf/Room", "SUB.A"))
    ok(client.subscribe("Conf/Room", "SUB.B"))
    ok(client.publish("Conf/Room", "from A", options=PubOpt.OtherSubsOnly, q_name="SUB.A"))
    assert drain(client.qm, "SUB.A") == []
    assert bodies(drain(client.qm, "SUB.B")) == ["from A"]

    desk = b"DESK-B".ljust(24, b"\x00")
    ok(client.subscribe("Conf/Desk", "SHARED", options=RegOpt.CorrelAsId, correl_id=desk))
    ok(client.subscribe("Conf/Desk", "SUB.A"))
    ok(
        client.publish(
            "Conf/Desk",
            "not to desk B",
            options=PubOpt.OtherSubsOnly | PubOpt.CorrelAsId,
            q_name="SHARED",
            correl_id=desk,
        )
    )
    assert drain(client.qm, "SHARED") == []
    assert bodies(drain(client.qm, "SUB.A")) == ["not to desk B"]


def test_subscription_points(client: BrokerClient) -> None:
    ok(client.subscribe("Price/Gold", "SUB.A", sub_point="Pounds"))
    ok(client.subscribe("Price/Gold", "SUB.B"))
    ok(client.publish("Price/Gold", "1800", sub_point="Pounds"))
    pub = client.receive("SUB.A")
    assert (pub.topics, pub.sub_point, pub.text) == (("Price/Gold",), "Pounds", "1800")
    assert drain(client.qm, "SUB.B") == []


def test_publish_refused_topics_in_words(client: BrokerClient) -> None:
    with client.qm.engine.begin() as conn:
        store.add_acl_rule(conn, AclRule("alice", PrincipalKind.USER, "Secret", Permission.PUBLISH, False))
    response = client.publish(["Open/News", "Secret/Plans"], "x")
    assert response is not None
    assert (response.completion, response.reason, response.refused_topics) == (
        "warning",
        Reason.MQRCCF_NOT_AUTHORIZED,
        ("Secret/Plans",),
    )
    assert response.describe() == "warning\n  MQRCCF_NOT_AUTHORIZED (3081) on topic 'Secret/Plans'"


def test_subscribe_full_response_sub_name_and_correl_as_id(client: BrokerClient) -> None:
    desk = bytes(range(24))
    response = ok(
        client.subscribe(
            "Stocks/IBM",
            "SHARED",
            options=RegOpt.CorrelAsId | RegOpt.FullResp | RegOpt.NewPubsOnly,
            sub_name="ibm-desk",
            sub_user_data="desk 4",
            correl_id=desk,
        )
    )
    assert response.attributes == (
        ("Command", "RegSub"),
        ("Topic", "Stocks/IBM"),
        ("QMgrName", "QM1"),
        ("QName", "SHARED"),
        ("UserId", "alice"),
        ("RegOpt", "CorrelAsId"),
        ("RegOpt", "NewPubsOnly"),
        ("CorrelId", desk.hex().upper()),
        ("SubName", "ibm-desk"),
        ("SubUserData", "desk 4"),
    )
    assert "  SubName: ibm-desk" in response.describe().splitlines()
    ok(client.publish("Stocks/IBM", "120"))
    pub = client.receive("SHARED", correl_id=desk)
    assert (pub.text, pub.message.correl_id) == ("120", desk)

    clash = client.subscribe("Stocks/HPQ", "SUB.A", sub_name="ibm-desk")
    assert (clash.completion, clash.reason) == ("error", Reason.MQRCCF_DUPLICATE_SUBSCRIPTION)


def test_unsubscribe_by_topic_and_dereg_all(client: BrokerClient) -> None:
    for topic in ("A/1", "A/2", "A/3"):
        ok(client.subscribe(topic, "SUB.A"))
    ok(client.unsubscribe("A/1", "SUB.A"))
    missing = client.unsubscribe("A/1", "SUB.A")
    assert (missing.completion, missing.reason) == ("error", Reason.MQRCCF_NOT_REGISTERED)

    ok(client.unsubscribe(queue="SUB.A", options=RegOpt.DeregAll))
    with client.qm.reading() as conn:
        assert store.count_subscriptions(conn) == 0
    ok(client.publish("A/2", "nobody"))
    assert drain(client.qm, "SUB.A") == []


def test_request_update_and_delete_publication(client: BrokerClient) -> None:
    ok(client.publish(SCORE, "2-1", options=PubOpt.RetainPub))
    ok(
        client.subscribe(
            "Sport/Soccer/State/LatestScore/#", "SUB.A", options=RegOpt.PubOnReqOnly | RegOpt.InformIfRet
        )
    )
    assert drain(client.qm, "SUB.A") == []

    ok(client.request_update("Sport/Soccer/State/LatestScore/#", "SUB.A"))
    pub = client.receive("SUB.A")
    assert (pub.topics, pub.text, pub.retained) == ((SCORE,), "2-1", True)

    ok(client.delete_publication(SCORE))
    assert _retained(client.qm) == []
    gone = client.request_update("Sport/Soccer/State/LatestScore/#", "SUB.A")
    assert (gone.completion, gone.reason) == ("error", Reason.MQRCCF_NO_RETAINED_MSG)

    ok(client.publish("Local/Only", "x", options=PubOpt.RetainPub))
    ok(client.delete_publication("Local/#", options=DelOpt.Local))
    assert _retained(client.qm) == []


def test_subscribe_without_queue_uses_the_reply_queue(client: BrokerClient) -> None:
    ok(client.subscribe("Mine/#"))
    ok(client.publish("Mine/Topic", "for me"))
    assert client.receive(client.reply_queue).text == "for me"


def test_receive_refuses_what_is_not_a_publication(client: BrokerClient) -> None:
    client.qm.put("SUB.B", Message(body=b"plain", format=MQFMT_STRING))
    subscription = command_message(
        _regsub("Any/Topic"), request=False, payload=b"", folders=("<usr><a>1</a></usr>",)
    )
    client.qm.put("SUB.B", subscription)
    client.qm.put("SUB.B", Message(body=b"RFH \x00\x00", format=MQFMT_RF_HEADER_2))
    reasons = []
    for _ in range(3):
        with pytest.raises(MQError) as raised:
            client.receive("SUB.B")
        reasons.append(raised.value.reason)
    assert reasons == [Reason.MQRCCF_MD_FORMAT_ERROR, Reason.MQRC_RFH_PARM_MISSING, Reason.MQRC_RFH_ERROR]
    with pytest.raises(MQError) as empty:
        client.receive("SUB.B", wait=0.1)
    assert empty.value.reason == Reason.MQRC_NO_MSG_AVAILABLE


def _regsub(topic: str) -> psc.RegSub:
    return psc.RegSub(
        topics=(topic,),
        sub_point=None,
        filter=None,
        q_mgr_name=None,
        q_name=None,
        options=RegOpt(0),
        sub_name=None,
        sub_identity=None,
        sub_user_data=None,
        correl_id=None,
        folder="",
    )


def test_reply_timeout_names_the_likely_cause(qm: QueueManager) -> None:
    """No broker running: the client gives up with 2033 and says what to check."""
    service(qm)  # the system queues exist, nobody serves them
    with BrokerClient(qm, timeout=0.2) as lonely, pytest.raises(MQError) as raised:
        lonely.publish("Any/Topic", "hello?")
    assert raised.value.reason == Reason.MQRC_NO_MSG_AVAILABLE
    assert raised.value.detail == (
        "no response from the broker within 0.2 s: is 'broker serve' running on this database? The "
        "Publish stays on SYSTEM.BROKER.DEFAULT.STREAM and takes effect when a broker routes it"
    )
    assert qm.depth(DEFAULT_STREAM) == 1


def test_close_deletes_the_temporary_reply_queue(qm: QueueManager, serving: ServiceThread) -> None:
    client = BrokerClient(qm, user_id="alice")
    name = client.reply_queue
    assert name.startswith("AMQ.")
    assert qm.inquire_queue(name).definition_type == "tempdyn"
    ok(client.subscribe("Temp/#"))  # delivered to the reply queue itself
    ok(client.publish("Temp/x", "unread"))

    client.close()
    client.close()  # idempotent

    assert not qm.list_queues(name)
    serving.service.housekeeping()
    with qm.reading() as conn:
        assert store.count_subscriptions(conn) == 0


def test_own_reply_queue_is_left_alone(qm: QueueManager, serving: ServiceThread) -> None:
    qm.define_queue("MY.REPLIES")
    with BrokerClient(qm, reply_queue="MY.REPLIES", user_id="alice") as client:
        ok(client.publish("Any/Topic", "x"))
    assert qm.inquire_queue("MY.REPLIES").depth == 0
