"""Publish and DeletePub (reference 2.6, 2.10, 4.4, 5).

Publish: only the topics the publisher may publish on go anywhere (the others
are listed in a warning, 3081 each; none at all is an error); each subscriber
identity gets one copy however many of its subscriptions match, provided its
user may subscribe to that topic; RetainPub keeps the publication per
(subscription point, topic); OtherSubsOnly skips the publisher's own identity;
a Local publication is never forwarded; a publication from a neighbour goes on
to the other neighbours holding a matching proxy, never back where it has been,
and never to Local subscriptions (they see only publications made here). A
retained publication a neighbour sends when our proxy first registers
(IsRetainedPub) is delivered as a retained one: flagged for InformIfRet
subscribers, and not to NewPubsOnly or PubOnReqOnly subscribers.

DeletePub removes retained publications: literal topics as given, wildcard
topics by matching the retained index; the publisher needs publish authority on
each topic deleted. Without DelOpt Local it is passed on to every neighbour.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from broker.core import neighbours
from broker.core.authority import Permission
from broker.core.effects import (
    DELIVERY,
    FORWARD,
    DeleteRetained,
    Deliver,
    Outcome,
    Put,
    RemoveSubscription,
    SetRetained,
)
from broker.core.outgoing import Publication
from broker.core.retained import RetainedPublication
from broker.core.routing import Refused, Request, finish
from broker.core.state import Recipient
from broker.core.subscription import Identity, Subscription
from broker.core.topics import is_wildcard
from broker.protocol.brokerpath import BrokerPath
from broker.protocol.options import DelOpt, PubOpt, RegOpt
from broker.protocol.psc import DeletePub, Publish
from queues.message import MQCI_NONE, Message
from queues.reasons import Reason

_PUB_ON_REQ_ONLY = int(RegOpt.PubOnReqOnly)
_NO_RETAINED = int(RegOpt.PubOnReqOnly | RegOpt.NewPubsOnly)
# The publication options that decide who receives it.
_DECIDING = int(PubOpt.Local | PubOpt.OtherSubsOnly | PubOpt.IsRetainedPub)


def publisher_identity(command: Publish, message: Message, qmgr: str) -> Identity:
    """The publisher's traditional identity, as OtherSubsOnly compares it: QName and
    QMgrName from the command or else the descriptor's ReplyTo fields, plus the
    CorrelId with CorrelAsId."""
    correl_id = (command.correl_id or message.correl_id) if command.options & PubOpt.CorrelAsId else None
    q_mgr = command.q_mgr_name or message.reply_to_qmgr.strip() or qmgr
    return Identity(q_mgr, command.q_name or message.reply_to_q.strip(), correl_id)


def delivery_order(sub: Subscription) -> tuple[int, str, str, bytes]:
    """Deliveries of one publication are put in registration order, so replays
    (and the Spark job) write subscriber queues in the same order."""
    identity = sub.identity
    return (sub.seq, identity.q_mgr, identity.queue, identity.correl_id or b"")


def publish(request: Request) -> Outcome:
    command = request.command
    assert isinstance(command, Publish)
    state = request.state
    if command.options & PubOpt.IsRetainedPub and not request.from_network:
        raise Refused(
            Reason.MQRCCF_PUB_OPTIONS_ERROR, "IsRetainedPub can only be set by a broker", parameter="PubOpt"
        )
    publisher = publisher_identity(command, request.message, state.qmgr)
    if publisher.correl_id == MQCI_NONE:
        raise Refused(Reason.MQRCCF_CORREL_ID_ERROR, "CorrelAsId with a zero CorrelId", parameter="PubOpt")
    sub_point = command.sub_point if command.sub_point is not None else request.source.sub_point
    topics = _authorised(request, tuple(dict.fromkeys(command.topics)))
    if request.from_network and command.options & PubOpt.IsRetainedPub:
        # A neighbour answering a proxy registration with a retained publication we already hold.
        topics = tuple(t for t in topics if not _already_held(request, sub_point, t))
        if not topics:
            return finish(request, detail="retained publication already held")
    assert request.headers is not None
    publication = Publication(
        request.message, request.headers, command, sub_point, state.qmgr, request.now, request.path
    )
    if command.options & PubOpt.RetainPub:
        request.effects.extend(
            SetRetained(
                RetainedPublication(
                    sub_point,
                    topic,
                    request.message,
                    command,
                    request.headers,
                    request.now,
                    request.sequence,
                    request.path,
                )
            )
            for topic in topics
        )
    _deliver(request, publication, publisher, topics)
    return finish(request)


def _authorised(request: Request, topics: tuple[str, ...]) -> tuple[str, ...]:
    if request.from_network:
        return topics  # authority was checked where it was published
    result = request.state.authority.check(request.principal, Permission.PUBLISH, topics)
    if not result.allowed:
        raise Refused(
            Reason.MQRCCF_NOT_AUTHORIZED,
            f"{request.principal!r} may not publish on {result.refused[0]!r}",
            topic=result.refused[0],
        )
    request.refuse_topics(result.refused)
    return result.allowed


def _already_held(request: Request, sub_point: str, topic: str) -> bool:
    held = request.state.retained(sub_point, topic)
    return held is not None and request.path is not None and held.origin_msg_id == request.path.origin_msg_id


def _deliver(
    request: Request, publication: Publication, publisher: Identity, topics: tuple[str, ...]
) -> None:
    command = publication.command
    state = request.state
    retained_copy = bool(command.options & PubOpt.IsRetainedPub)
    expiry = request.message.expiry
    recipients, expired = _recipients(request, publication.sub_point, publisher, topics)
    for recipient in recipients:
        sub = recipient.subscription
        identity = sub.identity
        matched = recipient.topics
        if sub.is_proxy:
            message = publication.to_neighbour(
                identity.q_mgr,
                matched,
                publisher,
                retained=retained_copy,
                expiry=expiry,
                user_id=state.config.user_id,
            )
            request.effects.append(Put(identity.queue, message, identity.q_mgr, FORWARD, matched[0]))
        else:
            to = publication.to_subscriber
            build = partial(to, sub, identity, matched, retained=retained_copy, expiry=expiry)
            q_mgr = "" if identity.q_mgr == state.qmgr else identity.q_mgr
            if not q_mgr and identity.queue in state.direct:
                request.effects.append(Deliver(identity.queue, build, matched[0]))
            else:
                request.effects.append(Put(identity.queue, build(), q_mgr, DELIVERY, matched[0]))
    if expired:
        _remove_expired(request, expired)


def _recipients(
    request: Request, sub_point: str, publisher: Identity, topics: tuple[str, ...]
) -> tuple[list[Recipient], list[Subscription]]:
    """Who receives the publication, and the expired subscriptions met on the way. What
    decides the recipients (the topics, the options and path, the publisher's identity where
    OtherSubsOnly compares it) is the key under which the state remembers them until a
    subscription or the authority changes, when no subscription met can expire."""
    options = request.command.options if request.command is not None else PubOpt(0)
    path = request.path
    key = (
        sub_point,
        topics,
        int(options) & _DECIDING,
        request.from_network,
        publisher if options & PubOpt.OtherSubsOnly else None,
        path.hops if path is not None else (),
    )
    state = request.state
    remembered = state.remembered(key)
    if remembered is not None:
        return remembered, []
    recipients, expired, timed = _decide(request, sub_point, publisher, topics)
    if not timed:
        state.remember(key, recipients)
    return recipients, expired


def _decide(
    request: Request, sub_point: str, publisher: Identity, topics: tuple[str, ...]
) -> tuple[list[Recipient], list[Subscription], bool]:
    """Match, authorise and keep one subscription per identity (the first registered), in
    registration order (so replays, and the Spark job, write subscriber queues in the same
    order); the expired subscriptions met; whether any subscription met has an expiry."""
    assert request.command is not None
    options = request.command.options
    state = request.state
    now = request.now
    local_publication = bool(options & PubOpt.Local)
    other_subscribers_only = bool(options & PubOpt.OtherSubsOnly)
    passed = frozenset(request.path.hops) if request.path is not None else frozenset()
    may_subscribe = _subscriber_check(request)
    not_wanted = _NO_RETAINED if options & PubOpt.IsRetainedPub else _PUB_ON_REQ_ONLY
    chosen: dict[Identity, tuple[Subscription, list[str]]] = {}
    expired: dict[object, Subscription] = {}
    timed = False
    for topic in topics:
        for sub in state.match(sub_point, topic):
            if sub.expires_at is not None:
                timed = True
                if sub.expires_at <= now:
                    expired[sub.key] = sub
                    continue
            if sub.options & not_wanted:
                continue
            if sub.is_proxy:
                if local_publication or sub.origin in passed:
                    continue
            elif (
                (request.from_network and sub.is_local)
                or (other_subscribers_only and sub.identity == publisher)
                or not may_subscribe(sub.user_id, topic)
            ):
                continue
            entry = chosen.get(sub.identity)
            if entry is None:
                chosen[sub.identity] = (sub, [topic])
            else:
                first, matched = entry
                if matched[-1] != topic:
                    matched.append(topic)
                if sub.seq < first.seq:
                    chosen[sub.identity] = (sub, matched)
    ordered = sorted(chosen.values(), key=lambda entry: delivery_order(entry[0]))
    return [Recipient(sub, tuple(matched)) for sub, matched in ordered], list(expired.values()), timed


def _subscriber_check(request: Request) -> Callable[[str, str], bool]:
    """May (user, topic) receive this publication? Asked once per pair per publication."""
    authority = request.state.authority
    answers: dict[tuple[str, str], bool] = {}

    def may_subscribe(user: str, topic: str) -> bool:
        answer = answers.get((user, topic))
        if answer is None:
            answer = answers[(user, topic)] = authority.decide(user, Permission.SUBSCRIBE, topic).allowed
        return answer

    return may_subscribe


def _remove_expired(request: Request, subscriptions: list[Subscription]) -> None:
    """Expired subscriptions met while routing are removed (MQMD Expiry of their RegSub)."""
    request.effects.extend(RemoveSubscription(sub.key) for sub in subscriptions)
    request.effects.extend(
        neighbours.proxy_changes(
            request.state, (), subscriptions, cause=request.message.msg_id, now=request.now
        )
    )


def delete_publication(request: Request) -> Outcome:
    command = request.command
    assert isinstance(command, DeletePub)
    state = request.state
    sub_point = command.sub_point if command.sub_point is not None else request.source.sub_point
    deleted: dict[str, None] = {}
    forwarded: dict[str, None] = {}
    refused: list[str] = []
    for pattern in dict.fromkeys(command.topics):
        if is_wildcard(pattern):
            for held in state.retained_matching(sub_point, pattern):
                if _may_delete(request, held.topic):
                    deleted[held.topic] = None
                else:
                    refused.append(held.topic)
            # Other brokers may hold topics this one never saw: the pattern itself goes on
            # when the publisher has authority where it applies, else what was deleted here.
            if (
                request.from_network
                or request.state.authority.decide_pattern(
                    request.principal, Permission.PUBLISH, pattern
                ).allowed
            ):
                forwarded[pattern] = None
            else:
                forwarded.update(deleted)
        elif _may_delete(request, pattern):
            forwarded[pattern] = None
            if state.retained(sub_point, pattern) is not None:
                deleted[pattern] = None
        else:
            refused.append(pattern)
    if refused and not deleted and not forwarded:
        raise Refused(
            Reason.MQRCCF_NOT_AUTHORIZED,
            f"{request.principal!r} may not delete publications on {refused[0]!r}",
            topic=refused[0],
        )
    request.refuse_topics(refused)
    request.effects.extend(DeleteRetained(sub_point, topic) for topic in deleted)
    if forwarded and not command.options & DelOpt.Local:
        _forward_delete(request, tuple(forwarded), sub_point)
    return finish(request)


def _may_delete(request: Request, topic: str) -> bool:
    return request.from_network or request.may(request.principal, Permission.PUBLISH, topic)


def _forward_delete(request: Request, topics: tuple[str, ...], sub_point: str) -> None:
    state = request.state
    path = request.path
    next_path = (
        path.through(state.qmgr) if path is not None else BrokerPath(request.message.msg_id, (state.qmgr,))
    )
    for neighbour in sorted(state.neighbours):
        if neighbour not in next_path.hops:
            request.effects.append(
                neighbours.forwarded_delete(state, neighbour, topics, sub_point, next_path, request.now)
            )
