"""The routing engine: one command message + the broker state -> effects.

``route`` is pure: it reads the message, the :class:`~broker.core.state.BrokerState`
and the time it is handed, and returns an :class:`~broker.core.effects.Outcome`.
The same function runs in the service loop, inside Spark tasks and behind the
admin API. Its steps follow the data: decode the MQRFH2 (``broker.protocol.rfh2``),
parse the ``<psc>`` (``broker.protocol.psc``), check it arrived on the right queue,
then the command's handler authorises, matches and builds the deliveries,
replies and state changes (``broker.core.publishing``, ``broker.core.registration``).

Poison messages (not a request or datagram, not MQRFH2, malformed headers or
``<psc>``) end in a dead-letter effect with the reason, plus an error reply if
the descriptor asks for one. Valid commands that fail (not authorised, not
registered, bad options...) are answered, not dead-lettered.
"""

from __future__ import annotations

from collections.abc import Callable

from broker.core import neighbours
from broker.core.effects import REPLY, DeadLetter, DeleteRetained, Effect, Outcome, RemoveSubscription
from broker.core.publishing import delete_publication, publish
from broker.core.registration import deregister, register, request_update
from broker.core.replies import reply
from broker.core.routing import CONTROL, INTER_BROKER, STREAM, Refused, Request, Source, refused
from broker.core.state import BrokerState
from broker.core.subscription import Subscription
from broker.protocol import brokerpath, psc, pscr, rfh2
from queues.ids import derived_id
from queues.message import MQMT_DATAGRAM, MQMT_REPLY, MQMT_REQUEST, Message
from queues.reasons import Reason

_HANDLERS: dict[type, Callable[[Request], Outcome]] = {
    psc.Publish: publish,
    psc.DeletePub: delete_publication,
    psc.RegSub: register,
    psc.DeregSub: deregister,
    psc.ReqUpdate: request_update,
}
_QUEUE_KINDS: dict[type, frozenset[str]] = {
    psc.Publish: frozenset({STREAM, INTER_BROKER}),
    psc.DeletePub: frozenset({STREAM, INTER_BROKER}),
    psc.RegSub: frozenset({CONTROL}),
    psc.DeregSub: frozenset({CONTROL}),
    psc.ReqUpdate: frozenset({CONTROL}),
}


def source_of(state: BrokerState, queue: str) -> Source:
    """What the broker's input queue ``queue`` is for."""
    config = state.config
    if queue == config.control_queue:
        return Source(queue, CONTROL)
    if queue == config.inter_broker_queue:
        return Source(queue, INTER_BROKER)
    return Source(queue, STREAM, config.streams.get(queue, ""))


def route(
    message: Message,
    source: Source,
    state: BrokerState,
    now: int,
    *,
    sequence: int = 0,
    headers: rfh2.RFH2Body | None = None,
    command: psc.Command | None = None,
) -> Outcome:
    """Route one message taken from ``source``; ``sequence`` is its position in
    the input (the retained store keeps the last writer by it). ``headers``: the
    message's MQRFH2 as decoded, from a caller that built the message itself; with
    them, ``command``: its <psc> command as built, not parsed again (an in-process
    shell's typed command; never one from a neighbour, whose path is read too)."""
    request = Request(message, source, state, now, sequence=sequence)
    try:
        if source.kind == INTER_BROKER and message.msg_type == MQMT_REPLY:
            return _neighbour_response(request)
        _decode(request, headers, command)
        command = request.command
        assert command is not None
        if source.kind not in _QUEUE_KINDS[type(command)]:
            raise Refused(
                Reason.MQRCCF_INCORRECT_Q,
                f"{type(command).__name__} is not accepted on {source.queue}",
                parameter="Command",
            )
        return _HANDLERS[type(command)](request)
    except Refused as refusal:
        return refused(request, refusal)


def _decode(request: Request, headers: rfh2.RFH2Body | None, command: psc.Command | None = None) -> None:
    m = request.message
    if m.msg_type not in (MQMT_REQUEST, MQMT_DATAGRAM):
        raise Refused(Reason.MQRC_MSG_TYPE_ERROR, f"MsgType {m.msg_type} is not a request or a datagram")
    if command is not None and headers is not None and not request.from_network:
        request.headers = headers
        request.psc_folder = rfh2.find(headers.folders, psc.FOLDER)[0][0]
        try:  # what parsing would have refused in its topics (the rest the builder fixes)
            psc.check_topics(psc.topics_of(command), wildcards=not isinstance(command, psc.Publish))
        except psc.PscError as exc:
            raise Refused(exc.reason, exc.detail, topic=exc.topic, parameter=exc.parameter) from None
        request.command = command
        return
    try:
        request.headers = headers if headers is not None else rfh2.decode(m.body, m.encoding, m.format)
        commands, others = rfh2.find(request.headers.folders, psc.FOLDER)
    except rfh2.RFH2Error as exc:
        raise Refused(exc.reason, exc.detail) from None
    if not commands:
        raise Refused(Reason.MQRC_RFH_PARM_MISSING, "no <psc> folder", parameter=psc.FOLDER)
    if len(commands) > 1:
        raise Refused(Reason.MQRC_RFH_DUPLICATE_PARM, "more than one <psc> folder", parameter=psc.FOLDER)
    request.psc_folder = commands[0]
    try:
        request.command = psc.parse(commands[0])
        if request.from_network:
            paths = rfh2.find(others, brokerpath.FOLDER)[0]
            request.path = _path(request, paths[-1] if paths else None)
    except psc.PscError as exc:
        raise Refused(exc.reason, exc.detail, topic=exc.topic, parameter=exc.parameter) from None


def _path(request: Request, folder: str | None) -> brokerpath.BrokerPath:
    """The path of a message from a neighbour; loops and strangers are refused."""
    if folder is None:
        raise Refused(Reason.MQRC_RFH_PARM_MISSING, "a message from a neighbour without <brokerpath>")
    path = brokerpath.parse(folder)
    state = request.state
    if state.qmgr in path.hops:
        raise Refused(
            Reason.MQRC_LOOPING_PUBLICATION,
            f"looping publication: {' -> '.join(path.hops)} -> {state.qmgr}",
        )
    if path.last_hop not in state.neighbours:
        raise Refused(Reason.MQRCCF_UNKNOWN_BROKER, f"{path.last_hop} is not a neighbouring broker")
    return path


def _neighbour_response(request: Request) -> Outcome:
    """A neighbour's answer to one of our proxy commands: logged, never dead-lettered."""
    m = request.message
    try:
        headers = rfh2.decode(m.body, m.encoding, m.format)
        response = pscr.parse_folders(headers.folders)
    except (rfh2.RFH2Error, pscr.PscrError) as exc:
        raise Refused(exc.reason, f"unreadable response from a neighbour: {exc.detail}") from None
    first = response.items[0] if response.items else None
    return Outcome(
        effects=(),
        command="Response",
        completion=response.completion,
        reason=first.reason if first is not None else 0,
        refused_topics=tuple(i.topic for i in response.items if i.topic is not None),
        detail=f"response from {m.reply_to_qmgr.strip() or 'a neighbour'} to a proxy command",
    )


def housekeeping(state: BrokerState, now: int) -> list[Effect]:
    """What must go without a command: expired subscriptions, subscriptions whose
    temporary dynamic queue no longer exists (MQ deregisters them when it is closed),
    and expired retained publications."""
    gone: list[Subscription] = []
    for sub in state.subscriptions():
        if sub.expired(now) or (sub.temporary and state.queues.get(sub.identity.queue) is None):
            gone.append(sub)
    effects: list[Effect] = [RemoveSubscription(sub.key) for sub in gone]
    cause = derived_id(b"housekeeping", str(now).encode())
    effects.extend(neighbours.proxy_changes(state, (), gone, cause=cause, now=now))
    effects.extend(DeleteRetained(p.sub_point, p.topic) for p in state.all_retained() if p.expired(now))
    return effects


def failed_outcome(message: Message, queue: str, qmgr: str, now: int, detail: str) -> Outcome:
    """A message the broker cannot route goes to the DLQ with 3008 and, like any other
    refused command, is answered with an error where it asks for an answer (the Spark
    job's tasks treat such a message the same way)."""
    reason = Reason.MQRCCF_COMMAND_FAILED
    effects: list[Effect] = [DeadLetter(message, queue, reason)]
    answer = reply(message, pscr.error(pscr.ResponseItem(reason), None), qmgr, now)
    if answer is not None:
        effects.append(answer)
    return Outcome(
        effects=tuple(effects),
        command=None,
        completion=pscr.ERROR,
        reason=reason,
        detail=detail,
        counts={REPLY: 1} if answer is not None else {},
    )
