"""The broadcast snapshot: what the driver captures is what every task routes against."""

from __future__ import annotations

import pickle

from broker import store
from broker.core.authority import Permission
from broker.core.effects import AddSubscription, Effect, RemoveSubscription
from broker.core.subscription import Identity as SubscriberIdentity
from broker.core.subscription import Subscription, SubscriptionKey
from broker.core.system import DEFAULT_STREAM
from broker.service.config import broker_config
from broker.spark.snapshot import PutContext, Snapshot, capture, queue_directory
from queues.ids import now_ms
from tests.broker.spark.scenario import Broker

TOPICS = ("Sport/Soccer/Team1/Score", "Sport/Tennis/Player1/Score", "News/World/1", "Secret/Plans")


def capture_at(broker: Broker, now: int) -> tuple[Snapshot, list[Effect]]:
    state_store = store.StateStore(broker_config("QM1", broker.settings))
    with broker.engine.begin() as conn:
        return capture(
            conn,
            state_store,
            job="job-1",
            stream=DEFAULT_STREAM,
            now=now,
            context=PutContext("QM1", "u", "a"),
        )


def take(broker: Broker, now: int) -> Snapshot:
    return capture_at(broker, now)[0]


def test_a_snapshot_survives_the_broadcast_and_routes_like_the_store(brokers):
    broker = brokers()
    now = now_ms()

    snapshot = take(broker, now)

    assert pickle.loads(pickle.dumps(snapshot)) == snapshot
    assert (snapshot.job, snapshot.stream, snapshot.now) == ("job-1", DEFAULT_STREAM, now)
    assert len(snapshot.subscriptions) == 8  # the scenario's seven and the neighbour's proxy
    assert snapshot.neighbours == ("QM2",)
    assert [s.seq for s in snapshot.subscriptions] == sorted(s.seq for s in snapshot.subscriptions)
    assert set(snapshot.definitions) >= {"SUB.A", "SUB.SMALL", "SYSTEM.DEAD.LETTER.QUEUE", DEFAULT_STREAM}
    assert snapshot.definitions["SUB.SMALL"].max_depth == 5
    rebuilt = pickle.loads(pickle.dumps(snapshot)).state()
    with broker.engine.begin() as conn:
        loaded = store.StateStore(broker_config("QM1", broker.settings)).load(conn)
    for topic in TOPICS:
        assert rebuilt.match("", topic) == loaded.match("", topic)
        for user in ("alice", "bob", "carol"):
            for permission in Permission:
                assert rebuilt.authority.decide(user, permission, topic) == loaded.authority.decide(
                    user, permission, topic
                )
    assert rebuilt.authority.decide("bob", Permission.PUBLISH, "Secret/Plans").allowed is False
    assert rebuilt.queues.get("SUB.A") is not None and rebuilt.queues.get("NOPE") is None


def test_what_housekeeping_removes_is_left_out(brokers):
    broker = brokers()
    now = now_ms()
    expiring = Subscription(
        SubscriptionKey(SubscriberIdentity("QM1", "SUB.A"), "", "Expiring/#"),
        "alice",
        0,
        now,
        99,
        expires_at=now,
    )
    temporary = Subscription(
        SubscriptionKey(SubscriberIdentity("QM1", "AMQ.GONE"), "", "Temp/#"),
        "alice",
        0,
        now,
        100,
        temporary=True,
    )
    with broker.engine.begin() as conn:
        store.StateStore(broker_config("QM1", broker.settings)).write(
            conn, [AddSubscription(expiring), AddSubscription(temporary)]
        )

    snapshot, housekeeping = capture_at(broker, now)
    topics = {s.key.topic for s in snapshot.subscriptions}
    earlier = {s.key.topic for s in take(broker, now - 1).subscriptions}

    assert "Expiring/#" not in topics and "Temp/#" not in topics
    # The driver writes what housekeeping did, so that the store agrees with the snapshot.
    removed = {e.key.topic for e in housekeeping if isinstance(e, RemoveSubscription)}
    assert removed == {"Expiring/#", "Temp/#"}
    assert "Expiring/#" in earlier  # not yet expired then; the temporary queue is gone either way
    assert "Temp/#" not in earlier


def test_the_queue_directory_marks_temporary_queues(brokers):
    broker = brokers()
    broker.qm.define_queue("AMQ.TEMP", definition_type="tempdyn")
    directory = queue_directory(take(broker, now_ms()).definitions)
    assert directory["AMQ.TEMP"].temporary is True
    assert directory["SUB.A"].temporary is False
