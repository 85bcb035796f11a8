"""broker.core.publishing through the engine: Publish (reference 2.6, 3.3, 4.4) and DeletePub (2.10), with
the exact ``<pscr>`` answers and the exact messages subscribers and neighbours receive."""

from __future__ import annotations

from typing import Any

import pytest

from broker.core.authority import AclRule, Authority, Permission, PrincipalKind
from broker.core.effects import (
    DELIVERY,
    FORWARD,
    PROXY,
    DeleteRetained,
    Deliver,
    Outcome,
    RemoveSubscription,
    SetRetained,
)
from broker.core.outgoing import broker_correl_id
from broker.core.retained import RetainedPublication
from broker.protocol import brokerpath, psc, rfh2
from queues.message import (
    MQAT_BROKER,
    MQENC_NATIVE,
    MQFMT_RF_HEADER_2,
    MQMT_DATAGRAM,
    MQPER_NOT_PERSISTENT,
    MQPER_PERSISTENCE_AS_Q_DEF,
    MQPER_PERSISTENT,
)
from queues.reasons import Reason
from tests.broker.core.builders import (
    ANY_ID,
    INTER,
    NOW,
    QMGR,
    REPLY_Q,
    Broker,
    changes,
    correl,
    dead_letters,
    deliveries,
    forwards,
    msg_id,
    proxies,
    psc_text,
    pscr_error,
    pscr_ok,
    pscr_warning,
    puts,
    reply_folders,
)

MCD = "<mcd><Msd>jms_text</Msd></mcd>"
USR = "<usr><Venue>Stamford Bridge</Venue></usr>"
QUEUES = [REPLY_Q, "SUB.Q", "BOB.Q", "CAROL.Q", "PUB.Q"]


def rule(user: str, pattern: str, permission: Permission, allow: bool) -> AclRule:
    return AclRule(user, PrincipalKind.USER, pattern, permission, allow)


def broker(authority: Authority | None = None, neighbours: tuple[str, ...] = ()) -> Broker:
    return Broker(queues=QUEUES, authority=authority, neighbours=neighbours)


def subscribe(
    b: Broker, *topics: str, queue: str = "SUB.Q", user: str = "bob", opts: tuple[str, ...] = (), **kw: Any
) -> None:
    """Register ``topics`` for ``user``: capitalised keywords are ``<psc>`` elements, the others
    MQMD fields."""
    props = {k: str(v) for k, v in kw.items() if k[0].isupper()}
    md = {k: v for k, v in kw.items() if not k[0].isupper()}
    outcome = b.send(psc_text("RegSub", *topics, opts=opts, QName=queue, **props), user_id=user, **md)
    assert outcome.completion == "ok", outcome


def delivered_to(outcome: Outcome) -> list[tuple[str, tuple[str, ...]]]:
    """(queue, topics) of each delivery, in order."""
    result = []
    for sent in deliveries(outcome):
        command = sent.psc
        assert isinstance(command, psc.Publish)
        result.append((sent.queue, command.topics))
    return result


# --- seed scenario 1 -----------------------------------------------------------------------------------


def test_seed_scenario_1_match_started_reaches_a_wildcard_subscriber_exactly() -> None:
    b = broker()
    subscribe(b, "Sport/Soccer/Event/#", user="bob")
    folder = psc_text("Publish", "Sport/Soccer/Event/MatchStarted", PubTime="20260101150000", SeqNum="1")
    outcome = b.send(
        folder, extra=[MCD, USR], payload=b"Chelsea v Sutton", priority=6, expiry=36000, user_id="alice"
    )
    assert (outcome.command, outcome.completion, outcome.reason) == ("Publish", "ok", 0)
    assert outcome.counts == {DELIVERY: 1, "reply": 1}
    assert reply_folders(outcome) == pscr_ok()
    (sent,) = deliveries(outcome)
    assert (sent.queue, sent.q_mgr, sent.kind, sent.topic) == (
        "SUB.Q",
        "",
        DELIVERY,
        "Sport/Soccer/Event/MatchStarted",
    )
    assert sent.md == {
        "msg_id": ANY_ID,
        "correl_id": broker_correl_id(QMGR),
        "format": MQFMT_RF_HEADER_2,
        "encoding": MQENC_NATIVE,
        "ccsid": 1208,
        "msg_type": MQMT_DATAGRAM,
        "report": 0,
        "reply_to_q": "",
        "reply_to_qmgr": QMGR,
        "user_id": "bob",
        "persistence": MQPER_PERSISTENT,
        "priority": 6,
        "expiry": 36000,
        "put_appl_type": MQAT_BROKER,
        "put_appl_name": QMGR,
        "put_date": "20260101",
        "put_time": "00000000",
        "backout_count": 0,
    }
    assert sent.folders == (
        "<psc><Command>Publish</Command><Topic>Sport/Soccer/Event/MatchStarted</Topic>"
        "<PubTime>20260101150000</PubTime><SeqNum>1</SeqNum></psc>",
        MCD,
        USR,
    )
    assert sent.payload == b"Chelsea v Sutton"
    assert changes(outcome) == []


def test_deliveries_to_a_queue_a_shell_takes_itself_are_built_only_when_put() -> None:
    b = broker()
    subscribe(b, "Sport/#")
    subscribe(b, "#", queue="CAROL.Q", user="carol")
    folder = psc_text("Publish", "Sport/Soccer")
    eager = b.send(folder, msg_id=b"M" * 24)
    b.state.direct = {"SUB.Q"}
    lazy = b.send(folder, msg_id=b"M" * 24)
    deferred = [e for e in lazy.effects if isinstance(e, Deliver)]
    assert [(d.queue, d.topic) for d in deferred] == [("SUB.Q", "Sport/Soccer")]
    assert lazy.counts == eager.counts
    # Built, it is the very message the engine would have put (the other subscriber's is unchanged).
    assert [deferred[0].put() if isinstance(e, Deliver) else e for e in lazy.effects] == list(eager.effects)


# --- one copy per identity -------------------------------------------------------------------------


def test_one_copy_per_identity_however_many_of_its_subscriptions_match() -> None:
    b = broker()
    subscribe(
        b, "Sport/#", "Sport/Soccer/#", "+/Soccer/Event/MatchStarted", "Sport/Soccer/Event/MatchStarted"
    )
    subscribe(b, "#", queue="CAROL.Q", user="carol")
    outcome = b.send(psc_text("Publish", "Sport/Soccer/Event/MatchStarted"))
    assert delivered_to(outcome) == [
        ("SUB.Q", ("Sport/Soccer/Event/MatchStarted",)),
        ("CAROL.Q", ("Sport/Soccer/Event/MatchStarted",)),
    ]


def test_two_topics_matched_by_one_identity_make_one_message_listing_both() -> None:
    b = broker()
    subscribe(b, "Sport/Soccer/#")
    subscribe(b, "Sport/+/Results", queue="CAROL.Q", user="carol")
    outcome = b.send(
        psc_text("Publish", "Sport/Soccer/Results", "Sport/Soccer/Scores", "Sport/Rugby/Results")
    )
    assert delivered_to(outcome) == [
        ("SUB.Q", ("Sport/Soccer/Results", "Sport/Soccer/Scores")),
        ("CAROL.Q", ("Sport/Soccer/Results", "Sport/Rugby/Results")),
    ]


def test_the_same_queue_with_different_correl_ids_is_two_identities() -> None:
    b = broker()
    subscribe(b, "Sport/#", opts=("CorrelAsId",), correl_id=correl("ONE"))
    subscribe(b, "Sport/#", opts=("CorrelAsId",), correl_id=correl("TWO"))
    subscribe(b, "Sport/#")
    outcome = b.send(psc_text("Publish", "Sport/Soccer"))
    assert [(s.queue, s.md["correl_id"]) for s in deliveries(outcome)] == [
        ("SUB.Q", correl("ONE")),
        ("SUB.Q", correl("TWO")),
        ("SUB.Q", broker_correl_id(QMGR)),
    ]


def test_deliveries_follow_registration_order() -> None:
    b = broker()
    subscribe(b, "Sport/Soccer", queue="CAROL.Q", user="carol")
    subscribe(b, "Sport/#", queue="BOB.Q")
    subscribe(b, "#", queue="SUB.Q")
    outcome = b.send(psc_text("Publish", "Sport/Soccer"))
    assert [s.queue for s in deliveries(outcome)] == ["CAROL.Q", "BOB.Q", "SUB.Q"]


def test_the_first_registered_matching_subscription_decides_the_options() -> None:
    b = broker()
    subscribe(b, "Sport/Soccer", opts=("NonPers",))
    subscribe(b, "Sport/#", opts=("Pers",))
    outcome = b.send(psc_text("Publish", "Sport/Soccer"), persistence=MQPER_PERSISTENT)
    (sent,) = deliveries(outcome)
    assert sent.md["persistence"] == MQPER_NOT_PERSISTENT


def test_no_subscribers_means_only_the_reply() -> None:
    b = broker()
    subscribe(b, "News/#")
    outcome = b.send(psc_text("Publish", "Sport/Soccer"))
    assert outcome.counts == {"reply": 1}
    assert reply_folders(outcome) == pscr_ok()


def test_a_subscriber_at_another_queue_manager_gets_the_copy_there() -> None:
    b = broker(neighbours=("QM2",))
    subscribe(b, "Sport/#", queue="REMOTE.SUB", QMgrName="QM2")
    outcome = b.send(psc_text("Publish", "Sport/Soccer"))
    (sent,) = deliveries(outcome)
    assert (sent.queue, sent.q_mgr, sent.kind) == ("REMOTE.SUB", "QM2", DELIVERY)
    assert forwards(outcome) == []


def test_subscription_points_partition_the_topic_space() -> None:
    b = broker()
    subscribe(b, "Price/#", queue="SUB.Q", SubPoint="Pounds")
    subscribe(b, "Price/#", queue="BOB.Q")
    default = b.send(psc_text("Publish", "Price/Tea"))
    pounds = b.send(psc_text("Publish", "Price/Tea", SubPoint="Pounds"))
    assert delivered_to(default) == [("BOB.Q", ("Price/Tea",))]
    (sent,) = deliveries(pounds)
    assert sent.folders == (
        "<psc><Command>Publish</Command><Topic>Price/Tea</Topic><SubPoint>Pounds</SubPoint></psc>",
    )


# --- authority --------------------------------------------------------------------------------------


def test_partial_publish_authority_is_a_warning_listing_the_refused_topics_in_order() -> None:
    authority = Authority(
        [
            rule("alice", "Sport/Tennis", Permission.PUBLISH, False),
            rule("alice", "Sport/Golf", Permission.PUBLISH, False),
        ]
    )
    b = broker(authority)
    subscribe(b, "Sport/#")
    folder = psc_text(
        "Publish", "Sport/Tennis", "Sport/Soccer", "Sport/Golf", "Sport/Rugby", opts=["RetainPub"]
    )
    outcome = b.send(folder)
    assert reply_folders(outcome) == pscr_warning([(3081, "Sport/Tennis"), (3081, "Sport/Golf")], folder)
    assert (outcome.completion, outcome.reason, outcome.refused_topics) == (
        "warning",
        3081,
        ("Sport/Tennis", "Sport/Golf"),
    )
    assert delivered_to(outcome) == [("SUB.Q", ("Sport/Soccer", "Sport/Rugby"))]
    assert [e.publication.topic for e in changes(outcome) if isinstance(e, SetRetained)] == [
        "Sport/Soccer",
        "Sport/Rugby",
    ]


def test_no_publish_authority_at_all_is_an_error_naming_the_first_topic() -> None:
    authority = Authority([rule("alice", "Sport", Permission.PUBLISH, False)])
    b = broker(authority)
    subscribe(b, "Sport/#")
    folder = psc_text("Publish", "Sport/Tennis", "Sport/Golf", opts=["RetainPub"])
    outcome = b.send(folder)
    assert reply_folders(outcome) == pscr_error(3081, folder, topic="Sport/Tennis", detail=outcome.detail)
    assert len(outcome.effects) == 1
    assert dead_letters(outcome) == []
    assert list(b.state.all_retained()) == []


def test_a_subscriber_that_may_not_subscribe_to_the_topic_is_skipped() -> None:
    authority = Authority([rule("bob", "Sport/Tennis", Permission.SUBSCRIBE, False)])
    b = broker(authority)
    subscribe(b, "Sport/#")  # allowed: decided on the literal prefix "Sport"
    subscribe(b, "Sport/#", queue="CAROL.Q", user="carol")
    tennis = b.send(psc_text("Publish", "Sport/Tennis"))
    both = b.send(psc_text("Publish", "Sport/Tennis", "Sport/Soccer"))
    assert delivered_to(tennis) == [("CAROL.Q", ("Sport/Tennis",))]
    assert delivered_to(both) == [("SUB.Q", ("Sport/Soccer",)), ("CAROL.Q", ("Sport/Tennis", "Sport/Soccer"))]


# --- retained publications ------------------------------------------------------------------------


def test_retain_pub_keeps_the_publication_under_each_allowed_topic() -> None:
    b = broker()
    folder = psc_text(
        "Publish", "Sport/Soccer/State/LatestScore/Team1 Team2", "Scores/Latest", opts=["RetainPub"]
    )
    outcome = b.send(folder, extra=[MCD], payload=b"4-1")
    m = b.state.retained("", "Scores/Latest")
    assert m is not None
    command = psc.parse(folder)
    assert isinstance(command, psc.Publish)
    headers = rfh2.decode(m.message.body, m.message.encoding, m.message.format)
    assert changes(outcome) == [
        SetRetained(RetainedPublication("", topic, m.message, command, headers, NOW, 1, None))
        for topic in command.topics
    ]
    assert m.message.msg_id == msg_id(1)
    assert headers.payload == b"4-1"


def test_a_newer_retained_publication_replaces_the_older() -> None:
    b = broker()
    b.send(psc_text("Publish", "Score", opts=["RetainPub"]), payload=b"1-0")
    b.send(psc_text("Publish", "Score", opts=["RetainPub"]), payload=b"2-0")
    held = b.state.retained("", "Score")
    assert held is not None and held.message.msg_id == msg_id(2)
    assert len(list(b.state.all_retained())) == 1


def test_a_later_non_retained_publication_leaves_the_retained_one() -> None:
    b = broker()
    b.send(psc_text("Publish", "Score", opts=["RetainPub"]), payload=b"1-0")
    outcome = b.send(psc_text("Publish", "Score"), payload=b"2-0")
    assert changes(outcome) == []
    held = b.state.retained("", "Score")
    assert held is not None and held.message.msg_id == msg_id(1)


def test_retained_publications_are_kept_per_subscription_point() -> None:
    b = broker()
    b.send(psc_text("Publish", "Price/Tea", opts=["RetainPub"], SubPoint="Pounds"))
    assert b.state.retained("Pounds", "Price/Tea") is not None
    assert b.state.retained("", "Price/Tea") is None


def test_a_live_publication_is_never_flagged_as_retained() -> None:
    b = broker()
    subscribe(b, "Score", opts=("InformIfRet",))
    outcome = b.send(psc_text("Publish", "Score", opts=["RetainPub"]))
    (sent,) = deliveries(outcome)
    assert sent.psc_folder == "<psc><Command>Publish</Command><Topic>Score</Topic></psc>"


# --- publication options ----------------------------------------------------------------------------


def test_other_subs_only_skips_the_publishers_reply_to_identity() -> None:
    b = broker()
    subscribe(b, "Chat/#", queue=REPLY_Q, user="alice")  # the publisher's own ReplyToQ
    subscribe(b, "Chat/#", queue="BOB.Q")
    outcome = b.send(psc_text("Publish", "Chat/Room1", opts=["OtherSubsOnly"]))
    assert delivered_to(outcome) == [("BOB.Q", ("Chat/Room1",))]
    without = b.send(psc_text("Publish", "Chat/Room1"))
    assert [s.queue for s in deliveries(without)] == [REPLY_Q, "BOB.Q"]


def test_other_subs_only_takes_the_identity_from_qname_and_qmgrname() -> None:
    b = broker()
    subscribe(b, "Chat/#", queue="PUB.Q", user="alice", QMgrName=QMGR)
    subscribe(b, "Chat/#", queue=REPLY_Q, user="alice")
    outcome = b.send(psc_text("Publish", "Chat/Room1", opts=["OtherSubsOnly"], QName="PUB.Q", QMgrName=QMGR))
    assert [s.queue for s in deliveries(outcome)] == [REPLY_Q]


def test_other_subs_only_with_correl_as_id_compares_the_correl_id() -> None:
    b = broker()
    subscribe(b, "Chat/#", queue="PUB.Q", user="alice", opts=("CorrelAsId",), correl_id=correl("ME"))
    subscribe(b, "Chat/#", queue="PUB.Q", user="alice", opts=("CorrelAsId",), correl_id=correl("YOU"))
    subscribe(b, "Chat/#", queue="PUB.Q", user="alice")
    outcome = b.send(
        psc_text("Publish", "Chat/Room1", opts=["OtherSubsOnly", "CorrelAsId"], QName="PUB.Q"),
        correl_id=correl("ME"),
    )
    assert [s.md["correl_id"] for s in deliveries(outcome)] == [correl("YOU"), broker_correl_id(QMGR)]


def test_correl_as_id_with_a_zero_correl_id_is_3080() -> None:
    b = broker()
    subscribe(b, "Chat/#")
    folder = psc_text("Publish", "Chat/Room1", opts=["CorrelAsId"])
    outcome = b.send(folder)
    assert reply_folders(outcome) == pscr_error(3080, folder, parameter="PubOpt", detail=outcome.detail)
    assert len(outcome.effects) == 1


def test_is_retained_pub_from_an_application_is_3084() -> None:
    b = broker()
    subscribe(b, "Score")
    folder = psc_text("Publish", "Score", opts=["IsRetainedPub"])
    outcome = b.send(folder)
    assert reply_folders(outcome) == pscr_error(3084, folder, parameter="PubOpt", detail=outcome.detail)
    assert len(outcome.effects) == 1


def test_a_local_publication_is_never_forwarded() -> None:
    b = broker(neighbours=("QM2", "QM3"))
    for neighbour in ("QM2", "QM3"):
        outcome = b.send(
            psc_text("RegSub", "Sport/#", opts=["PersAsPub"], QMgrName=neighbour, QName=INTER), user_id="mqm"
        )
        assert outcome.completion == "ok"
    subscribe(b, "Sport/#")
    local = b.send(psc_text("Publish", "Sport/Soccer", opts=["Local"]))
    assert forwards(local) == []
    assert delivered_to(local) == [("SUB.Q", ("Sport/Soccer",))]
    forwarded = b.send(psc_text("Publish", "Sport/Soccer"))
    assert [(s.queue, s.q_mgr) for s in forwards(forwarded)] == [(INTER, "QM2"), (INTER, "QM3")]


def test_pub_time_and_seq_num_are_carried_and_publisher_options_are_not() -> None:
    b = broker()
    subscribe(b, "Score")
    outcome = b.send(
        psc_text("Publish", "Score", opts=["RetainPub", "OtherSubsOnly"], PubTime="T1", SeqNum="99")
    )
    (sent,) = deliveries(outcome)
    assert sent.psc_folder == (
        "<psc><Command>Publish</Command><Topic>Score</Topic><PubTime>T1</PubTime><SeqNum>99</SeqNum></psc>"
    )


# --- subscriber options --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "publisher", "expected"),
    [
        ("NonPers", MQPER_PERSISTENT, MQPER_NOT_PERSISTENT),
        ("Pers", MQPER_NOT_PERSISTENT, MQPER_PERSISTENT),
        ("PersAsQueue", MQPER_PERSISTENT, MQPER_PERSISTENCE_AS_Q_DEF),
        ("PersAsPub", MQPER_NOT_PERSISTENT, MQPER_NOT_PERSISTENT),
        ("PersAsPub", MQPER_PERSISTENT, MQPER_PERSISTENT),
        ("None", MQPER_NOT_PERSISTENT, MQPER_NOT_PERSISTENT),
        ("None", MQPER_PERSISTENCE_AS_Q_DEF, MQPER_PERSISTENCE_AS_Q_DEF),
    ],
)
def test_delivery_persistence_follows_the_subscribers_option(
    option: str, publisher: int, expected: int
) -> None:
    b = broker()
    subscribe(b, "Score", opts=(option,))
    (sent,) = deliveries(b.send(psc_text("Publish", "Score"), persistence=publisher))
    assert sent.md["persistence"] == expected


def test_a_correl_as_id_subscriber_gets_its_correl_id_others_the_brokers() -> None:
    b = broker()
    subscribe(b, "Score", opts=("CorrelAsId",), correl_id=correl("BOB"))
    subscribe(b, "Score", queue="CAROL.Q", user="carol", correl_id=correl("IGNORED"))
    sent = deliveries(b.send(psc_text("Publish", "Score"), correl_id=correl("PUBLISHER")))
    assert [(s.queue, s.md["correl_id"], s.md["user_id"]) for s in sent] == [
        ("SUB.Q", correl("BOB"), "bob"),
        ("CAROL.Q", broker_correl_id(QMGR), "carol"),
    ]


def test_a_correl_as_id_subscription_given_in_the_psc_correl_id_element() -> None:
    b = broker()
    subscribe(b, "Score", opts=("CorrelAsId",), CorrelId=correl("HEX").hex())
    (sent,) = deliveries(b.send(psc_text("Publish", "Score")))
    assert sent.md["correl_id"] == correl("HEX")


def test_pub_on_req_only_subscribers_get_nothing_live() -> None:
    b = broker()
    subscribe(b, "Score", opts=("PubOnReqOnly",))
    subscribe(b, "Score", queue="CAROL.Q", user="carol", opts=("NewPubsOnly",))
    outcome = b.send(psc_text("Publish", "Score"))
    assert [s.queue for s in deliveries(outcome)] == ["CAROL.Q"]


def test_expired_subscriptions_get_nothing_and_are_removed() -> None:
    b = broker(neighbours=("QM2",))
    subscribe(b, "Score", expiry=10)  # one second
    subscribe(b, "Score", queue="CAROL.Q", user="carol")
    (expired,) = [s for s in b.state.subscriptions() if s.identity.queue == "SUB.Q"]
    b.now = NOW + 999
    assert [s.queue for s in deliveries(b.send(psc_text("Publish", "Score"), apply=False))] == [
        "SUB.Q",
        "CAROL.Q",
    ]
    b.now = NOW + 1000
    outcome = b.send(psc_text("Publish", "Score"))
    assert [s.queue for s in deliveries(outcome)] == ["CAROL.Q"]
    assert changes(outcome) == [RemoveSubscription(expired.key)]
    assert proxies(outcome) == []  # carol's subscription still holds the proxy
    assert len(b.state) == 1


def test_the_last_expired_global_subscription_takes_its_proxy_with_it() -> None:
    b = broker(neighbours=("QM2",))
    subscribe(b, "Score", expiry=10)
    b.now = NOW + 1000
    outcome = b.send(psc_text("Publish", "Score"))
    assert deliveries(outcome) == []
    (proxy,) = proxies(outcome)
    assert proxy.psc_folder == (
        f"<psc><Command>DeregSub</Command><Topic>Score</Topic><QMgrName>QM1</QMgrName><QName>{INTER}</QName></psc>"
    )


# --- message content ---------------------------------------------------------------------------------------


def test_mcd_and_usr_folders_are_kept_pscr_and_brokerpath_dropped() -> None:
    b = broker()
    subscribe(b, "Score")
    path = brokerpath.render(brokerpath.BrokerPath(msg_id(50), ("QM9",)))
    outcome = b.send(
        psc_text("Publish", "Score"),
        extra=["<pscr><Completion>ok</Completion></pscr>", MCD, path, USR],
        payload=b"\x00binary\xff",
    )
    (sent,) = deliveries(outcome)
    assert sent.folders == ("<psc><Command>Publish</Command><Topic>Score</Topic></psc>", MCD, USR)
    assert sent.payload == b"\x00binary\xff"
    assert reply_folders(outcome) == pscr_ok()


def test_delivery_msg_ids_are_deterministic_and_distinct_per_subscriber() -> None:
    b = broker()
    subscribe(b, "Score")
    subscribe(b, "Score", queue="CAROL.Q", user="carol")
    subscribe(b, "Score", opts=("CorrelAsId",), correl_id=correl("X"))
    first = b.send(psc_text("Publish", "Score"), msg_id=msg_id(100), apply=False)
    again = b.send(psc_text("Publish", "Score"), msg_id=msg_id(100), apply=False)
    other = b.send(psc_text("Publish", "Score"), msg_id=msg_id(101), apply=False)
    ids = [s.md["msg_id"] for s in deliveries(first)]
    assert ids == [s.md["msg_id"] for s in deliveries(again)]
    assert len(set(ids)) == 3
    assert set(ids).isdisjoint(s.md["msg_id"] for s in deliveries(other))
    assert first == again


# --- DeletePub ---------------------------------------------------------------------------------------------


def retained_broker(
    *topics: str, authority: Authority | None = None, neighbours: tuple[str, ...] = ()
) -> Broker:
    b = broker(authority, neighbours)
    for topic in topics:
        assert b.send(psc_text("Publish", topic, opts=["RetainPub"]), user_id="admin").completion == "ok"
    return b


def held(b: Broker) -> list[str]:
    return sorted(p.topic for p in b.state.all_retained())


def test_delete_pub_deletes_a_literal_topic() -> None:
    b = retained_broker("Sport/Soccer", "Sport/Tennis")
    outcome = b.send(psc_text("DeletePub", "Sport/Soccer"))
    assert changes(outcome) == [DeleteRetained("", "Sport/Soccer")]
    assert reply_folders(outcome) == pscr_ok()
    assert held(b) == ["Sport/Tennis"]


def test_delete_pub_of_a_topic_with_nothing_retained_is_ok_and_changes_nothing() -> None:
    b = retained_broker("Sport/Tennis")
    outcome = b.send(psc_text("DeletePub", "Sport/Soccer"))
    assert changes(outcome) == []
    assert reply_folders(outcome) == pscr_ok()


def test_delete_pub_with_a_wildcard_deletes_every_match() -> None:
    b = retained_broker("Sport/Soccer", "Sport/Tennis/Wimbledon", "News/Today", "Sport")
    outcome = b.send(psc_text("DeletePub", "Sport/#"))
    assert sorted(e.topic for e in changes(outcome) if isinstance(e, DeleteRetained)) == [
        "Sport",
        "Sport/Soccer",
        "Sport/Tennis/Wimbledon",
    ]
    assert held(b) == ["News/Today"]


def test_delete_pub_works_on_its_subscription_point() -> None:
    b = broker()
    b.send(psc_text("Publish", "Price/Tea", opts=["RetainPub"], SubPoint="Pounds"))
    b.send(psc_text("Publish", "Price/Tea", opts=["RetainPub"]))
    outcome = b.send(psc_text("DeletePub", "Price/+", SubPoint="Pounds"))
    assert changes(outcome) == [DeleteRetained("Pounds", "Price/Tea")]
    assert b.state.retained("", "Price/Tea") is not None


def test_delete_pub_partial_authority_is_a_warning_per_refused_topic() -> None:
    authority = Authority([rule("alice", "Sport/Tennis", Permission.PUBLISH, False)])
    b = retained_broker("Sport/Soccer", "Sport/Tennis", "Sport/Golf", authority=authority)
    folder = psc_text("DeletePub", "Sport/Golf", "Sport/Tennis")
    outcome = b.send(folder)
    assert reply_folders(outcome) == pscr_warning([(3081, "Sport/Tennis")], folder)
    assert changes(outcome) == [DeleteRetained("", "Sport/Golf")]


def test_delete_pub_wildcard_refuses_each_held_topic_it_may_not_delete() -> None:
    authority = Authority([rule("alice", "Sport/Tennis", Permission.PUBLISH, False)])
    b = retained_broker("Sport/Soccer", "Sport/Tennis", authority=authority)
    folder = psc_text("DeletePub", "Sport/+")
    outcome = b.send(folder)
    assert reply_folders(outcome) == pscr_warning([(3081, "Sport/Tennis")], folder)
    assert changes(outcome) == [DeleteRetained("", "Sport/Soccer")]
    assert held(b) == ["Sport/Tennis"]


def test_delete_pub_without_any_authority_is_an_error() -> None:
    authority = Authority([rule("alice", "Sport", Permission.PUBLISH, False)])
    b = retained_broker("Sport/Soccer", authority=authority)
    folder = psc_text("DeletePub", "Sport/Soccer", "Sport/Golf")
    outcome = b.send(folder)
    assert reply_folders(outcome) == pscr_error(3081, folder, topic="Sport/Soccer", detail=outcome.detail)
    assert len(outcome.effects) == 1
    assert held(b) == ["Sport/Soccer"]


def test_delete_pub_local_deletes_here_only() -> None:
    b = retained_broker("Sport/Soccer", neighbours=("QM2",))
    outcome = b.send(psc_text("DeletePub", "Sport/Soccer", opts=["Local"]))
    assert changes(outcome) == [DeleteRetained("", "Sport/Soccer")]
    assert puts(outcome, PROXY) == [] and forwards(outcome) == []


def test_delete_pub_is_passed_to_every_neighbour_with_its_path() -> None:
    b = retained_broker("Sport/Soccer", neighbours=("QM3", "QM2"))
    outcome = b.send(psc_text("DeletePub", "Sport/Soccer", "Sport/Golf"), msg_id=msg_id(40))
    assert changes(outcome) == [DeleteRetained("", "Sport/Soccer")]
    sent = puts(outcome, FORWARD)
    assert [(s.queue, s.q_mgr) for s in sent] == [(INTER, "QM2"), (INTER, "QM3")]
    for s in sent:
        assert s.folders == (
            "<psc><Command>DeletePub</Command><Topic>Sport/Soccer</Topic><Topic>Sport/Golf</Topic></psc>",
            f"<brokerpath><OrigMsgId>{msg_id(40).hex()}</OrigMsgId><QMgr>QM1</QMgr></brokerpath>",
        )
        assert (s.md["user_id"], s.md["put_appl_type"], s.md["msg_type"]) == (
            "mqm",
            MQAT_BROKER,
            MQMT_DATAGRAM,
        )
    assert sent[0].md["msg_id"] != sent[1].md["msg_id"]
    replay = b.send(psc_text("DeletePub", "Sport/Soccer", "Sport/Golf"), msg_id=msg_id(40), apply=False)
    assert [s.md["msg_id"] for s in puts(replay, FORWARD)] == [s.md["msg_id"] for s in sent]


def test_a_wildcard_delete_pub_is_passed_on_even_when_nothing_matches_here() -> None:
    """Reference 2.10: without DelOpt Local a DeletePub deletes at every broker in the network,
    so a wildcard must reach neighbours that hold matches even when this broker holds none."""
    b = retained_broker(neighbours=("QM2",))
    outcome = b.send(psc_text("DeletePub", "Sport/#"))
    sent = puts(outcome, FORWARD)
    assert [(s.queue, s.q_mgr) for s in sent] == [(INTER, "QM2")]
    command = sent[0].psc
    assert isinstance(command, psc.DeletePub)
    assert command.topics == ("Sport/#",)


def test_a_delete_pub_from_the_network_is_passed_on_except_where_it_has_been() -> None:
    b = retained_broker("Sport/Soccer", neighbours=("QM2", "QM3", "QM4"))
    path = brokerpath.BrokerPath(msg_id(60), ("QM3", "QM2"))
    outcome = b.send(
        psc_text("DeletePub", "Sport/Soccer"),
        INTER,
        extra=[brokerpath.render(path)],
        user_id="mqm",
        msg_type=MQMT_DATAGRAM,
    )
    assert changes(outcome) == [DeleteRetained("", "Sport/Soccer")]
    (sent,) = puts(outcome, FORWARD)
    assert (sent.queue, sent.q_mgr) == (INTER, "QM4")
    assert brokerpath.parse(sent.folders[1]) == brokerpath.BrokerPath(msg_id(60), ("QM3", "QM2", "QM1"))
    # Passed on under the id the origin gave it, so QM4 recognises it whichever way it comes.
    direct = retained_broker(neighbours=("QM4",))
    first_hop = direct.send(psc_text("DeletePub", "Sport/Soccer"), msg_id=msg_id(60), apply=False)
    assert [s.md["msg_id"] for s in puts(first_hop, FORWARD)] == [sent.md["msg_id"]]


def test_a_delete_pub_from_the_network_needs_no_local_authority() -> None:
    authority = Authority([rule("mqm", "#", Permission.PUBLISH, False)])
    b = broker(authority, ("QM2",))
    b.send(psc_text("Publish", "Sport/Soccer", opts=["RetainPub"]), user_id="alice")
    outcome = b.send(
        psc_text("DeletePub", "Sport/#"),
        INTER,
        extra=[brokerpath.render(brokerpath.BrokerPath(msg_id(61), ("QM2",)))],
        user_id="mqm",
        msg_type=MQMT_DATAGRAM,
    )
    assert changes(outcome) == [DeleteRetained("", "Sport/Soccer")]


def test_delete_pub_reason_codes_are_exact_for_bad_options() -> None:
    b = broker()
    folder = psc_text("DeletePub", "Sport", opts=["RetainPub"])
    outcome = b.send(folder)
    assert reply_folders(outcome) == pscr_error(
        Reason.MQRCCF_DEL_OPTIONS_ERROR, folder, parameter="DelOpt", detail=outcome.detail
    )


# --- recipients remembered ----------------------------------------------------------------------------


def counting_matches(b: Broker, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The topics the state is asked to match, from now on."""
    asked: list[str] = []
    match = b.state.match

    def counted(sub_point: str, topic: str) -> Any:
        asked.append(topic)
        return match(sub_point, topic)

    monkeypatch.setattr(b.state, "match", counted)
    return asked


def test_a_topic_is_matched_and_authorised_once_until_a_subscription_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    b = broker()
    subscribe(b, "Score/#")
    asked = counting_matches(b, monkeypatch)
    for _ in range(3):
        assert delivered_to(b.send(psc_text("Publish", "Score/1"))) == [("SUB.Q", ("Score/1",))]
    assert asked == ["Score/1"]

    subscribe(b, "Score/+", queue="CAROL.Q", user="carol")  # a new subscriber: at once
    assert delivered_to(b.send(psc_text("Publish", "Score/1"))) == [
        ("SUB.Q", ("Score/1",)),
        ("CAROL.Q", ("Score/1",)),
    ]
    b.send(psc_text("DeregSub", "Score/#", QName="SUB.Q"), user_id="bob")  # and one gone
    assert delivered_to(b.send(psc_text("Publish", "Score/1"))) == [("CAROL.Q", ("Score/1",))]
    assert asked == ["Score/1", "Score/1", "Score/1"]


def test_a_change_of_authority_changes_the_recipients_at_once() -> None:
    b = broker()
    subscribe(b, "Score/#")
    assert delivered_to(b.send(psc_text("Publish", "Score/1"))) == [("SUB.Q", ("Score/1",))]
    b.state.authority = Authority([rule("bob", "Score", Permission.SUBSCRIBE, False)])
    assert delivered_to(b.send(psc_text("Publish", "Score/1"))) == []


def test_recipients_are_not_remembered_while_a_subscription_met_can_expire(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    b = broker()
    subscribe(b, "Score", expiry=10)
    asked = counting_matches(b, monkeypatch)
    for _ in range(2):
        assert [s.queue for s in deliveries(b.send(psc_text("Publish", "Score")))] == ["SUB.Q"]
    assert asked == ["Score", "Score"]
