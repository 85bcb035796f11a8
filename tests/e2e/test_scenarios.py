"""The issue's end-to-end scenarios against a real ``broker serve`` process, on SQLite and PostgreSQL.

The test process is the application: it talks to the broker only through ``broker.client`` (and
reads the state tables an administrator would read), while the broker runs as an operator starts
it. Restarts use SIGTERM, which must let the broker finish its batch and exit 0.
"""

from __future__ import annotations

import time

import pytest

from broker import store
from broker.client import BrokerClient, BrokerResponse, decode_publication
from broker.core.authority import AclRule, Permission, PrincipalKind
from broker.core.system import DEFAULT_STREAM
from broker.protocol.options import PubOpt, RegOpt
from tests.e2e.harness import bodies, drain
from tests.e2e.processes import Brokers, Publisher, wait_until

pytestmark = pytest.mark.slow

SCORE = "Sport/Soccer/State/LatestScore/Team1 Team2"
WAIT = 30.0


def ok(response: BrokerResponse | None) -> BrokerResponse:
    assert response is not None
    assert response.completion == "ok", response.describe()
    return response


def client_of(brokers: Brokers, *queues: str, user: str = "alice") -> BrokerClient:
    for name in queues:
        brokers.qm.define_queue(name)
    return BrokerClient(brokers.qm, user_id=user, timeout=WAIT)


def retained_topics(brokers: Brokers) -> list[str]:
    with brokers.qm.reading() as conn:
        return sorted(p.topic for _, p in store.list_retained(conn))


def test_seed_scenarios(brokers: Brokers) -> None:
    brokers.start()
    with client_of(brokers, "FAN.Q", "EVENTS.Q", "LATE.Q") as app:
        ok(app.subscribe("Sport/#", "FAN.Q"))
        ok(app.subscribe("Sport/Soccer/Event/+", "EVENTS.Q"))

        ok(
            app.publish(
                "Sport/Soccer/Event/MatchStarted", "Team1 v Team2", folders=("<usr><Ref>7</Ref></usr>",)
            )
        )
        for queue in ("FAN.Q", "EVENTS.Q"):
            pub = app.receive(queue, wait=WAIT)
            assert (pub.topics, pub.text, pub.folders) == (
                ("Sport/Soccer/Event/MatchStarted",),
                "Team1 v Team2",
                ("<usr><Ref>7</Ref></usr>",),
            )

        ok(app.publish(SCORE, "1-0", options=PubOpt.RetainPub))
        ok(app.publish(SCORE, "2-1", options=PubOpt.RetainPub))
        ok(app.subscribe("Sport/Soccer/State/LatestScore/#", "LATE.Q", options=RegOpt.InformIfRet))
        late = app.receive("LATE.Q", wait=WAIT)
        assert (late.topics, late.text, late.retained) == ((SCORE,), "2-1", True)
        assert bodies(drain(brokers.qm, "LATE.Q")) == []
        assert bodies(drain(brokers.qm, "FAN.Q")) == ["1-0", "2-1"]


def test_partial_authority(brokers: Brokers) -> None:
    broker = brokers.start()
    with brokers.qm.engine.begin() as conn:  # what `broker acl add` does, while the broker runs
        store.add_acl_rule(
            conn, AclRule("bob", PrincipalKind.USER, "Sport/Tennis", Permission.PUBLISH, False)
        )
        store.add_acl_rule(conn, AclRule("bob", PrincipalKind.USER, "Sport/Golf", Permission.PUBLISH, False))
    with (
        client_of(brokers, "ALL.Q", "TENNIS.Q") as app,
        BrokerClient(brokers.qm, user_id="bob", timeout=WAIT) as bob,
    ):
        ok(app.subscribe("#", "ALL.Q"))
        ok(app.subscribe("Sport/Tennis/#", "TENNIS.Q"))

        response = bob.publish(["Sport/Soccer/A", "Sport/Tennis/B", "News/C", "Sport/Golf/D"], "mixed")

        assert response is not None
        assert response.describe() == (
            "warning\n"
            "  MQRCCF_NOT_AUTHORIZED (3081) on topic 'Sport/Tennis/B'\n"
            "  MQRCCF_NOT_AUTHORIZED (3081) on topic 'Sport/Golf/D'"
        )
        pub = app.receive("ALL.Q", wait=WAIT)
        assert (pub.topics, pub.text) == (("Sport/Soccer/A", "News/C"), "mixed")
        assert drain(brokers.qm, "TENNIS.Q") == []
    (refusal,) = broker.lines("command partly refused")
    assert (refusal["reason"], refusal["reason_name"], refusal["refused_topics"]) == (
        3081,
        "MQRCCF_NOT_AUTHORIZED",
        "Sport/Tennis/B,Sport/Golf/D",
    )


def test_other_subs_only_conference_and_correl_as_id_shared_queue(brokers: Brokers) -> None:
    brokers.start()
    rooms = ("CONF.A", "CONF.B", "CONF.C")
    with client_of(brokers, *rooms, "SHARED.Q") as app:
        for room in rooms:
            ok(app.subscribe("Conference/Room1", room))
        ok(app.publish("Conference/Room1", "A speaks", options=PubOpt.OtherSubsOnly, q_name="CONF.A"))
        assert [app.receive(room, wait=WAIT).text for room in rooms[1:]] == ["A speaks", "A speaks"]
        assert drain(brokers.qm, "CONF.A") == []

        ibm, every = b"IBM".ljust(24, b"\x00"), b"EVERY".ljust(24, b"\x00")
        ok(app.subscribe("Stocks/IBM", "SHARED.Q", options=RegOpt.CorrelAsId, correl_id=ibm))
        ok(app.subscribe("Stocks/#", "SHARED.Q", options=RegOpt.CorrelAsId, correl_id=every))
        ok(app.publish("Stocks/IBM", "120"))
        ok(app.publish("Stocks/HPQ", "30"))
        assert [app.receive("SHARED.Q", wait=WAIT, correl_id=every).text for _ in range(2)] == ["120", "30"]
        assert app.receive("SHARED.Q", wait=WAIT, correl_id=ibm).text == "120"
        assert brokers.qm.depth("SHARED.Q") == 0


def test_pub_on_req_only_request_update_and_delete_pub(brokers: Brokers) -> None:
    brokers.start()
    with client_of(brokers, "ONREQ.Q", "LATE.Q") as app:
        ok(app.publish("Weather/London", "rain", options=PubOpt.RetainPub))
        ok(app.publish("Weather/Paris", "sun", options=PubOpt.RetainPub))
        ok(app.subscribe("Weather/#", "ONREQ.Q", options=RegOpt.PubOnReqOnly))
        ok(app.publish("Weather/Rome", "heat"))
        assert drain(brokers.qm, "ONREQ.Q") == []

        ok(app.request_update("Weather/#", "ONREQ.Q"))
        assert sorted(bodies(drain(brokers.qm, "ONREQ.Q"))) == ["rain", "sun"]
        unknown = app.request_update("Weather/London", "ONREQ.Q")
        assert unknown.describe() == (
            "error\n  MQRCCF_NOT_REGISTERED (3073) on topic 'Weather/London': no such subscription"
        )

        ok(app.delete_publication("Weather/London"))
        assert retained_topics(brokers) == ["Weather/Paris"]
        ok(app.request_update("Weather/#", "ONREQ.Q"))
        assert bodies(drain(brokers.qm, "ONREQ.Q")) == ["sun"]
        ok(app.subscribe("Weather/#", "LATE.Q"))
        assert bodies(drain(brokers.qm, "LATE.Q")) == ["sun"]

        ok(app.delete_publication("Weather/#"))
        none = app.request_update("Weather/#", "ONREQ.Q")
        assert none.describe() == (
            "error\n  MQRCCF_NO_RETAINED_MSG (3077) on topic 'Weather/#': "
            "no retained publication on 'Weather/#'"
        )


def test_expiry(brokers: Brokers) -> None:
    brokers.start()
    with client_of(brokers, "BRIEF.Q", "LASTING.Q", "LATE.Q") as app:
        ok(app.subscribe("News/#", "BRIEF.Q", expiry=20))  # the RegSub's MQMD Expiry: 2 s
        ok(app.subscribe("News/#", "LASTING.Q"))
        ok(app.publish("News/Flash", "brief news", options=PubOpt.RetainPub, expiry=20))
        ok(app.publish("News/Sport", "lasting news", options=PubOpt.RetainPub))
        assert bodies(drain(brokers.qm, "BRIEF.Q")) == ["brief news", "lasting news"]
        time.sleep(2.2)

        ok(app.publish("News/Late", "after expiry"))
        ok(app.subscribe("News/#", "LATE.Q"))

        assert app.receive("LATE.Q", wait=WAIT).text == "lasting news"
        assert drain(brokers.qm, "LATE.Q") == []
        assert drain(brokers.qm, "BRIEF.Q") == []
        assert bodies(drain(brokers.qm, "LASTING.Q"))[-1] == "after expiry"
        with brokers.qm.reading() as conn:
            queues = [s.identity.queue for _, s in store.list_subscriptions(conn, store.SubscriptionFilter())]
        assert queues == ["LASTING.Q", "LATE.Q"]
        assert retained_topics(brokers) == ["News/Sport"]


def test_sigterm_then_restart_keeps_retained_publications(brokers: Brokers) -> None:
    broker = brokers.start()
    with client_of(brokers, "FAN.Q", "LATE.Q") as app:
        ok(app.subscribe("Sport/#", "FAN.Q"))
        ok(app.publish(SCORE, "2-1", options=PubOpt.RetainPub))
        assert broker.terminate() == 0
        assert broker.lines()[-1]["msg"] == "broker stopped"

        broker.start()
        ok(app.subscribe("Sport/Soccer/State/#", "LATE.Q"))
        assert app.receive("LATE.Q", wait=WAIT).text == "2-1"
        ok(app.publish(SCORE, "3-1", options=PubOpt.RetainPub))
        assert bodies(drain(brokers.qm, "FAN.Q")) == ["2-1", "3-1"]  # its subscription survived too
    assert retained_topics(brokers) == [SCORE]


def test_sigterm_during_a_steady_stream_leaves_nothing_half_done(brokers: Brokers) -> None:
    broker = brokers.start(batch_size=5)
    with client_of(brokers, "ALL.Q", "EVEN.Q") as app:
        ok(app.subscribe("Stream/#", "ALL.Q"))
        ok(app.subscribe("Stream/Even", "EVEN.Q"))
    topic = lambda n: "Stream/Even" if n % 2 == 0 else "Stream/Odd"  # noqa: E731
    publisher = Publisher(brokers.url, 100_000, topic, interval=0.002)
    publisher.start()
    try:
        wait_until(lambda: brokers.qm.depth("ALL.Q") >= 50, WAIT, "a steady stream of deliveries")
        assert broker.terminate() == 0
    finally:
        publisher.halt()
        publisher.finish()

    # Everything routed is wholly delivered, in order; everything else is still on the stream.
    put = publisher.put
    assert publisher.uncertain == []
    delivered = [int(p.text) for p in drain(brokers.qm, "ALL.Q")]
    routed = len(delivered)
    assert 50 <= routed < len(put)
    assert delivered == put[:routed]
    assert [int(p.text) for p in drain(brokers.qm, "EVEN.Q")] == [n for n in put[:routed] if n % 2 == 0]
    waiting = brokers.qm.browse(DEFAULT_STREAM, limit=100_000)
    assert [int(decode_publication(b.message).text) for b in waiting] == put[routed:]

    broker.start()
    wait_until(lambda: brokers.qm.depth(DEFAULT_STREAM) == 0, WAIT, "the rest of the stream")
    assert [int(p.text) for p in drain(brokers.qm, "ALL.Q")] == put[routed:]
    assert broker.terminate() == 0
