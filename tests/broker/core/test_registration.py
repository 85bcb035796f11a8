"""broker.core.registration through the engine: RegSub (reference 2.5, 2.7, 4.4), DeregSub (2.8) and
ReqUpdate (2.9), with the exact ``<pscr>`` answers, state changes and retained deliveries."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from broker.core.authority import AclRule, Authority, Permission, PrincipalKind
from broker.core.effects import DELIVERY, AddSubscription, DeleteRetained, RemoveSubscription
from broker.core.outgoing import broker_correl_id
from broker.core.state import QueueInfo
from broker.core.subscription import Identity, Subscription, SubscriptionKey
from broker.protocol import psc
from broker.protocol.options import PubOpt, RegOpt
from queues.message import (
    MQAT_BROKER,
    MQEI_UNLIMITED,
    MQENC_NATIVE,
    MQFMT_RF_HEADER_2,
    MQMT_DATAGRAM,
    MQPER_NOT_PERSISTENT,
    MQPER_PERSISTENT,
)
from queues.reasons import Reason
from tests.broker.core.builders import (
    ANY_ID,
    NOW,
    QMGR,
    REPLY_Q,
    Broker,
    changes,
    correl,
    deliveries,
    psc_text,
    pscr_error,
    pscr_ok,
    pscr_warning,
    reply_folders,
)

SCORE = "Sport/Soccer/State/LatestScore/Team1 Team2"
MCD = "<mcd><Msd>jms_text</Msd></mcd>"
QUEUES: list[str | QueueInfo] = [REPLY_Q, "SUB.Q", "CAROL.Q", QueueInfo("AMQ.TEMP.Q", temporary=True)]


def broker(authority: Authority | None = None, neighbours: tuple[str, ...] = ()) -> Broker:
    return Broker(queues=QUEUES, authority=authority, neighbours=neighbours)


def subscriber_command(
    command: str, *topics: str, opts: tuple[str, ...] = (), queue: str | None = "SUB.Q", **props: str
) -> str:
    """A RegSub, DeregSub or ReqUpdate for queue ``queue`` (None: the identity comes from ReplyToQ)."""
    if queue is not None:
        props["QName"] = queue
    return psc_text(command, *topics, opts=opts, **props)


regsub = partial(subscriber_command, "RegSub")
deregsub = partial(subscriber_command, "DeregSub")
requpdate = partial(subscriber_command, "ReqUpdate")


def key(
    topic: str, queue: str = "SUB.Q", sub_point: str = "", correl_id: bytes | None = None
) -> SubscriptionKey:
    return SubscriptionKey(Identity(QMGR, queue, correl_id), sub_point, topic)


def only(b: Broker) -> Subscription:
    (sub,) = b.state.subscriptions()
    return sub


def topics_of(b: Broker) -> list[str]:
    return sorted(s.key.topic for s in b.state.subscriptions())


def retain(b: Broker, topic: str = SCORE, **md: Any) -> None:
    md.setdefault("user_id", "publisher")
    outcome = b.send(psc_text("Publish", topic, opts=["RetainPub"]), extra=[MCD], payload=b"4-1", **md)
    assert outcome.completion == "ok"


def error(b: Broker, folder: str, reason: int, **item: str) -> None:
    """``folder`` is refused with exactly this error and changes nothing."""
    before = sorted(map(repr, b.state.subscriptions()))
    outcome = b.send(folder)
    assert reply_folders(outcome) == pscr_error(reason, folder, **item, detail=outcome.detail)
    assert len(outcome.effects) == 1
    assert sorted(map(repr, b.state.subscriptions())) == before


# --- RegSub: identity ----------------------------------------------------------------------------------


def test_regsub_registers_the_exact_subscription() -> None:
    b = broker()
    outcome = b.send(regsub("Sport/#", opts=("InformIfRet", "FullResp", "Pers")), user_id="bob", expiry=600)
    expected = Subscription(
        key=key("Sport/#"),
        user_id="bob",
        options=int(RegOpt.InformIfRet | RegOpt.Pers),
        created_at=NOW,
        seq=1,
        expires_at=NOW + 60_000,
    )
    assert changes(outcome) == [AddSubscription(expected)]
    assert only(b) == expected


def test_the_identity_defaults_to_reply_to_q_and_reply_to_qmgr() -> None:
    b = broker()
    b.send(regsub("Sport/#", queue=None), reply_to_q="CAROL.Q  ", reply_to_qmgr="QM1")
    b.send(regsub("News/#", queue=None), reply_to_q="SUB.Q", reply_to_qmgr="")
    assert {s.key for s in b.state.subscriptions()} == {key("Sport/#", "CAROL.Q"), key("News/#", "SUB.Q")}


def test_no_qname_and_no_reply_to_q_is_3076() -> None:
    b = broker()
    outcome = b.send(regsub("Sport/#", queue=None), reply_to_q="")  # nowhere to send the answer
    assert outcome.effects == ()
    assert (outcome.completion, outcome.reason) == ("error", 3076)


def test_a_subscriber_queue_that_does_not_exist_is_3076() -> None:
    error(broker(), regsub("Sport/#", queue="NO.SUCH.Q"), 3076, parameter="QName")


def test_a_queue_manager_that_is_neither_this_one_nor_a_neighbour_is_3074() -> None:
    error(
        broker(neighbours=("QM2",)), regsub("Sport/#", queue="X", QMgrName="QM9"), 3074, parameter="QMgrName"
    )


def test_a_subscriber_at_a_neighbouring_queue_manager_is_accepted() -> None:
    b = broker(neighbours=("QM2",))
    b.send(regsub("Sport/#", queue="REMOTE.Q", QMgrName="QM2"))
    assert only(b).key == SubscriptionKey(Identity("QM2", "REMOTE.Q"), "", "Sport/#")
    assert only(b).origin is None


def test_a_filter_is_2551_selection_not_available() -> None:
    error(broker(), regsub("Sport/#", Filter="Body.Score > 3"), 2551, parameter="Filter")


def test_correl_as_id_with_a_zero_correl_id_is_3080() -> None:
    error(broker(), regsub("Sport/#", opts=("CorrelAsId",)), 3080, parameter="RegOpt")


def test_correl_as_id_puts_the_correl_id_in_the_identity() -> None:
    b = broker()
    b.send(regsub("Sport/#", opts=("CorrelAsId",)), correl_id=correl("C1"))
    b.send(regsub("Sport/#"), correl_id=correl("IGNORED"))
    assert {s.key for s in b.state.subscriptions()} == {
        key("Sport/#", correl_id=correl("C1")),
        key("Sport/#"),
    }


def test_the_temporary_queue_flag_is_recorded() -> None:
    b = broker()
    b.send(regsub("Sport/#", queue="AMQ.TEMP.Q"))
    b.send(regsub("Sport/#"))
    assert {s.identity.queue: s.temporary for s in b.state.subscriptions()} == {
        "AMQ.TEMP.Q": True,
        "SUB.Q": False,
    }


@pytest.mark.parametrize(
    ("expiry", "expires_at"), [(MQEI_UNLIMITED, None), (1, NOW + 100), (36000, NOW + 3_600_000)]
)
def test_the_subscription_lives_as_long_as_the_regsub_expiry(expiry: int, expires_at: int | None) -> None:
    b = broker()
    b.send(regsub("Sport/#"), expiry=expiry)
    assert only(b).expires_at == expires_at


# --- RegSub: authority and ownership ---------------------------------------------------------------------


def deny(user: str, pattern: str, permission: Permission = Permission.SUBSCRIBE) -> Authority:
    return Authority([AclRule(user, PrincipalKind.USER, pattern, permission, allow=False)])


def test_partial_subscribe_authority_registers_the_rest_with_a_warning() -> None:
    b = broker(deny("alice", "Sport/Tennis"))
    folder = regsub("Sport/Tennis/#", "Sport/Soccer", "Sport/Tennis", "News")
    outcome = b.send(folder)
    assert reply_folders(outcome) == pscr_warning([(3081, "Sport/Tennis/#"), (3081, "Sport/Tennis")], folder)
    assert topics_of(b) == ["News", "Sport/Soccer"]


def test_no_subscribe_authority_is_an_error_naming_the_first_topic() -> None:
    error(broker(deny("alice", "Sport")), regsub("Sport/Tennis", "Sport/Golf"), 3081, topic="Sport/Tennis")


def test_an_identity_belongs_to_the_user_who_registered_it() -> None:
    b = broker()
    b.send(regsub("Sport/#"), user_id="bob")
    folder = regsub("News/#")
    outcome = b.send(folder, user_id="carol")
    assert reply_folders(outcome) == pscr_error(3078, folder, detail=outcome.detail)
    assert topics_of(b) == ["Sport/#"]
    assert b.send(regsub("News/#"), user_id="bob").completion == "ok"


@pytest.mark.parametrize(
    ("first", "second", "completion"), [(True, True, "ok"), (True, False, "error"), (False, True, "error")]
)
def test_variable_user_id_on_both_sides_lets_another_user_share_the_identity(
    first: bool, second: bool, completion: str
) -> None:
    b = broker()
    b.send(regsub("Sport/#", opts=("VariableUserId",) if first else ()), user_id="bob")
    outcome = b.send(regsub("News/#", opts=("VariableUserId",) if second else ()), user_id="carol")
    assert outcome.completion == completion
    if completion == "error":
        assert outcome.reason == Reason.MQRCCF_DUPLICATE_IDENTITY


# --- RegSub: retained publications (seed scenario 2) -----------------------------------------------------


def test_seed_scenario_2_a_late_subscriber_gets_the_retained_score_at_once() -> None:
    b = broker()
    retain(b, expiry=6000, priority=3, persistence=MQPER_PERSISTENT)  # msg 1: ten minutes
    b.now = NOW + 60_000  # one minute later
    outcome = b.send(regsub("Sport/Soccer/State/LatestScore/#", opts=("NonPers",)), user_id="bob")
    assert reply_folders(outcome) == pscr_ok()
    (sent,) = deliveries(outcome)
    assert (sent.queue, sent.q_mgr, sent.kind, sent.topic) == ("SUB.Q", "", DELIVERY, SCORE)
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
        "persistence": MQPER_NOT_PERSISTENT,
        "priority": 3,
        "expiry": 5400,  # 9 minutes left
        "put_appl_type": MQAT_BROKER,
        "put_appl_name": QMGR,
        "put_date": "20260101",
        "put_time": "00010000",
        "backout_count": 0,
    }
    assert sent.folders == (f"<psc><Command>Publish</Command><Topic>{SCORE}</Topic></psc>", MCD)
    assert sent.payload == b"4-1"


def test_inform_if_ret_subscribers_see_the_retained_flag() -> None:
    b = broker()
    retain(b)
    outcome = b.send(regsub("Sport/#", opts=("InformIfRet", "CorrelAsId")), correl_id=correl("S"))
    (sent,) = deliveries(outcome)
    command = sent.psc
    assert isinstance(command, psc.Publish)
    assert (command.topics, command.options) == ((SCORE,), PubOpt.IsRetainedPub)
    assert sent.md["correl_id"] == correl("S")


@pytest.mark.parametrize("option", ["NewPubsOnly", "PubOnReqOnly"])
def test_new_pubs_only_and_pub_on_req_only_get_no_retained_publications(option: str) -> None:
    b = broker()
    retain(b)
    outcome = b.send(regsub("Sport/#", opts=(option,)))
    assert deliveries(outcome) == []
    assert reply_folders(outcome) == pscr_ok()


def test_an_expired_retained_publication_is_deleted_not_delivered() -> None:
    b = broker()
    retain(b, expiry=10)
    retain(b, "Sport/Soccer/State/LatestScore/Team3 Team4")
    b.now = NOW + 1000
    outcome = b.send(regsub("Sport/#"))
    assert [s.topic for s in deliveries(outcome)] == ["Sport/Soccer/State/LatestScore/Team3 Team4"]
    assert [e for e in changes(outcome) if isinstance(e, DeleteRetained)] == [DeleteRetained("", SCORE)]
    assert b.state.retained("", SCORE) is None


def test_retained_publications_are_sent_once_however_many_new_topics_match() -> None:
    b = broker()
    retain(b)
    outcome = b.send(regsub("Sport/#", SCORE, "Sport/+/State/#"))
    assert [s.topic for s in deliveries(outcome)] == [SCORE]


def test_retained_publications_are_only_sent_to_a_subscriber_allowed_the_topic() -> None:
    b = broker(deny("bob", SCORE))
    retain(b)
    retain(b, "Sport/Soccer/State/Other")
    outcome = b.send(regsub("Sport/#"), user_id="bob")
    assert [s.topic for s in deliveries(outcome)] == ["Sport/Soccer/State/Other"]


def test_retained_publications_of_another_subscription_point_are_not_sent() -> None:
    b = broker()
    b.send(psc_text("Publish", "Price/Tea", opts=["RetainPub"], SubPoint="Pounds"))
    assert deliveries(b.send(regsub("Price/#"))) == []
    (sent,) = deliveries(b.send(regsub("Price/#", queue="CAROL.Q", SubPoint="Pounds")))
    assert sent.psc_folder == (
        "<psc><Command>Publish</Command><Topic>Price/Tea</Topic><SubPoint>Pounds</SubPoint></psc>"
    )


# --- RegSub: FullResp, names, alteration ----------------------------------------------------------------


def test_full_resp_returns_every_attribute_of_the_subscription() -> None:
    b = broker()
    outcome = b.send(
        regsub(
            "Sport/#",
            opts=("FullResp", "CorrelAsId", "InformIfRet", "PersAsQueue", "JoinExcl", "DupsOK"),
            SubPoint="Pounds",
            SubName="scores",
            SubIdentity="app-1",
            SubUserData="user & data",
        ),
        correl_id=correl("C"),
        user_id="bob",
    )
    assert reply_folders(outcome) == (
        "<pscr><Completion>ok</Completion><Command>RegSub</Command><Topic>Sport/#</Topic>"
        "<SubPoint>Pounds</SubPoint><QMgrName>QM1</QMgrName><QName>SUB.Q</QName><UserId>bob</UserId>"
        "<RegOpt>CorrelAsId</RegOpt><RegOpt>InformIfRet</RegOpt><RegOpt>DupsOK</RegOpt>"
        "<RegOpt>PersAsQueue</RegOpt><RegOpt>Locked</RegOpt>"
        f"<CorrelId>{correl('C').hex().upper()}</CorrelId><SubName>scores</SubName>"
        "<SubIdentity>app-1</SubIdentity><SubUserData>user &amp; data</SubUserData></pscr>",
    )


def test_full_resp_on_an_unchanged_subscription_describes_it() -> None:
    b = broker()
    b.send(regsub("Sport/#"), user_id="bob")
    outcome = b.send(regsub("Sport/#", opts=("FullResp", "NoAlter"), SubUserData="x"), user_id="bob")
    assert changes(outcome) == []
    assert reply_folders(outcome) == (
        "<pscr><Completion>ok</Completion><Command>RegSub</Command><Topic>Sport/#</Topic>"
        "<QMgrName>QM1</QMgrName><QName>SUB.Q</QName><UserId>bob</UserId></pscr>",
    )


def test_full_resp_with_a_warning_answers_the_warning() -> None:
    b = broker()
    b.send(regsub("Sport/#", opts=("JoinShared",), SubIdentity="a"))
    folder = regsub("Sport/#", opts=("JoinShared", "FullResp"), SubIdentity="a")
    assert reply_folders(b.send(folder)) == pscr_warning([(3157, "Sport/#")], folder)


def test_a_sub_name_names_one_subscription() -> None:
    error(broker(), regsub("Sport/#", "News/#", SubName="two"), 3153)


def test_a_sub_name_already_naming_another_subscription_is_3152() -> None:
    b = broker()
    b.send(regsub("Sport/#", SubName="mine"))
    error(b, regsub("News/#", SubName="mine"), 3152)
    error(b, regsub("Sport/#", queue="CAROL.Q", SubName="mine"), 3152)


def test_naming_an_unnamed_subscription_needs_add_name() -> None:
    b = broker()
    b.send(regsub("Sport/#"))
    error(b, regsub("Sport/#", SubName="mine"), 3153)
    outcome = b.send(regsub("Sport/#", opts=("AddName",), SubName="mine"))
    assert reply_folders(outcome) == pscr_ok()
    assert only(b).sub_name == "mine"
    assert b.state.named("mine") == only(b)


def test_a_subscription_named_otherwise_is_3152() -> None:
    b = broker()
    b.send(regsub("Sport/#", SubName="first"))
    error(b, regsub("Sport/#", opts=("AddName",), SubName="second"), 3152)


def test_add_name_without_sub_name_is_3083() -> None:
    error(broker(), regsub("Sport/#", opts=("AddName",)), 3083, parameter="RegOpt")


def test_re_registration_alters_the_options() -> None:
    b = broker()
    b.send(regsub("Sport/#", opts=("NonPers", "InformIfRet")), expiry=10)
    before = only(b)
    b.now = NOW + 500
    outcome = b.send(regsub("Sport/#", opts=("Pers", "DupsOK"), SubUserData="v2"))
    after = only(b)
    assert changes(outcome) == [AddSubscription(after)]
    assert (after.options, after.sub_user_data, after.expires_at) == (
        int(RegOpt.Pers | RegOpt.DupsOK),
        "v2",
        None,
    )
    assert (after.seq, after.created_at) == (before.seq, before.created_at)


def test_altering_a_subscription_sends_the_retained_publications_again() -> None:
    b = broker()
    retain(b)
    b.send(regsub("Sport/#", opts=("NonPers",)))
    outcome = b.send(regsub("Sport/#", opts=("Pers", "InformIfRet")))
    (sent,) = deliveries(outcome)
    assert sent.psc_folder == (
        f"<psc><Command>Publish</Command><PubOpt>IsRetainedPub</PubOpt><Topic>{SCORE}</Topic></psc>"
    )
    assert sent.md["persistence"] == MQPER_PERSISTENT


def test_no_alter_leaves_an_existing_subscription_as_it_is() -> None:
    b = broker()
    retain(b)
    b.send(regsub("Sport/#", opts=("NonPers",)))
    before = only(b)
    outcome = b.send(regsub("Sport/#", opts=("Pers", "NoAlter")))
    assert changes(outcome) == [] and deliveries(outcome) == []
    assert only(b) == before
    assert reply_folders(outcome) == pscr_ok()


def test_re_registering_the_same_subscription_changes_nothing_and_sends_nothing() -> None:
    b = broker()
    retain(b)
    assert len(deliveries(b.send(regsub("Sport/#")))) == 1
    outcome = b.send(regsub("Sport/#"))
    assert changes(outcome) == [] and deliveries(outcome) == []


def test_dups_ok_is_accepted_and_kept() -> None:
    b = broker()
    assert reply_folders(b.send(regsub("Sport/#", opts=("DupsOK",)))) == pscr_ok()
    assert only(b).options == int(RegOpt.DupsOK)


def test_command_only_options_are_not_stored() -> None:
    b = broker()
    b.send(regsub("Sport/#", opts=("FullResp", "NoAlter", "JoinShared", "Local"), SubIdentity="a"))
    assert only(b).options == int(RegOpt.Local)


# --- RegSub: identity sets -----------------------------------------------------------------------------


def test_join_shared_adds_members_to_the_identity_set() -> None:
    b = broker()
    b.send(regsub("Sport/#", opts=("JoinShared",), SubIdentity="a"))
    b.send(regsub("Sport/#", opts=("JoinShared",), SubIdentity="b"))
    assert (only(b).members, only(b).exclusive) == (("a", "b"), None)


def test_joining_again_is_warning_3157_and_changes_nothing() -> None:
    b = broker()
    b.send(regsub("Sport/#", opts=("JoinShared",), SubIdentity="a"))
    before = only(b)
    folder = regsub("Sport/#", opts=("JoinShared",), SubIdentity="a")
    outcome = b.send(folder)
    assert reply_folders(outcome) == pscr_warning([(3157, "Sport/#")], folder)
    assert (outcome.completion, outcome.reason) == ("warning", 3157)
    assert only(b) == before


@pytest.mark.parametrize("exclusive", ["JoinExcl", "Locked"])
def test_an_exclusive_join_while_others_share_is_3155(exclusive: str) -> None:
    b = broker()
    b.send(regsub("Sport/#", opts=("JoinShared",), SubIdentity="a"))
    error(b, regsub("Sport/#", opts=(exclusive,), SubIdentity="b"), 3155)


@pytest.mark.parametrize("exclusive", ["JoinExcl", "Locked"])
def test_a_set_held_exclusively_by_another_member_is_3156(exclusive: str) -> None:
    b = broker()
    b.send(regsub("Sport/#", opts=(exclusive,), SubIdentity="a"))
    assert (only(b).members, only(b).exclusive) == (("a",), "a")
    error(b, regsub("Sport/#", opts=("JoinShared",), SubIdentity="b"), 3156)
    error(b, regsub("Sport/#", SubIdentity="b"), 3156)


def test_the_exclusive_member_may_alter_its_subscription() -> None:
    b = broker()
    b.send(regsub("Sport/#", opts=("JoinExcl",), SubIdentity="a"))
    assert b.send(regsub("Sport/#", opts=("Pers",), SubIdentity="a")).completion == "ok"
    assert (only(b).options, only(b).exclusive) == (int(RegOpt.Pers), "a")


def test_a_sole_member_may_take_the_set_exclusively() -> None:
    b = broker()
    b.send(regsub("Sport/#", opts=("JoinShared",), SubIdentity="a"))
    folder = regsub("Sport/#", opts=("JoinExcl",), SubIdentity="a")
    assert reply_folders(b.send(folder)) == pscr_warning([(3157, "Sport/#")], folder)
    assert (only(b).members, only(b).exclusive) == (("a",), "a")


def test_a_sub_identity_not_in_the_set_without_a_join_is_3154() -> None:
    b = broker()
    error(b, regsub("Sport/#", SubIdentity="a"), 3154)
    b.send(regsub("Sport/#", opts=("JoinShared",), SubIdentity="a"))
    error(b, regsub("Sport/#", SubIdentity="b"), 3154)


def test_altering_a_shared_subscription_without_sub_identity_is_3155() -> None:
    b = broker()
    b.send(regsub("Sport/#", opts=("JoinShared",), SubIdentity="a"))
    error(b, regsub("Sport/#", opts=("Pers",)), 3155)


def test_a_member_altering_without_a_join_keeps_the_set() -> None:
    b = broker()
    b.send(regsub("Sport/#", opts=("JoinShared",), SubIdentity="a"))
    b.send(regsub("Sport/#", opts=("JoinShared",), SubIdentity="b"))
    assert reply_folders(b.send(regsub("Sport/#", opts=("Pers",), SubIdentity="b"))) == pscr_ok()
    assert (only(b).members, only(b).options) == (("a", "b"), int(RegOpt.Pers))


def test_no_alter_still_joins_the_identity_set() -> None:
    b = broker()
    b.send(regsub("Sport/#", opts=("JoinShared", "NonPers"), SubIdentity="a"))
    b.send(regsub("Sport/#", opts=("JoinShared", "NoAlter", "Pers"), SubIdentity="b"))
    assert (only(b).members, only(b).options) == (("a", "b"), int(RegOpt.NonPers))


# --- DeregSub -------------------------------------------------------------------------------------------


def registered(*topics: str, user: str = "alice") -> Broker:
    b = broker()
    for topic in topics:
        assert b.send(regsub(topic), user_id=user).completion == "ok"
    return b


def test_deregsub_removes_one_subscription_by_topic_and_sub_point() -> None:
    b = registered("Sport/#", "News/#")
    b.send(regsub("Sport/#", SubPoint="Pounds"))
    outcome = b.send(deregsub("Sport/#", SubPoint="Pounds"))
    assert changes(outcome) == [RemoveSubscription(key("Sport/#", sub_point="Pounds"))]
    assert reply_folders(outcome) == pscr_ok()
    outcome = b.send(deregsub("Sport/#"))
    assert changes(outcome) == [RemoveSubscription(key("Sport/#"))]
    assert topics_of(b) == ["News/#"]


def test_deregsub_identity_defaults_from_reply_to_and_correl_as_id() -> None:
    b = broker()
    b.send(regsub("Sport/#", opts=("CorrelAsId",)), correl_id=correl("X"))
    assert b.send(deregsub("Sport/#")).reason == 3073
    outcome = b.send(deregsub("Sport/#", opts=("CorrelAsId",)), correl_id=correl("X"))
    assert changes(outcome) == [RemoveSubscription(key("Sport/#", correl_id=correl("X")))]


def test_deregsub_of_nothing_registered_is_3073_error() -> None:
    b = registered("Sport/#")
    error(b, deregsub("News/#"), 3073, topic="News/#")


def test_deregsub_of_some_registered_topics_is_a_3073_warning_for_the_others() -> None:
    b = registered("Sport/#", "News/#")
    folder = deregsub("Weather/#", "Sport/#", "Tides")
    outcome = b.send(folder)
    assert reply_folders(outcome) == pscr_warning([(3073, "Weather/#"), (3073, "Tides")], folder)
    assert changes(outcome) == [RemoveSubscription(key("Sport/#"))]
    assert topics_of(b) == ["News/#"]


def test_dereg_all_removes_every_subscription_of_the_identity() -> None:
    b = registered("Sport/#", "News/#")
    b.send(regsub("Sport/#", queue="CAROL.Q"))
    b.send(regsub("Price/#", SubPoint="Pounds"))
    outcome = b.send(deregsub(opts=("DeregAll",)))
    assert changes(outcome) == [
        RemoveSubscription(key("Sport/#")),
        RemoveSubscription(key("News/#")),
        RemoveSubscription(key("Price/#", sub_point="Pounds")),
    ]
    assert [s.identity.queue for s in b.state.subscriptions()] == ["CAROL.Q"]


def test_dereg_all_by_sub_point_and_by_topic() -> None:
    b = registered("Sport/#", "News/#")
    b.send(regsub("Price/#", SubPoint="Pounds"))
    b.send(regsub("Sport/#", SubPoint="Pounds"))
    by_point = b.send(deregsub(opts=("DeregAll",), SubPoint="Pounds"))
    assert changes(by_point) == [
        RemoveSubscription(key("Price/#", sub_point="Pounds")),
        RemoveSubscription(key("Sport/#", sub_point="Pounds")),
    ]
    by_topic = b.send(deregsub("News/#", opts=("DeregAll",)))
    assert changes(by_topic) == [RemoveSubscription(key("News/#"))]
    assert topics_of(b) == ["Sport/#"]


def test_dereg_all_with_nothing_to_remove_is_3073() -> None:
    b = registered("Sport/#")
    error(b, deregsub(opts=("DeregAll",), queue="CAROL.Q"), 3073)


def test_deregsub_by_sub_name() -> None:
    b = registered("Sport/#")
    b.send(regsub("News/#", SubName="news"))
    outcome = b.send(deregsub(queue=None, SubName="news"), reply_to_q="SOMEWHERE.ELSE")
    assert changes(outcome) == [RemoveSubscription(key("News/#"))]
    assert b.state.named("news") is None
    error(b, deregsub(queue=None, SubName="news"), 3073)


def test_deregsub_by_another_user_is_3151() -> None:
    b = registered("Sport/#", user="bob")
    error(b, deregsub("Sport/#"), 3151, topic="Sport/#")


def test_an_administrator_may_deregister_anyones_subscription() -> None:
    b = Broker(queues=QUEUES, authority=Authority(groups={"mqm": ["root"]}))
    b.send(regsub("Sport/#"), user_id="bob")
    outcome = b.send(deregsub("Sport/#"), user_id="root")
    assert changes(outcome) == [RemoveSubscription(key("Sport/#"))]


def test_variable_user_id_on_both_sides_lets_another_user_deregister() -> None:
    b = broker()
    b.send(regsub("Sport/#", opts=("VariableUserId",)), user_id="bob")
    assert b.send(deregsub("Sport/#"), user_id="carol").reason == 3151
    outcome = b.send(deregsub("Sport/#", opts=("VariableUserId",)), user_id="carol")
    assert changes(outcome) == [RemoveSubscription(key("Sport/#"))]


def test_leaving_an_identity_set_keeps_the_subscription_for_the_others() -> None:
    b = broker()
    b.send(regsub("Sport/#", opts=("JoinShared",), SubIdentity="a"))
    b.send(regsub("Sport/#", opts=("JoinShared",), SubIdentity="b"))
    outcome = b.send(deregsub("Sport/#", SubIdentity="a"))
    assert changes(outcome) == [AddSubscription(only(b))]
    assert only(b).members == ("b",)
    outcome = b.send(deregsub("Sport/#", SubIdentity="b"))
    assert changes(outcome) == [RemoveSubscription(key("Sport/#"))]
    assert len(b.state) == 0


def test_leave_only_keeps_a_subscription_its_last_member_leaves() -> None:
    b = broker()
    b.send(regsub("Sport/#", opts=("JoinExcl",), SubIdentity="a"))
    outcome = b.send(deregsub("Sport/#", opts=("LeaveOnly",), SubIdentity="a"))
    assert changes(outcome) == [AddSubscription(only(b))]
    assert (only(b).members, only(b).exclusive) == ((), None)


def test_leaving_a_set_one_is_not_in_is_3154() -> None:
    b = broker()
    b.send(regsub("Sport/#", opts=("JoinShared",), SubIdentity="a"))
    error(b, deregsub("Sport/#", SubIdentity="z"), 3154, topic="Sport/#")


def test_deregsub_full_resp_describes_what_was_removed() -> None:
    b = broker()
    b.send(regsub("Sport/#", SubUserData="data"))
    outcome = b.send(deregsub("Sport/#", opts=("FullResp",)))
    assert reply_folders(outcome) == (
        "<pscr><Completion>ok</Completion><Command>DeregSub</Command><Topic>Sport/#</Topic>"
        "<QMgrName>QM1</QMgrName><QName>SUB.Q</QName><UserId>alice</UserId>"
        "<SubUserData>data</SubUserData></pscr>",
    )


def test_deregsub_full_resp_after_leaving_describes_what_remains() -> None:
    b = broker()
    b.send(regsub("Sport/#", opts=("JoinShared",), SubIdentity="a"))
    b.send(regsub("Sport/#", opts=("JoinShared",), SubIdentity="b"))
    outcome = b.send(deregsub("Sport/#", opts=("FullResp",), SubIdentity="a"))
    assert reply_folders(outcome) == (
        "<pscr><Completion>ok</Completion><Command>DeregSub</Command><Topic>Sport/#</Topic>"
        "<QMgrName>QM1</QMgrName><QName>SUB.Q</QName><UserId>alice</UserId>"
        "<SubIdentity>b</SubIdentity></pscr>",
    )


def test_full_resp_with_dereg_all_is_3083() -> None:
    error(registered("Sport/#"), deregsub(opts=("FullResp", "DeregAll")), 3083, parameter="RegOpt")


# --- ReqUpdate --------------------------------------------------------------------------------------------


def test_req_update_delivers_the_matching_retained_publications() -> None:
    b = broker()
    retain(b)
    retain(b, "Sport/Soccer/State/LatestScore/Team3 Team4")
    retain(b, "News/Today")
    b.send(
        regsub("Sport/Soccer/State/LatestScore/#", opts=("PubOnReqOnly", "InformIfRet", "CorrelAsId")),
        correl_id=correl("R"),
    )
    outcome = b.send(
        requpdate("Sport/Soccer/State/LatestScore/#", opts=("CorrelAsId",)), correl_id=correl("R")
    )
    assert reply_folders(outcome) == pscr_ok()
    sent = deliveries(outcome)
    assert sorted(s.topic for s in sent) == [SCORE, "Sport/Soccer/State/LatestScore/Team3 Team4"]
    for s in sent:
        assert s.md["correl_id"] == correl("R")
        assert s.psc_folder == (
            f"<psc><Command>Publish</Command><PubOpt>IsRetainedPub</PubOpt><Topic>{s.topic}</Topic></psc>"
        )
        assert s.folders[1:] == (MCD,) and s.payload == b"4-1"
    assert changes(outcome) == []


def test_req_update_without_inform_if_ret_is_not_flagged() -> None:
    b = broker()
    retain(b)
    b.send(regsub(SCORE, opts=("PubOnReqOnly",)))
    (sent,) = deliveries(b.send(requpdate(SCORE)))
    assert sent.psc_folder == f"<psc><Command>Publish</Command><Topic>{SCORE}</Topic></psc>"


def test_req_update_ids_differ_from_the_registration_delivery() -> None:
    b = broker()
    retain(b)
    (at_registration,) = deliveries(b.send(regsub(SCORE)))
    (on_request,) = deliveries(b.send(requpdate(SCORE)))
    assert at_registration.md["msg_id"] != on_request.md["msg_id"]


def test_req_update_without_a_subscription_is_3073() -> None:
    b = broker()
    retain(b)
    b.send(regsub("Sport/#"))
    error(b, requpdate(SCORE), 3073, topic=SCORE)


def test_req_update_with_nothing_retained_is_3077() -> None:
    b = broker()
    retain(b, "News/Today")
    b.send(regsub("Sport/#"))
    error(b, requpdate("Sport/#"), 3077, topic="Sport/#")


def test_req_update_with_only_expired_publications_is_3077() -> None:
    b = broker()
    retain(b, expiry=10)
    b.send(regsub("Sport/#", opts=("PubOnReqOnly",)))
    b.now = NOW + 1000
    error(b, requpdate("Sport/#"), 3077, topic="Sport/#")


def test_req_update_by_another_user_is_3151() -> None:
    b = broker()
    retain(b)
    b.send(regsub("Sport/#"), user_id="bob")
    error(b, requpdate("Sport/#"), 3151, topic="Sport/#")


def test_req_update_by_sub_name() -> None:
    b = broker()
    retain(b)
    b.send(regsub("Sport/#", opts=("PubOnReqOnly",), SubName="scores"))
    outcome = b.send(requpdate("Sport/#", queue=None, SubName="scores"))
    assert [(s.queue, s.topic) for s in deliveries(outcome)] == [("SUB.Q", SCORE)]


def test_req_update_by_sub_name_must_name_a_subscription_on_that_topic() -> None:
    b = broker()
    retain(b)
    retain(b, "News/Today")
    b.send(regsub("Sport/#", opts=("PubOnReqOnly",), SubName="scores"))
    error(b, requpdate("News/#", queue=None, SubName="scores"), 3073, topic="News/#")
    error(b, requpdate("Sport/#", queue=None, SubName="scores", SubPoint="Pounds"), 3073, topic="Sport/#")


def test_req_update_allows_one_topic_only() -> None:
    b = broker()
    folder = psc_text("ReqUpdate", "a", "b", QName="SUB.Q")
    outcome = b.send(folder)
    assert reply_folders(outcome) == pscr_error(2338, folder, parameter="Topic", detail=outcome.detail)


def test_pub_on_req_only_gets_publications_only_by_asking() -> None:
    b = broker()
    b.send(regsub("Sport/#", opts=("PubOnReqOnly",)))
    live = b.send(psc_text("Publish", SCORE, opts=["RetainPub"]), payload=b"1-1")
    assert deliveries(live) == []
    (sent,) = deliveries(b.send(requpdate("Sport/#")))
    assert sent.payload == b"1-1" and sent.md["persistence"] == MQPER_PERSISTENT
