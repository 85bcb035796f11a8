"""broker.core.neighbours and the network behaviour of the pure core (reference section 5): proxy
subscriptions, forwarded publications and deletes, loops, retained catch-up, neighbours' answers."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from broker.core import neighbours
from broker.core.authority import AclRule, Authority, Permission, PrincipalKind
from broker.core.effects import FORWARD, PROXY, AddSubscription, Outcome, Put
from broker.core.subscription import Identity, SubscriptionKey
from broker.protocol import brokerpath, psc
from broker.protocol.options import PubOpt, RegOpt
from queues.message import (
    CCSID_UTF8,
    MQAT_BROKER,
    MQENC_NATIVE,
    MQFMT_RF_HEADER_2,
    MQMT_DATAGRAM,
    MQPER_PERSISTENT,
    MQRO_NAN,
)
from tests.broker.core.builders import (
    ANY_ID,
    CONTROL,
    INTER,
    NOW,
    REPLY_Q,
    Broker,
    Sent,
    changes,
    dead_letters,
    decode_put,
    deliveries,
    forwards,
    msg_id,
    proxies,
    psc_text,
    puts,
)

QUEUES = [REPLY_Q, "SUB.Q", "CAROL.Q"]


def proxy_folder(topic: str, qmgr: str, *, register: bool = True, sub_point: str | None = None) -> str:
    command = "RegSub" if register else "DeregSub"
    opts = "<RegOpt>PersAsPub</RegOpt>" if register else ""
    point = f"<SubPoint>{sub_point}</SubPoint>" if sub_point else ""
    return (
        f"<psc><Command>{command}</Command>{opts}<Topic>{topic}</Topic>{point}"
        f"<QMgrName>{qmgr}</QMgrName><QName>{INTER}</QName></psc>"
    )


def hub(*names: str, authority: Authority | None = None) -> Broker:
    return Broker(qmgr="QM1", queues=QUEUES, neighbours=names, authority=authority)


def proxy_targets(outcome: Outcome) -> list[tuple[str, str, str]]:
    """(neighbour, command, topic) of each proxy command."""
    result = []
    for sent in proxies(outcome):
        command = sent.psc
        assert isinstance(command, psc.RegSub | psc.DeregSub)
        result.append((sent.q_mgr, type(command).__name__, command.topics[0]))
    return result


def from_neighbour(b: Broker, neighbour: str, topic: str, *, register: bool = True) -> Outcome:
    """The proxy command ``neighbour`` sends for ``topic``."""
    return b.send(
        proxy_folder(topic, neighbour, register=register),
        CONTROL,
        user_id="mqm",
        msg_type=MQMT_DATAGRAM,
        report=MQRO_NAN,
        reply_to_q=INTER,
        reply_to_qmgr=neighbour,
    )


class Network:
    """Brokers linked as given; Puts addressed to another broker's input queues are carried there
    (as the channel agents will), everything else is collected as (broker, Sent)."""

    def __init__(self, links: dict[str, Iterable[str]]) -> None:
        self.brokers = {name: Broker(qmgr=name, queues=QUEUES, neighbours=n) for name, n in links.items()}
        self.hops: list[tuple[str, str, str]] = []  # (from, to, kind) of every broker-to-broker Put

    def send(self, qmgr: str, folder: str, **md: Any) -> list[tuple[str, Sent]]:
        return self.pump(qmgr, self.brokers[qmgr].send(folder, **md))

    def pump(self, qmgr: str, outcome: Outcome) -> list[tuple[str, Sent]]:
        pending = deque([(qmgr, outcome)])
        collected: list[tuple[str, Sent]] = []
        for _ in range(1000):
            if not pending:
                return collected
            at, outcome = pending.popleft()
            assert dead_letters(outcome) == [], outcome
            for sent in puts(outcome):
                if sent.q_mgr in self.brokers and sent.queue in (CONTROL, INTER):
                    self.hops.append((at, sent.q_mgr, sent.kind))
                    pending.append((sent.q_mgr, self.brokers[sent.q_mgr].deliver(sent)))
                else:
                    collected.append((at, sent))
        raise AssertionError("messages are circulating")

    def delivered(self, collected: list[tuple[str, Sent]]) -> list[tuple[str, str, tuple[str, ...]]]:
        """(broker, queue, topics) of the deliveries to subscribers."""
        result = []
        for at, sent in collected:
            if sent.kind == "delivery":
                command = sent.psc
                assert isinstance(command, psc.Publish)
                result.append((at, sent.queue, command.topics))
        return result


# --- proxy subscriptions registered here -----------------------------------------------------------------


def test_a_regsub_from_a_neighbour_becomes_a_proxy_subscription() -> None:
    b = hub("QM2", authority=Authority(default_allow=False))  # no ACL applies to a proxy
    outcome = from_neighbour(b, "QM2", "Sport/#")
    (effect,) = changes(outcome)
    assert isinstance(effect, AddSubscription)
    sub = effect.subscription
    assert sub.key == SubscriptionKey(Identity("QM2", INTER), "", "Sport/#")
    assert (sub.origin, sub.options, sub.user_id, sub.is_proxy) == ("QM2", int(RegOpt.PersAsPub), "mqm", True)
    assert puts(outcome) == []  # a datagram with NAN: no answer on success


def test_the_first_global_subscription_registers_a_proxy_with_every_neighbour() -> None:
    b = hub("QM3", "QM2")
    outcome = b.send(psc_text("RegSub", "Sport/#", QName="SUB.Q"))
    sent = proxies(outcome)
    assert [(s.queue, s.q_mgr, s.kind) for s in sent] == [(CONTROL, "QM2", PROXY), (CONTROL, "QM3", PROXY)]
    for s in sent:
        assert s.folders == (proxy_folder("Sport/#", "QM1"),)
        assert s.payload == b""
        assert s.md == {
            "msg_id": ANY_ID,
            "correl_id": b"\x00" * 24,
            "format": MQFMT_RF_HEADER_2,
            "encoding": MQENC_NATIVE,
            "ccsid": CCSID_UTF8,
            "msg_type": MQMT_DATAGRAM,
            "report": MQRO_NAN,
            "reply_to_q": INTER,
            "reply_to_qmgr": "QM1",
            "user_id": "mqm",
            "persistence": MQPER_PERSISTENT,
            "priority": 5,
            "expiry": -1,
            "put_appl_type": MQAT_BROKER,
            "put_appl_name": "QM1",
            "put_date": "20260101",
            "put_time": "00000000",
            "backout_count": 0,
        }
    assert sent[0].md["msg_id"] != sent[1].md["msg_id"]
    replayed = hub("QM3", "QM2").send(psc_text("RegSub", "Sport/#", QName="SUB.Q"))
    assert [s.message for s in proxies(replayed)] == [s.message for s in sent]  # same ids on a replay


def test_a_proxy_names_its_subscription_point_and_never_a_filter_or_options_but_pers_as_pub() -> None:
    b = hub("QM2")
    outcome = b.send(
        psc_text(
            "RegSub",
            "Price/#",
            opts=["NonPers", "InformIfRet", "CorrelAsId"],
            QName="SUB.Q",
            SubPoint="Pounds",
        ),
        correl_id=b"C".ljust(24, b"\x00"),
    )
    (sent,) = proxies(outcome)
    assert sent.folders == (proxy_folder("Price/#", "QM1", sub_point="Pounds"),)


def test_a_second_subscription_on_the_same_topic_registers_no_proxy() -> None:
    b = hub("QM2")
    b.send(psc_text("RegSub", "Sport/#", QName="SUB.Q"))
    second = b.send(psc_text("RegSub", "Sport/#", QName="CAROL.Q"), user_id="carol")
    assert proxies(second) == []
    other_topic = b.send(psc_text("RegSub", "News/#", QName="CAROL.Q"), user_id="carol")
    assert proxy_targets(other_topic) == [("QM2", "RegSub", "News/#")]


def test_one_regsub_of_several_topics_registers_one_proxy_per_new_topic() -> None:
    b = hub("QM2")
    b.send(psc_text("RegSub", "News/#", QName="CAROL.Q"), user_id="carol")
    outcome = b.send(psc_text("RegSub", "Sport/#", "News/#", "Weather", QName="SUB.Q"))
    assert proxy_targets(outcome) == [("QM2", "RegSub", "Sport/#"), ("QM2", "RegSub", "Weather")]


def test_removing_the_last_global_subscription_deregisters_the_proxy() -> None:
    b = hub("QM2")
    (registered,) = proxies(b.send(psc_text("RegSub", "Sport/#", QName="SUB.Q")))
    b.send(psc_text("RegSub", "Sport/#", QName="CAROL.Q"), user_id="carol")
    first = b.send(psc_text("DeregSub", "Sport/#", QName="SUB.Q"))
    assert proxies(first) == []
    last = b.send(psc_text("DeregSub", "Sport/#", QName="CAROL.Q"), user_id="carol")
    (sent,) = proxies(last)
    assert (sent.queue, sent.q_mgr) == (CONTROL, "QM2")
    assert sent.folders == (proxy_folder("Sport/#", "QM1", register=False),)
    assert {k: v for k, v in sent.md.items() if k != "msg_id"} == {
        k: v for k, v in registered.md.items() if k != "msg_id"
    }
    assert sent.md["msg_id"] != registered.md["msg_id"]


def test_local_subscriptions_never_propagate() -> None:
    b = hub("QM2")
    outcome = b.send(psc_text("RegSub", "Sport/#", opts=["Local"], QName="SUB.Q"))
    assert proxies(outcome) == []
    assert proxies(b.send(psc_text("DeregSub", "Sport/#", QName="SUB.Q"))) == []


def test_a_local_subscription_does_not_keep_a_proxy_alive() -> None:
    b = hub("QM2")
    b.send(psc_text("RegSub", "Sport/#", opts=["Local"], QName="CAROL.Q"), user_id="carol")
    assert proxy_targets(b.send(psc_text("RegSub", "Sport/#", QName="SUB.Q"))) == [
        ("QM2", "RegSub", "Sport/#")
    ]
    assert proxy_targets(b.send(psc_text("DeregSub", "Sport/#", QName="SUB.Q"))) == [
        ("QM2", "DeregSub", "Sport/#")
    ]


def test_altering_a_subscription_to_local_withdraws_its_proxy_and_back() -> None:
    b = hub("QM2")
    b.send(psc_text("RegSub", "Sport/#", QName="SUB.Q"))
    assert proxy_targets(b.send(psc_text("RegSub", "Sport/#", opts=["Local"], QName="SUB.Q"))) == [
        ("QM2", "DeregSub", "Sport/#")
    ]
    assert proxy_targets(b.send(psc_text("RegSub", "Sport/#", QName="SUB.Q"))) == [
        ("QM2", "RegSub", "Sport/#")
    ]


def test_a_proxy_from_one_neighbour_is_propagated_to_the_others_but_not_back() -> None:
    b = hub("QM2", "QM3", "QM4")
    outcome = from_neighbour(b, "QM2", "Sport/#")
    assert proxy_targets(outcome) == [("QM3", "RegSub", "Sport/#"), ("QM4", "RegSub", "Sport/#")]
    # QM3 asks for the same topic: now QM2 must be told too, since QM3 is someone other than QM2.
    assert proxy_targets(from_neighbour(b, "QM3", "Sport/#")) == [("QM2", "RegSub", "Sport/#")]
    # QM2 withdraws: QM3 still wants it, so only QM3 (whose only other party was QM2) is told.
    assert proxy_targets(from_neighbour(b, "QM2", "Sport/#", register=False)) == [
        ("QM3", "DeregSub", "Sport/#")
    ]


def test_proxies_for_a_joining_neighbour_cover_every_topic_others_want() -> None:
    b = hub("QM2", "QM3")
    b.send(psc_text("RegSub", "Sport/#", "News", QName="SUB.Q"))
    b.send(psc_text("RegSub", "Price/#", QName="SUB.Q", SubPoint="Pounds"))
    b.send(psc_text("RegSub", "Local/#", opts=["Local"], QName="SUB.Q"))
    from_neighbour(b, "QM3", "Weather/#")  # QM3's own wish is not proxied back to it
    from_neighbour(b, "QM2", "Tides")
    joined = neighbours.proxies_for(b.state, "QM3", NOW)
    sent = [decode_put(p) for p in joined]
    assert [(s.queue, s.q_mgr, s.kind, s.folders) for s in sent] == [
        (CONTROL, "QM3", PROXY, (proxy_folder("News", "QM1"),)),
        (CONTROL, "QM3", PROXY, (proxy_folder("Sport/#", "QM1"),)),
        (CONTROL, "QM3", PROXY, (proxy_folder("Tides", "QM1"),)),
        (CONTROL, "QM3", PROXY, (proxy_folder("Price/#", "QM1", sub_point="Pounds"),)),
    ]
    assert len({s.md["msg_id"] for s in sent}) == 4
    assert neighbours.proxies_for(b.state, "QM3", NOW) == joined  # deterministic
    to_qm2 = neighbours.proxies_for(b.state, "QM2", NOW)
    assert [p.topic for p in to_qm2] == ["News", "Sport/#", "Weather/#", "Price/#"]


# --- publications to and from neighbours -----------------------------------------------------------------


def test_a_publication_matching_a_proxy_is_forwarded_once_per_neighbour_with_its_path() -> None:
    b = hub("QM2", "QM3")
    from_neighbour(b, "QM2", "Sport/#")
    from_neighbour(b, "QM2", "Sport/Soccer")
    outcome = b.send(
        psc_text("Publish", "Sport/Soccer", "Sport/Golf", "News"), extra=["<usr><x>1</x></usr>"], payload=b"p"
    )
    (sent,) = forwards(outcome)
    assert (sent.queue, sent.q_mgr, sent.kind, sent.topic) == (INTER, "QM2", FORWARD, "Sport/Soccer")
    assert sent.folders == (
        "<psc><Command>Publish</Command><Topic>Sport/Soccer</Topic><Topic>Sport/Golf</Topic>"
        f"<QMgrName>QM1</QMgrName><QName>{REPLY_Q}</QName></psc>",
        f"<brokerpath><OrigMsgId>{msg_id(3).hex()}</OrigMsgId><QMgr>QM1</QMgr></brokerpath>",
        "<usr><x>1</x></usr>",
    )
    assert sent.payload == b"p"
    assert (sent.md["user_id"], sent.md["msg_type"], sent.md["put_appl_type"]) == (
        "mqm",
        MQMT_DATAGRAM,
        MQAT_BROKER,
    )


def test_a_publication_is_delivered_across_the_network_with_the_subscribers_descriptor() -> None:
    net = Network({"QM1": ["QM2"], "QM2": ["QM1", "QM3"], "QM3": ["QM2"]})
    net.send(
        "QM3",
        psc_text("RegSub", "Sport/#", QName="SUB.Q", opts=["CorrelAsId", "NonPers"]),
        user_id="bob",
        correl_id=b"B".ljust(24, b"\x00"),
    )
    collected = net.send(
        "QM1", psc_text("Publish", "Sport/Soccer", PubTime="T"), payload=b"goal", persistence=MQPER_PERSISTENT
    )
    assert net.delivered(collected) == [("QM3", "SUB.Q", ("Sport/Soccer",))]
    (sent,) = [s for at, s in collected if s.kind == "delivery"]
    assert sent.folders == (
        "<psc><Command>Publish</Command><Topic>Sport/Soccer</Topic><PubTime>T</PubTime></psc>",
    )
    assert (sent.q_mgr, sent.payload) == ("", b"goal")
    assert (sent.md["user_id"], sent.md["correl_id"], sent.md["persistence"], sent.md["reply_to_qmgr"]) == (
        "bob",
        b"B".ljust(24, b"\x00"),
        0,
        "QM3",
    )


def test_a_publication_is_never_forwarded_back_along_its_path() -> None:
    net = Network({"QM1": ["QM2"], "QM2": ["QM1", "QM3"], "QM3": ["QM2"]})
    for name in ("QM1", "QM2", "QM3"):
        net.send(name, psc_text("RegSub", "Sport/#", QName="SUB.Q"))
    net.hops.clear()
    collected = net.send("QM1", psc_text("Publish", "Sport/Soccer"))
    assert net.delivered(collected) == [
        ("QM1", "SUB.Q", ("Sport/Soccer",)),
        ("QM2", "SUB.Q", ("Sport/Soccer",)),
        ("QM3", "SUB.Q", ("Sport/Soccer",)),
    ]
    assert net.hops == [("QM1", "QM2", FORWARD), ("QM2", "QM3", FORWARD)]


def test_a_forwarded_publication_is_not_sent_to_brokers_already_on_its_path() -> None:
    b = hub("QM2", "QM3")
    from_neighbour(b, "QM2", "Sport/#")
    from_neighbour(b, "QM3", "Sport/#")
    path = brokerpath.render(brokerpath.BrokerPath(msg_id(70), ("QM3", "QM2")))
    outcome = b.send(
        psc_text("Publish", "Sport/Soccer", QMgrName="QM3", QName="PUB.Q"),
        INTER,
        extra=[path],
        user_id="mqm",
        msg_type=MQMT_DATAGRAM,
    )
    assert forwards(outcome) == []
    assert outcome.completion == "ok"


def test_local_subscribers_do_not_get_publications_from_the_network() -> None:
    b = hub("QM2")
    b.send(psc_text("RegSub", "Sport/#", opts=["Local"], QName="SUB.Q"))
    b.send(psc_text("RegSub", "Sport/#", QName="CAROL.Q"), user_id="carol")
    path = brokerpath.render(brokerpath.BrokerPath(msg_id(71), ("QM2",)))
    outcome = b.send(
        psc_text("Publish", "Sport/Soccer", QMgrName="QM2"), INTER, extra=[path], msg_type=MQMT_DATAGRAM
    )
    assert [s.queue for s in deliveries(outcome)] == ["CAROL.Q"]
    assert [s.queue for s in deliveries(b.send(psc_text("Publish", "Sport/Soccer")))] == ["SUB.Q", "CAROL.Q"]


def test_publications_from_the_network_need_no_local_publish_authority() -> None:
    authority = Authority([AclRule("mqm", PrincipalKind.USER, "#", Permission.PUBLISH, allow=False)])
    b = hub("QM2", authority=authority)
    b.send(psc_text("RegSub", "Sport/#", QName="SUB.Q"))
    path = brokerpath.render(brokerpath.BrokerPath(msg_id(72), ("QM2",)))
    outcome = b.send(
        psc_text("Publish", "Sport/Soccer", QMgrName="QM2"),
        INTER,
        extra=[path],
        user_id="mqm",
        msg_type=MQMT_DATAGRAM,
    )
    assert [s.queue for s in deliveries(outcome)] == ["SUB.Q"]


def test_other_subs_only_holds_across_the_network() -> None:
    net = Network({"QM1": ["QM2"], "QM2": ["QM1"]})
    net.send("QM2", psc_text("RegSub", "Chat/#", QName="SUB.Q", QMgrName="QM2"))
    net.send("QM2", psc_text("RegSub", "Chat/#", QName="CAROL.Q"), user_id="carol")
    collected = net.send(
        "QM1", psc_text("Publish", "Chat/Room", opts=["OtherSubsOnly"], QName="SUB.Q", QMgrName="QM2")
    )
    assert net.delivered(collected) == [("QM2", "CAROL.Q", ("Chat/Room",))]


# --- retained publications across the network ------------------------------------------------------------


def test_a_new_proxy_is_sent_the_retained_publications_it_matches() -> None:
    b = hub("QM2")
    b.send(psc_text("Publish", "Sport/Soccer", opts=["RetainPub"]), payload=b"1-0", expiry=600)
    b.now = NOW + 10_000
    outcome = from_neighbour(b, "QM2", "Sport/#")
    (sent,) = forwards(outcome)
    assert (sent.queue, sent.q_mgr) == (INTER, "QM2")
    command = sent.psc
    assert isinstance(command, psc.Publish)
    assert command.options == PubOpt.RetainPub | PubOpt.IsRetainedPub
    assert (sent.md["expiry"], sent.payload) == (500, b"1-0")


def test_retained_catch_up_reaches_a_late_subscriber_elsewhere_flagged_as_retained() -> None:
    net = Network({"QM1": ["QM2"], "QM2": ["QM1"]})
    net.send("QM1", psc_text("Publish", "Score", opts=["RetainPub"]), payload=b"2-2")
    collected = net.send("QM2", psc_text("RegSub", "Score", opts=["InformIfRet"], QName="SUB.Q"))
    assert net.delivered(collected) == [("QM2", "SUB.Q", ("Score",))]
    (sent,) = [s for _, s in collected if s.kind == "delivery"]
    assert (
        sent.psc_folder
        == "<psc><Command>Publish</Command><PubOpt>IsRetainedPub</PubOpt><Topic>Score</Topic></psc>"
    )
    assert net.brokers["QM2"].state.retained("", "Score") is not None


def test_retained_catch_up_skips_new_pubs_only_subscribers() -> None:
    net = Network({"QM1": ["QM2"], "QM2": ["QM1"]})
    net.send("QM1", psc_text("Publish", "Score", opts=["RetainPub"]))
    collected = net.send("QM2", psc_text("RegSub", "Score", opts=["NewPubsOnly"], QName="SUB.Q"))
    assert net.delivered(collected) == []
    collected = net.send("QM1", psc_text("Publish", "Score"))
    assert net.delivered(collected) == [("QM2", "SUB.Q", ("Score",))]


def test_a_retained_catch_up_already_held_is_dropped() -> None:
    net = Network({"QM1": ["QM2"], "QM2": ["QM1"]})
    qm2 = net.brokers["QM2"]
    net.send("QM2", psc_text("RegSub", "Score", QName="SUB.Q"))
    net.send("QM1", psc_text("Publish", "Score", opts=["RetainPub"]))
    held = qm2.state.retained("", "Score")
    assert held is not None
    # A second proxy from QM2 that matches Score makes QM1 send it again: QM2 drops it.
    outcome = from_neighbour(net.brokers["QM1"], "QM2", "#")
    (catch_up,) = forwards(outcome)
    result = qm2.deliver(catch_up)
    assert (result.effects, result.completion, result.detail) == (
        (),
        "ok",
        "retained publication already held",
    )
    assert qm2.state.retained("", "Score") == held


def test_a_retained_publication_is_never_sent_back_to_a_broker_on_its_path() -> None:
    net = Network({"QM1": ["QM2"], "QM2": ["QM1"]})
    net.send("QM2", psc_text("RegSub", "Score", QName="SUB.Q"))
    net.send("QM1", psc_text("Publish", "Score", opts=["RetainPub"]))
    assert net.brokers["QM2"].state.retained("", "Score") is not None
    net.hops.clear()
    # QM1's new subscriber makes QM1 register a proxy at QM2; QM2 holds Score, but it came from QM1.
    net.send("QM1", psc_text("RegSub", "Score/#", QName="SUB.Q"))
    assert net.hops == [("QM1", "QM2", PROXY)]


# --- answers from neighbours ---------------------------------------------------------------------------


def test_a_neighbours_error_answer_comes_back_as_a_response_not_a_dead_letter() -> None:
    net = Network({"QM1": ["QM2"], "QM2": ["QM1"]})
    qm1, qm2 = net.brokers["QM1"], net.brokers["QM2"]
    # QM1 withdraws a proxy QM2 never registered: QM2 answers 3073 to QM1's inter-broker queue.
    put = neighbours.proxy_command(qm1.state, "QM2", "", "Ghost", register=False, cause=msg_id(80), now=NOW)
    refused = qm2.deliver(decode_put(put))
    (answer,) = puts(refused)
    assert (answer.queue, answer.q_mgr) == (INTER, "QM1")
    assert dead_letters(refused) == []
    logged = qm1.deliver(answer)
    assert (logged.effects, logged.command, logged.completion, logged.reason) == (
        (),
        "Response",
        "error",
        3073,
    )


# --- the commands themselves -------------------------------------------------------------------------------


def test_proxy_changes_are_judged_against_the_state_before_the_change() -> None:
    b = hub("QM2")
    b.send(psc_text("RegSub", "Sport/#", QName="SUB.Q"))
    (sub,) = b.state.subscriptions()
    assert neighbours.proxy_changes(b.state, [sub], [sub], cause=msg_id(1), now=NOW) == []
    (withdraw,) = neighbours.proxy_changes(b.state, [], [sub], cause=msg_id(1), now=NOW)
    assert withdraw == neighbours.proxy_command(
        b.state, "QM2", "", "Sport/#", register=False, cause=msg_id(1), now=NOW
    )


def test_a_forwarded_delete_is_a_delete_pub_with_the_path() -> None:
    b = hub("QM2")
    path = brokerpath.BrokerPath(msg_id(90), ("QM1",))
    put = neighbours.forwarded_delete(b.state, "QM2", ("a", "b/#"), "Pounds", path, NOW)
    assert isinstance(put, Put)
    assert (put.queue, put.q_mgr, put.kind) == (INTER, "QM2", FORWARD)
    sent = decode_put(put)
    assert sent.folders == (
        "<psc><Command>DeletePub</Command><Topic>a</Topic><Topic>b/#</Topic><SubPoint>Pounds</SubPoint></psc>",
        f"<brokerpath><OrigMsgId>{msg_id(90).hex()}</OrigMsgId><QMgr>QM1</QMgr></brokerpath>",
    )
    assert sent.md["msg_id"] == ANY_ID
    # The id follows the origin, not the hop: every broker passing this delete on to QM2 sends the same id.
    longer = neighbours.forwarded_delete(b.state, "QM2", ("a", "b/#"), "Pounds", path.through("QM5"), NOW)
    other = neighbours.forwarded_delete(b.state, "QM3", ("a", "b/#"), "Pounds", path, NOW)
    assert longer.message.msg_id == put.message.msg_id != other.message.msg_id
    assert (sent.md["report"], sent.md["reply_to_q"], sent.md["reply_to_qmgr"]) == (MQRO_NAN, INTER, "QM1")
