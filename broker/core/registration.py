"""RegSub, DeregSub and ReqUpdate (reference 2.5, 2.7-2.9, 4.4, 5).

Decisions where IBM's documentation is silent or unconfirmed ([U]/[I] in the
reference), chosen as an IBM user would expect:

* The subscriber queue must exist on this queue manager (3076), or the queue
  manager must be a neighbouring broker (else 3074): those are the only places
  this broker can deliver to.
* A SubName names one subscription, so a RegSub with a SubName has one topic
  (else 3153). A SubName already naming a different subscription is 3152; a
  RegSub with a new SubName that matches an unnamed subscription needs AddName
  (else 3153), as IBM's reason texts describe.
* An identity belongs to the user who registered it: another user gets 3078
  unless every existing subscription of the identity and the new command carry
  VariableUserId. DeregSub and ReqUpdate by another user are 3151
  (MQRCCF_WRONG_USER) unless the user is an administrator (``mqm`` group) or both
  sides carry VariableUserId.
* Identity sets: JoinShared adds SubIdentity; JoinExcl (and ``Locked``, which
  we treat as its synonym) adds it with exclusive access, refused with 3155
  while other members remain; 3156 while another member holds it exclusively;
  joining again is warning 3157; a SubIdentity that is not a member without a
  Join option is 3154; altering a shared subscription without SubIdentity is 3155.
* Retained publications are sent when a RegSub creates or changes a
  subscription (not with NewPubsOnly or PubOnReqOnly); a RegSub that changes
  nothing (NoAlter on an existing subscription) sends none.
* Content filters are not implemented: a RegSub with a Filter is refused with
  2551 (MQRC_SELECTION_NOT_AVAILABLE), so no subscriber silently receives
  unfiltered publications.
"""

from __future__ import annotations

from dataclasses import replace

from broker.core import neighbours
from broker.core.authority import Permission
from broker.core.effects import (
    DELIVERY,
    FORWARD,
    AddSubscription,
    DeleteRetained,
    Outcome,
    Put,
    RemoveSubscription,
)
from broker.core.outgoing import Publication
from broker.core.publishing import publisher_identity
from broker.core.retained import RetainedPublication
from broker.core.routing import Refused, Request, finish
from broker.core.state import QueueInfo
from broker.core.subscription import (
    DEFAULT_SUB_POINT,
    STORED_OPTIONS,
    Identity,
    Subscription,
    SubscriptionKey,
)
from broker.protocol.options import RegOpt, option_names
from broker.protocol.psc import DeregSub, RegSub, ReqUpdate
from broker.protocol.pscr import ResponseItem, ok
from queues.message import MQCI_NONE
from queues.reasons import Reason

_JOIN = RegOpt.JoinShared | RegOpt.JoinExcl | RegOpt.Locked
_EXCLUSIVE = RegOpt.JoinExcl | RegOpt.Locked
_NO_RETAINED = RegOpt.NewPubsOnly | RegOpt.PubOnReqOnly
_VARIABLE_USER_ID = int(RegOpt.VariableUserId)


def subscriber_identity(request: Request, command: RegSub | DeregSub | ReqUpdate) -> Identity:
    """QName/QMgrName from the command or else the ReplyTo fields; CorrelId with CorrelAsId."""
    m = request.message
    queue = command.q_name or m.reply_to_q.strip()
    if not queue:
        raise Refused(Reason.MQRCCF_Q_NAME_ERROR, "no QName and no ReplyToQ", parameter="QName")
    q_mgr = command.q_mgr_name or m.reply_to_qmgr.strip() or request.state.qmgr
    correl_id = None
    if command.options & RegOpt.CorrelAsId:
        correl_id = command.correl_id or m.correl_id
        if correl_id == MQCI_NONE:
            raise Refused(
                Reason.MQRCCF_CORREL_ID_ERROR, "CorrelAsId with a zero CorrelId", parameter="RegOpt"
            )
    return Identity(q_mgr, queue, correl_id)


def _destination(request: Request, identity: Identity) -> QueueInfo | None:
    """The local queue publications will go to (None for a neighbour's queue)."""
    state = request.state
    if identity.q_mgr == state.qmgr:
        info = state.queues.get(identity.queue)
        if info is None:
            raise Refused(
                Reason.MQRCCF_Q_NAME_ERROR, f"queue {identity.queue} does not exist", parameter="QName"
            )
        return info
    if identity.q_mgr not in state.neighbours:
        raise Refused(
            Reason.MQRCCF_Q_MGR_NAME_ERROR,
            f"queue manager {identity.q_mgr} is neither this broker nor a neighbour",
            parameter="QMgrName",
        )
    return None


def _origin(request: Request, identity: Identity) -> str | None:
    """The neighbour a proxy subscription is from (its identity is that broker's
    inter-broker queue). Only a broker may register one: it bypasses subscribe
    authority, so an application posing as a neighbour is refused."""
    state = request.state
    if identity.q_mgr not in state.neighbours or identity.queue != state.config.inter_broker_queue:
        return None
    user = request.principal
    if user != state.config.user_id and not state.authority.is_admin(user):
        raise Refused(
            Reason.MQRCCF_NOT_AUTHORIZED,
            f"{user!r} may not register a proxy subscription for neighbour {identity.q_mgr}",
            parameter="QName",
        )
    return identity.q_mgr


def _check_owner(request: Request, identity: Identity, options: RegOpt) -> None:
    user = request.principal
    others = [s for s in request.state.of_identity(identity) if s.user_id != user]
    variable = options & RegOpt.VariableUserId and all(s.options & RegOpt.VariableUserId for s in others)
    if others and not variable:
        raise Refused(
            Reason.MQRCCF_DUPLICATE_IDENTITY,
            f"identity {identity.queue}@{identity.q_mgr} belongs to user {others[0].user_id!r}",
        )


def _may_act_on(request: Request, sub: Subscription, options: RegOpt) -> None:
    user = request.principal
    if sub.user_id == user or request.state.authority.is_admin(user):
        return
    if sub.options & RegOpt.VariableUserId and options & RegOpt.VariableUserId:
        return
    raise Refused(
        Reason.MQRCCF_WRONG_USER, f"subscription of user {sub.user_id!r}, not {user!r}", topic=sub.key.topic
    )


# -- RegSub ------------------------------------------------------------------------------------


def register(request: Request) -> Outcome:
    command = request.command
    assert isinstance(command, RegSub)
    state = request.state
    identity = subscriber_identity(request, command)
    info = _destination(request, identity)
    origin = _origin(request, identity)
    if command.filter is not None:
        raise Refused(
            Reason.MQRC_SELECTION_NOT_AVAILABLE, "content filters are not supported", parameter="Filter"
        )
    topics = command.topics
    if origin is None:
        result = state.authority.check(request.principal, Permission.SUBSCRIBE, topics)
        if not result.allowed:
            raise Refused(
                Reason.MQRCCF_NOT_AUTHORIZED,
                f"{request.principal!r} may not subscribe to {result.refused[0]!r}",
                topic=result.refused[0],
            )
        request.refuse_topics(result.refused)
        topics = result.allowed
    if command.sub_name is not None and len(topics) != 1:
        raise Refused(Reason.MQRCCF_SUB_NAME_ERROR, "a SubName names one subscription: give one Topic")
    _check_owner(request, identity, command.options)
    sub_point = command.sub_point or DEFAULT_SUB_POINT
    stored = int(RegOpt.PersAsPub) if origin is not None else int(command.options) & STORED_OPTIONS
    expiry = request.message.expiry
    template = Subscription(
        key=SubscriptionKey(identity, sub_point, topics[0], None),
        user_id=request.principal,
        options=stored,
        created_at=request.now,
        sub_name=command.sub_name,
        sub_user_data=command.sub_user_data,
        expires_at=request.now + expiry * 100 if expiry > 0 else None,
        temporary=info.temporary if info is not None else False,
        origin=origin,
    )
    added: list[Subscription] = []
    removed: list[Subscription] = []
    seq = state.next_seq()
    for topic in topics:
        key = SubscriptionKey(identity, sub_point, topic, None)
        existing = state.subscription(key)
        _check_name(request, command, key, existing)
        if existing is None:
            members, exclusive = _join_new(command)
            added.append(replace(template, key=key, seq=seq, members=members, exclusive=exclusive))
            seq += 1
            continue
        changed = _alter(request, command, existing, template)
        if changed is not None:
            removed.append(existing)
            added.append(changed)
    request.effects.extend(AddSubscription(sub) for sub in added)
    request.effects.extend(
        neighbours.proxy_changes(state, added, removed, cause=request.message.msg_id, now=request.now)
    )
    sent: set[tuple[str, str]] = set()  # one copy per retained publication, however many topics match it
    for sub in added:
        if not sub.options & _NO_RETAINED:
            held = state.retained_matching(sub.key.sub_point, sub.key.topic)
            deliver_retained(request, sub, [p for p in held if (p.sub_point, p.topic) not in sent])
            sent.update((p.sub_point, p.topic) for p in held)
    if command.options & RegOpt.FullResp and not request.warnings:
        final = (
            added[0] if added else state.subscription(SubscriptionKey(identity, sub_point, topics[0], None))
        )
        assert final is not None
        return finish(request, ok(full_response("RegSub", final)))
    return finish(request)


def _check_name(
    request: Request, command: RegSub, key: SubscriptionKey, existing: Subscription | None
) -> None:
    if command.sub_name is None:
        return
    named = request.state.named(command.sub_name)
    if named is not None and named.key != key:
        raise Refused(
            Reason.MQRCCF_DUPLICATE_SUBSCRIPTION,
            f"SubName {command.sub_name!r} already names another subscription",
        )
    if existing is not None and existing.sub_name != command.sub_name:
        if existing.sub_name is not None:
            raise Refused(
                Reason.MQRCCF_DUPLICATE_SUBSCRIPTION,
                f"the subscription is already named {existing.sub_name!r}",
            )
        if not command.options & RegOpt.AddName:
            raise Refused(
                Reason.MQRCCF_SUB_NAME_ERROR,
                "an unnamed subscription matches this identity and topic: use AddName to name it",
            )


def _join_new(command: RegSub) -> tuple[tuple[str, ...], str | None]:
    member = command.sub_identity
    if member is None:
        return (), None
    if not command.options & _JOIN:
        raise Refused(
            Reason.MQRCCF_SUB_IDENTITY_ERROR,
            f"SubIdentity {member!r} is not in the identity set and no Join option was given",
        )
    return (member,), member if command.options & _EXCLUSIVE else None


def _alter(
    request: Request, command: RegSub, existing: Subscription, template: Subscription
) -> Subscription | None:
    """The changed subscription, or None when nothing changes."""
    members, exclusive = _join_existing(request, command, existing)
    if command.options & RegOpt.NoAlter:
        if (members, exclusive) == (existing.members, existing.exclusive):
            return None
        return replace(existing, members=members, exclusive=exclusive)
    changed = replace(
        existing,
        user_id=template.user_id,
        options=template.options,
        sub_name=command.sub_name or existing.sub_name,
        sub_user_data=command.sub_user_data if command.sub_user_data is not None else existing.sub_user_data,
        expires_at=template.expires_at,
        members=members,
        exclusive=exclusive,
    )
    return None if changed == existing else changed


def _join_existing(
    request: Request, command: RegSub, existing: Subscription
) -> tuple[tuple[str, ...], str | None]:
    member = command.sub_identity
    members, exclusive = existing.members, existing.exclusive
    if member is None:
        if members:
            raise Refused(
                Reason.MQRCCF_SUBSCRIPTION_IN_USE,
                f"the subscription is shared by {len(members)} identities: give your SubIdentity",
            )
        return members, exclusive
    if exclusive is not None and exclusive != member:
        raise Refused(Reason.MQRCCF_SUBSCRIPTION_LOCKED, f"held exclusively by {exclusive!r}")
    if command.options & _JOIN:
        if member in members:
            request.warnings.append(ResponseItem(Reason.MQRCCF_ALREADY_JOINED, existing.key.topic))
        elif command.options & _EXCLUSIVE and members:
            raise Refused(
                Reason.MQRCCF_SUBSCRIPTION_IN_USE,
                "other identities share the subscription: cannot join exclusively",
            )
        else:
            members = (*members, member)
        if command.options & _EXCLUSIVE:
            exclusive = member
        return members, exclusive
    if member not in members:
        raise Refused(
            Reason.MQRCCF_SUB_IDENTITY_ERROR,
            f"SubIdentity {member!r} is not in the identity set and no Join option was given",
        )
    return members, exclusive


def full_response(command_name: str, sub: Subscription) -> list[tuple[str, str]]:
    """FullResp attributes: everything the broker holds for the subscription."""
    identity = sub.identity
    attributes = [("Command", command_name), ("Topic", sub.key.topic)]
    if sub.key.sub_point:
        attributes.append(("SubPoint", sub.key.sub_point))
    attributes += [("QMgrName", identity.q_mgr), ("QName", identity.queue), ("UserId", sub.user_id)]
    attributes += [("RegOpt", name) for name in option_names(RegOpt(sub.options))]
    if sub.exclusive is not None:
        attributes.append(("RegOpt", "Locked"))
    if identity.correl_id is not None:
        attributes.append(("CorrelId", identity.correl_id.hex().upper()))
    if sub.sub_name is not None:
        attributes.append(("SubName", sub.sub_name))
    attributes += [("SubIdentity", member) for member in sub.members]
    if sub.sub_user_data is not None:
        attributes.append(("SubUserData", sub.sub_user_data))
    return attributes


def deliver_retained(request: Request, sub: Subscription, held: list[RetainedPublication]) -> int:
    """Send ``held`` retained publications to ``sub``'s identity; expired ones are
    deleted instead, and a proxy never gets one back from a broker on its path.
    Returns how many were sent."""
    state = request.state
    now = request.now
    identity = sub.identity
    sent = 0
    for publication in held:
        if publication.expired(now):
            request.effects.append(DeleteRetained(publication.sub_point, publication.topic))
            continue
        if sub.is_proxy:
            if publication.path is not None and sub.origin in publication.path.hops:
                continue
        elif not request.may(sub.user_id, Permission.SUBSCRIBE, publication.topic):
            continue
        routed = Publication(
            publication.message,
            publication.rfh2,
            publication.publish,
            publication.sub_point,
            state.qmgr,
            now,
            publication.path,
        )
        expiry = publication.remaining_expiry(now)
        topics = (publication.topic,)
        if sub.is_proxy:
            publisher = publisher_identity(publication.publish, publication.message, state.qmgr)
            message = routed.to_neighbour(
                identity.q_mgr,
                topics,
                publisher,
                retained=True,
                expiry=expiry,
                user_id=state.config.user_id,
                cause=request.message.msg_id,
            )
            request.effects.append(Put(identity.queue, message, identity.q_mgr, FORWARD, publication.topic))
        else:
            message = routed.to_subscriber(
                sub, identity, topics, retained=True, expiry=expiry, cause=request.message.msg_id
            )
            q_mgr = "" if identity.q_mgr == state.qmgr else identity.q_mgr
            request.effects.append(Put(identity.queue, message, q_mgr, DELIVERY, publication.topic))
        sent += 1
    return sent


# -- DeregSub ----------------------------------------------------------------------------------


def deregister(request: Request) -> Outcome:
    command = request.command
    assert isinstance(command, DeregSub)
    state = request.state
    targets, missing = _deregistration_targets(request, command)
    for sub in targets:
        _may_act_on(request, sub, command.options)
        if sub.options & _VARIABLE_USER_ID and not command.options & RegOpt.VariableUserId:
            raise Refused(
                Reason.MQRCCF_REG_OPTIONS_ERROR,
                "the subscription was registered with VariableUserId: deregister it with VariableUserId",
                topic=sub.key.topic,
                parameter="RegOpt",
            )
    removed: list[Subscription] = []
    kept: list[Subscription] = []
    for sub in targets:
        remaining = _leave(command, sub)
        removed.append(sub)
        if remaining is not None:
            kept.append(remaining)
    kept_keys = {sub.key for sub in kept}
    request.effects.extend(RemoveSubscription(sub.key) for sub in removed if sub.key not in kept_keys)
    request.effects.extend(AddSubscription(sub) for sub in kept)
    request.effects.extend(
        neighbours.proxy_changes(state, kept, removed, cause=request.message.msg_id, now=request.now)
    )
    request.refuse_topics(missing, Reason.MQRCCF_NOT_REGISTERED)
    if command.options & RegOpt.FullResp and not request.warnings:
        return finish(request, ok(full_response("DeregSub", kept[0] if kept else targets[0])))
    return finish(request)


def _deregistration_targets(request: Request, command: DeregSub) -> tuple[list[Subscription], list[str]]:
    state = request.state
    if command.sub_name is not None:
        named = state.named(command.sub_name)
        if named is None:
            raise Refused(Reason.MQRCCF_NOT_REGISTERED, f"no subscription named {command.sub_name!r}")
        return [named], []
    identity = subscriber_identity(request, command)
    if command.options & RegOpt.DeregAll:
        targets = [
            sub
            for sub in state.of_identity(identity)
            if (command.sub_point is None or sub.key.sub_point == command.sub_point)
            and (not command.topics or sub.key.topic in command.topics)
            and (command.filter is None or sub.key.filter == command.filter)
        ]
        if not targets:
            raise Refused(Reason.MQRCCF_NOT_REGISTERED, "the identity has no such subscriptions")
        return targets, []
    sub_point = command.sub_point or DEFAULT_SUB_POINT
    found: list[Subscription] = []
    missing: list[str] = []
    for topic in command.topics:
        sub = state.subscription(SubscriptionKey(identity, sub_point, topic, command.filter))
        if sub is None:
            missing.append(topic)
        else:
            found.append(sub)
    if not found:
        raise Refused(Reason.MQRCCF_NOT_REGISTERED, f"not registered on {missing[0]!r}", topic=missing[0])
    return found, missing


def _leave(command: DeregSub, sub: Subscription) -> Subscription | None:
    """What remains of ``sub`` after the command: None when the subscription goes."""
    member = command.sub_identity
    if member is None:
        return None
    if member not in sub.members:
        raise Refused(
            Reason.MQRCCF_SUB_IDENTITY_ERROR,
            f"SubIdentity {member!r} is not in the identity set",
            topic=sub.key.topic,
        )
    members = tuple(m for m in sub.members if m != member)
    if not members and not command.options & RegOpt.LeaveOnly:
        return None
    return replace(sub, members=members, exclusive=None if sub.exclusive == member else sub.exclusive)


# -- ReqUpdate ---------------------------------------------------------------------------------


def request_update(request: Request) -> Outcome:
    command = request.command
    assert isinstance(command, ReqUpdate)
    state = request.state
    sub_point = command.sub_point or DEFAULT_SUB_POINT
    if command.sub_name is not None:
        # The named subscription must be the one asked about: same Topic, SubPoint and Filter.
        sub = state.named(command.sub_name)
        if sub is not None and sub.key != SubscriptionKey(
            sub.identity, sub_point, command.topic, command.filter
        ):
            sub = None
    else:
        identity = subscriber_identity(request, command)
        sub = state.subscription(SubscriptionKey(identity, sub_point, command.topic, command.filter))
    if sub is None:
        raise Refused(Reason.MQRCCF_NOT_REGISTERED, "no such subscription", topic=command.topic)
    _may_act_on(request, sub, command.options)
    held = [
        p for p in state.retained_matching(sub.key.sub_point, command.topic) if not p.expired(request.now)
    ]
    if not deliver_retained(request, sub, held):
        raise Refused(
            Reason.MQRCCF_NO_RETAINED_MSG,
            f"no retained publication on {command.topic!r}",
            topic=command.topic,
        )
    return finish(request)
