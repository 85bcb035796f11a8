"""Properties of routing over random ACLs, subscriptions and multi-topic publications: refused
topics never travel, subscribers only get what they may subscribe to, one copy per identity,
deliveries equal a brute-force recomputation with ``topics.matches``, every delivery body survives
an RFH2 round trip, and routing is deterministic."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import example, given, settings
from hypothesis import strategies as st

from broker.core.authority import AclRule, Authority, Permission, PrincipalKind
from broker.core.topics import matches
from broker.protocol import psc, pscr, rfh2
from tests.broker.core.builders import Broker, correl, deliveries, psc_text, reply

PUBLISHER = "pub"
QUEUES = ("Q0", "Q1", "Q2")
OWNERS = {"Q0": "u0", "Q1": "u1", "Q2": "u2"}  # an identity belongs to one user
CORRELS = (None, correl("C1"), correl("C2"))
LEVELS = ("Sport", "Soccer", "Tennis")

concrete = st.lists(st.sampled_from(LEVELS), min_size=1, max_size=3).map("/".join)
pattern = st.lists(st.sampled_from((*LEVELS, "+", "#")), min_size=1, max_size=3).map("/".join)
subtree = st.one_of(st.lists(st.sampled_from(LEVELS), min_size=1, max_size=2).map("/".join), st.just("#"))
rules = st.lists(
    st.builds(
        AclRule,
        principal=st.sampled_from((PUBLISHER, *OWNERS.values())),
        kind=st.just(PrincipalKind.USER),
        pattern=subtree,
        permission=st.sampled_from(list(Permission)),
        allow=st.booleans(),
    ),
    max_size=6,
)


@dataclass(frozen=True)
class Registration:
    queue: str
    correl_id: bytes | None
    topics: tuple[str, ...]


registrations = st.lists(
    st.builds(
        Registration,
        queue=st.sampled_from(QUEUES),
        correl_id=st.sampled_from(CORRELS),
        topics=st.lists(pattern, min_size=1, max_size=3, unique=True).map(tuple),
    ),
    min_size=1,
    max_size=8,
)
publications = st.lists(concrete, min_size=1, max_size=4, unique=True).map(tuple)


def setup(acl: list[AclRule], default_allow: bool, subscriptions: list[Registration]) -> Broker:
    b = Broker(queues=["PUB.REPLY", *QUEUES], authority=Authority(acl, default_allow=default_allow))
    for registration in subscriptions:
        opts = ["CorrelAsId"] if registration.correl_id is not None else []
        b.send(
            psc_text("RegSub", *registration.topics, opts=opts, QName=registration.queue),
            user_id=OWNERS[registration.queue],
            correl_id=registration.correl_id or b"\x00" * 24,
        )
    return b


def expected_deliveries(
    b: Broker, published: tuple[str, ...]
) -> dict[tuple[str, bytes | None], tuple[str, ...]]:
    """Per identity, the published topics it receives, recomputed from the registered subscriptions."""
    authority = b.state.authority
    expected: dict[tuple[str, bytes | None], list[str]] = {}
    for topic in published:
        for sub in b.state.subscriptions():
            if (
                matches(sub.key.topic, topic)
                and authority.decide(sub.user_id, Permission.SUBSCRIBE, topic).allowed
            ):
                topics = expected.setdefault((sub.identity.queue, sub.identity.correl_id), [])
                if topic not in topics:
                    topics.append(topic)
    return {identity: tuple(topics) for identity, topics in expected.items()}


@settings(max_examples=120, deadline=None)
@given(rules, st.booleans(), registrations, publications)
@example(  # a wildcard subscriber denied one subtree below it, a publisher denied another
    acl=[
        AclRule("u0", PrincipalKind.USER, "Sport/Tennis", Permission.SUBSCRIBE, allow=False),
        AclRule(PUBLISHER, PrincipalKind.USER, "Sport/Soccer/Tennis", Permission.PUBLISH, allow=False),
    ],
    default_allow=True,
    subscriptions=[
        Registration("Q0", None, ("Sport/#",)),
        Registration("Q0", CORRELS[1], ("Sport/+", "#")),
        Registration("Q1", CORRELS[1], ("#", "Sport/Tennis")),
    ],
    published=("Sport/Tennis", "Sport/Soccer/Tennis", "Sport/Soccer", "Sport"),
)
def test_routing_properties(
    acl: list[AclRule], default_allow: bool, subscriptions: list[Registration], published: tuple[str, ...]
) -> None:
    b = setup(acl, default_allow, subscriptions)
    authority = b.state.authority
    # Registration only ever keeps topics the subscriber may subscribe to.
    for sub in b.state.subscriptions():
        assert authority.decide(sub.user_id, Permission.SUBSCRIBE, sub.key.topic).allowed
        assert sub.user_id == OWNERS[sub.identity.queue]

    folder = psc_text("Publish", *published)
    outcome = b.send(folder, user_id=PUBLISHER, reply_to_q="PUB.REPLY", apply=False)
    again = b.send(folder, user_id=PUBLISHER, reply_to_q="PUB.REPLY", msg_id=b.last_msg_id, apply=False)
    # (6) deterministic: the same message in the same state routes the same way.
    assert again == outcome

    allowed = [t for t in published if authority.decide(PUBLISHER, Permission.PUBLISH, t).allowed]
    refused = [t for t in published if t not in allowed]
    answer = reply(outcome)
    assert answer is not None
    response = answer.response
    # (1) refused topics are answered, one Response each (or the first one as the error).
    if not allowed:
        why = f"{PUBLISHER!r} may not publish on {refused[0]!r}"
        assert response == pscr.error(pscr.ResponseItem(3081, refused[0], None, why), folder)
    elif refused:
        assert response == pscr.warning([pscr.ResponseItem(3081, t) for t in refused], folder)
    else:
        assert response == pscr.ok()

    received: dict[tuple[str, bytes | None], tuple[str, ...]] = {}
    for sent in deliveries(outcome):
        identity = (sent.queue, sent.md["correl_id"] if sent.md["correl_id"] in CORRELS else None)
        # (3) at most one copy per identity.
        assert identity not in received
        command = sent.psc
        assert isinstance(command, psc.Publish)
        received[identity] = command.topics
        # (1) a refused topic is never delivered; (2) nor one the subscriber may not subscribe to.
        user = OWNERS[sent.queue]
        assert sent.md["user_id"] == user
        for topic in command.topics:
            assert topic in allowed
            assert authority.decide(user, Permission.SUBSCRIBE, topic).allowed
        # (5) every delivery body survives an RFH2 round trip.
        body = rfh2.decode(sent.message.body, sent.message.encoding, sent.message.format)
        assert (
            rfh2.decode(rfh2.encode(body, sent.message.encoding), sent.message.encoding, sent.message.format)
            == body
        )
    # (4) exactly what a brute-force match over the subscriptions gives.
    assert received == expected_deliveries(b, tuple(allowed))
