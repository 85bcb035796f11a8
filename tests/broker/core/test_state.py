"""broker.core.state (with the records it holds, broker.core.subscription and retained): apply keeps
the subscription trees, names, identity index, global-origin counts and retained index consistent
with a brute-force recomputation, whatever the order of changes."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.core.effects import AddSubscription, DeleteRetained, Put, RemoveSubscription, SetRetained
from broker.core.retained import RetainedPublication
from broker.core.state import BrokerConfig, BrokerState, Neighbour
from broker.core.subscription import STORED_OPTIONS, Identity, Subscription, SubscriptionKey
from broker.core.topics import matches
from broker.protocol import psc, rfh2
from broker.protocol.options import RegOpt
from queues.message import MQEI_UNLIMITED
from tests.broker.core.builders import NOW, QMGR, message, psc_text

IDENTITIES = (
    Identity(QMGR, "A.Q"),
    Identity(QMGR, "B.Q", b"C".ljust(24, b"\x00")),
    Identity("QM2", "SYSTEM.BROKER.INTER.BROKER.COMMUNICATIONS"),
)
SUB_POINTS = ("", "Pounds")
PATTERNS = ("a", "a/b", "a/+", "a/#", "#", "+/b", "a//b", "b", "+")
TOPICS = ("a", "a/b", "b", "a/b/c", "a//b", "x/b", "a/")
ORIGINS = (None, "QM2", "QM3")


def state(*neighbours: str) -> BrokerState:
    return BrokerState(BrokerConfig(QMGR), neighbours=[Neighbour(n) for n in neighbours])


def sub(
    topic: str = "a/#",
    *,
    identity: Identity = IDENTITIES[0],
    sub_point: str = "",
    options: int = 0,
    seq: int = 1,
    origin: str | None = None,
    sub_name: str | None = None,
) -> Subscription:
    return Subscription(
        SubscriptionKey(identity, sub_point, topic),
        "alice",
        options,
        created_at=NOW,
        seq=seq,
        origin=origin,
        sub_name=sub_name,
    )


# --- the brute-force model -----------------------------------------------------------------------------


def check_consistent(s: BrokerState, model: dict[SubscriptionKey, Subscription], names: set[str]) -> None:
    """Every question the engine asks gives the answer recomputed from the subscriptions alone."""
    assert len(s) == len(model)
    assert sorted(map(repr, s.subscriptions())) == sorted(map(repr, model.values()))
    for key, value in model.items():
        assert s.subscription(key) == value
    named = {v.sub_name: v for v in model.values() if v.sub_name is not None}
    for name in names | {"never used"}:
        assert s.named(name) == named.get(name)
    for identity in IDENTITIES:
        assert s.of_identity(identity) == sorted(
            (v for v in model.values() if v.identity == identity), key=lambda v: v.seq
        )
    for point in SUB_POINTS:
        for topic in TOPICS:
            expected = Counter(
                repr(v) for v in model.values() if v.key.sub_point == point and matches(v.key.topic, topic)
            )
            assert Counter(map(repr, s.match(point, topic))) == expected
        for pattern in PATTERNS:
            origins = Counter(
                v.origin
                for v in model.values()
                if (v.key.sub_point, v.key.topic) == (point, pattern) and not v.is_local
            )
            assert dict(s.global_origins(point, pattern)) == dict(origins)
    for neighbour in ("QM2", "QM3", "QM9"):
        assert s.proxied_to(neighbour) == sorted(
            {
                (v.key.sub_point, v.key.topic)
                for v in model.values()
                if not v.is_local and v.origin != neighbour
            }
        )


@dataclass(frozen=True)
class Change:
    """Add (or replace) the subscription of ``identity`` on (sub_point, pattern), or remove it."""

    add: bool
    identity: Identity
    sub_point: str
    pattern: str
    origin: str | None
    local: bool
    named: bool

    @property
    def key(self) -> SubscriptionKey:
        return SubscriptionKey(self.identity, self.sub_point, self.pattern)

    @property
    def name(self) -> str:
        """One name per key, so names stay unique as the engine keeps them."""
        return f"{self.identity.queue}|{self.sub_point}|{self.pattern}"


changes = st.lists(
    st.builds(
        Change,
        add=st.booleans(),
        identity=st.sampled_from(IDENTITIES),
        sub_point=st.sampled_from(SUB_POINTS),
        pattern=st.sampled_from(PATTERNS),
        origin=st.sampled_from(ORIGINS),
        local=st.booleans(),
        named=st.booleans(),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(changes)
def test_apply_keeps_every_index_consistent_with_a_brute_force_recomputation(steps: list[Change]) -> None:
    s = state("QM2", "QM3")
    model: dict[SubscriptionKey, Subscription] = {}
    names: set[str] = set()
    for number, step in enumerate(steps, start=1):
        if step.add:
            existing = model.get(step.key)
            value = sub(
                step.pattern,
                identity=step.identity,
                sub_point=step.sub_point,
                options=int(RegOpt.Local) if step.local else 0,
                seq=existing.seq if existing is not None else number,
                origin=step.origin,
                sub_name=step.name if step.named else None,
            )
            names.add(step.name)
            s.apply(AddSubscription(value))
            model[step.key] = value
        else:
            s.apply(RemoveSubscription(step.key))
            model.pop(step.key, None)
        check_consistent(s, model, names)
    for key in list(model):
        s.apply(RemoveSubscription(key))
    check_consistent(s, {}, names)
    # Nothing is left behind in the indexes once every subscription is gone.
    assert (s._trees, s._names, s._by_identity, s._global) == ({}, {}, {}, {})


# --- subscriptions ----------------------------------------------------------------------------------------


def test_adding_under_an_existing_key_replaces_the_subscription() -> None:
    s = state()
    s.apply(AddSubscription(sub(sub_name="old")))
    s.apply(AddSubscription(sub(options=int(RegOpt.Pers))))
    (only,) = s.subscriptions()
    assert only.options == int(RegOpt.Pers)
    assert s.named("old") is None
    assert s.match("", "a/b") == [only]


def test_removing_an_unknown_key_changes_nothing() -> None:
    s = state()
    s.apply(AddSubscription(sub()))
    s.apply(RemoveSubscription(SubscriptionKey(IDENTITIES[1], "", "a/#")))
    assert len(s) == 1


def test_of_identity_lists_in_registration_order() -> None:
    s = state()
    s.apply(AddSubscription(sub("b", seq=7)))
    s.apply(AddSubscription(sub("a", seq=3)))
    s.apply(AddSubscription(sub("c", seq=5, identity=IDENTITIES[1])))
    assert [v.key.topic for v in s.of_identity(IDENTITIES[0])] == ["a", "b"]


def test_next_seq_follows_the_highest_registration_and_never_goes_back() -> None:
    s = state()
    assert s.next_seq() == 1
    s.apply(AddSubscription(sub("a", seq=4)))
    s.apply(AddSubscription(sub("b", seq=2)))
    assert s.next_seq() == 5
    s.apply(RemoveSubscription(SubscriptionKey(IDENTITIES[0], "", "a")))
    assert s.next_seq() == 5


def test_global_origins_count_local_subscriptions_out() -> None:
    s = state("QM2")
    s.apply(AddSubscription(sub("a", identity=IDENTITIES[0])))
    s.apply(AddSubscription(sub("a", identity=IDENTITIES[1], options=int(RegOpt.Local))))
    s.apply(AddSubscription(sub("a", identity=IDENTITIES[2], origin="QM2")))
    assert dict(s.global_origins("", "a")) == {None: 1, "QM2": 1}
    assert s.proxied_to("QM2") == [("", "a")]
    s.apply(RemoveSubscription(SubscriptionKey(IDENTITIES[0], "", "a")))
    assert s.proxied_to("QM2") == []
    assert s.proxied_to("QM3") == [("", "a")]


def test_effects_that_change_no_state_are_ignored() -> None:
    s = state()
    s.apply(Put("Q", message(psc_text("Publish", "a"))))
    assert len(s) == 0 and list(s.all_retained()) == []


def test_the_broker_config_defaults_are_ibms_queue_names() -> None:
    config = BrokerConfig(QMGR)
    assert (config.control_queue, config.inter_broker_queue, dict(config.streams), config.user_id) == (
        "SYSTEM.BROKER.CONTROL.QUEUE",
        "SYSTEM.BROKER.INTER.BROKER.COMMUNICATIONS",
        {"SYSTEM.BROKER.DEFAULT.STREAM": ""},
        "mqm",
    )
    s = BrokerState(config)
    assert (s.qmgr, s.neighbours, s.queues.get("X")) == (QMGR, {}, None)


# --- Subscription records ----------------------------------------------------------------------------------


def test_a_subscription_expires_at_its_expiry_time() -> None:
    record = replace(sub(), expires_at=NOW + 100)
    assert not record.expired(NOW + 99)
    assert record.expired(NOW + 100)
    assert not sub().expired(NOW * 2)


def test_proxy_and_local_flags() -> None:
    assert (sub().is_proxy, sub().is_local) == (False, False)
    assert sub(origin="QM2").is_proxy
    assert sub(options=int(RegOpt.Local | RegOpt.Pers)).is_local


def test_only_lasting_options_are_stored() -> None:
    command_only = RegOpt.FullResp | RegOpt.AddName | RegOpt.NoAlter | RegOpt.JoinShared | RegOpt.JoinExcl
    command_only |= RegOpt.LeaveOnly | RegOpt.DeregAll | RegOpt.Locked
    assert STORED_OPTIONS & int(command_only) == 0
    assert STORED_OPTIONS | int(command_only) == int(sum(RegOpt))


# --- retained publications ---------------------------------------------------------------------------


def retained(
    topic: str, *, sub_point: str = "", expiry: int = MQEI_UNLIMITED, at: int = NOW, seq: int = 0
) -> RetainedPublication:
    m = message(psc_text("Publish", topic, opts=["RetainPub"]), expiry=expiry)
    command = psc.parse(psc_text("Publish", topic, opts=["RetainPub"]))
    assert isinstance(command, psc.Publish)
    return RetainedPublication(
        sub_point, topic, m, command, rfh2.decode(m.body, m.encoding, m.format), at, seq
    )


def test_set_and_delete_retained_per_subscription_point() -> None:
    s = state()
    first, second, other = retained("a/b"), retained("a/b", seq=2), retained("a/b", sub_point="Pounds")
    s.apply(SetRetained(first))
    s.apply(SetRetained(other))
    s.apply(SetRetained(second))
    assert s.retained("", "a/b") == second
    assert s.retained("Pounds", "a/b") == other
    assert sorted(p.seq for p in s.all_retained()) == [0, 2]
    s.apply(DeleteRetained("", "a/b"))
    s.apply(DeleteRetained("", "never/held"))
    s.apply(DeleteRetained("Nowhere", "a/b"))
    assert s.retained("", "a/b") is None
    assert list(s.all_retained()) == [other]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.sampled_from(SUB_POINTS), st.sampled_from(TOPICS)), max_size=30))
def test_the_retained_index_agrees_with_a_dict(ops: list[tuple[bool, str, str]]) -> None:
    s = state()
    model: dict[tuple[str, str], RetainedPublication] = {}
    for number, (keep, point, topic) in enumerate(ops):
        if keep:
            publication = retained(topic, sub_point=point, seq=number)
            s.apply(SetRetained(publication))
            model[(point, topic)] = publication
        else:
            s.apply(DeleteRetained(point, topic))
            model.pop((point, topic), None)
    assert sorted(map(repr, s.all_retained())) == sorted(map(repr, model.values()))
    for point in SUB_POINTS:
        for pattern in PATTERNS:
            expected = sorted(repr(p) for (sp, t), p in model.items() if sp == point and matches(pattern, t))
            assert sorted(map(repr, s.retained_matching(point, pattern))) == expected


def test_retained_expiry_and_remaining_expiry() -> None:
    forever = retained("a")
    assert (forever.expires_at, forever.expired(NOW * 2), forever.remaining_expiry(NOW * 2)) == (
        None,
        False,
        MQEI_UNLIMITED,
    )
    minute = retained("a", expiry=600)
    assert minute.expires_at == NOW + 60_000
    assert minute.remaining_expiry(NOW) == 600
    assert minute.remaining_expiry(NOW + 20_000) == 400
    assert minute.remaining_expiry(NOW + 59_999) == 1  # never 0 while still live
    assert (minute.expired(NOW + 59_999), minute.expired(NOW + 60_000)) == (False, True)
    assert minute.origin_msg_id == minute.message.msg_id
