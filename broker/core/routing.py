"""What every command handler shares: the request being routed and how it ends.

A handler either returns an :class:`~broker.core.effects.Outcome` or raises
:class:`Refused`; :func:`finish` turns both into the effects a shell applies,
adding the ``<pscr>`` reply when the command's descriptor asks for one
(reference 3.2) and a dead-letter effect for poison messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from broker.core.authority import Permission
from broker.core.effects import DELIVERY, DeadLetter, Deliver, Effect, Outcome, Put
from broker.core.replies import reply
from broker.core.state import BrokerState
from broker.protocol import brokerpath, pscr, rfh2
from broker.protocol.psc import Command
from queues.message import Message
from queues.reasons import Reason

STREAM = "stream"
CONTROL = "control"
INTER_BROKER = "inter-broker"

# Reasons that mean the message is not a usable command at all: it goes to the
# dead-letter queue (with an error reply if asked) instead of merely being refused.
POISON = frozenset(
    {
        Reason.MQRC_MSG_TYPE_ERROR,
        Reason.MQRC_RFH_ERROR,
        Reason.MQRC_RFH_COMMAND_ERROR,
        Reason.MQRC_RFH_PARM_ERROR,
        Reason.MQRC_RFH_DUPLICATE_PARM,
        Reason.MQRC_RFH_PARM_MISSING,
        Reason.MQRC_RFH_FORMAT_ERROR,
        Reason.MQRCCF_MD_FORMAT_ERROR,
    }
)


@dataclass(frozen=True, slots=True)
class Source:
    """The input queue a message was taken from, and what that queue is for."""

    queue: str
    kind: str  # STREAM | CONTROL | INTER_BROKER
    sub_point: str = ""


class Refused(Exception):
    """The command fails as a whole: an error response with this one reason."""

    def __init__(self, reason: int, detail: str, *, topic: str | None = None, parameter: str | None = None):
        super().__init__(detail)
        self.reason = int(reason)
        self.detail = detail
        self.topic = topic
        self.parameter = parameter


@dataclass
class Request:
    """One command message being routed, and what handlers accumulate for it."""

    message: Message
    source: Source
    state: BrokerState
    now: int
    headers: rfh2.RFH2Body | None = None
    command: Command | None = None
    path: brokerpath.BrokerPath | None = None
    psc_folder: str | None = None  # the raw <psc> text, echoed in warnings and errors
    sequence: int = 0
    effects: list[Effect] = field(default_factory=list)
    warnings: list[pscr.ResponseItem] = field(default_factory=list)

    @property
    def principal(self) -> str:
        return self.message.user_id.rstrip()

    @property
    def from_network(self) -> bool:
        return self.source.kind == INTER_BROKER

    def may(self, user: str, permission: Permission, topic: str) -> bool:
        return self.state.authority.decide(user, permission, topic).allowed

    def refuse_topics(self, refused: Sequence[str], reason: int = Reason.MQRCCF_NOT_AUTHORIZED) -> None:
        """Record a warning per topic that was left out of an otherwise good command."""
        self.warnings.extend(pscr.ResponseItem(reason, topic) for topic in refused)


def finish(request: Request, response: pscr.Response | None = None, detail: str = "") -> Outcome:
    """The outcome of a command that was (at least partly) done."""
    if response is None:
        response = pscr.warning(request.warnings, request.psc_folder) if request.warnings else pscr.ok()
    effects = list(request.effects)
    answer = reply(request.message, response, request.state.qmgr, request.now)
    if answer is not None:
        effects.append(answer)
    return _outcome(request, effects, response, detail)


def refused(request: Request, refusal: Refused) -> Outcome:
    """The outcome of a command refused as a whole: nothing it asked for happens."""
    item = pscr.ResponseItem(refusal.reason, refusal.topic, refusal.parameter, refusal.detail or None)
    response = pscr.error(item, request.psc_folder)
    effects: list[Effect] = []
    answer = reply(request.message, response, request.state.qmgr, request.now)
    if answer is not None:
        effects.append(answer)
    if refusal.reason in POISON:
        effects.append(DeadLetter(request.message, request.source.queue, refusal.reason))
    return _outcome(request, effects, response, refusal.detail)


def _outcome(request: Request, effects: list[Effect], response: pscr.Response, detail: str) -> Outcome:
    counts: dict[str, int] = {}
    for effect in effects:
        if isinstance(effect, Put):
            counts[effect.kind] = counts.get(effect.kind, 0) + 1
        elif isinstance(effect, Deliver):
            counts[DELIVERY] = counts.get(DELIVERY, 0) + 1
    first = response.items[0] if response.items else None
    return Outcome(
        effects=tuple(effects),
        command=type(request.command).__name__ if request.command is not None else None,
        completion=response.completion,
        reason=first.reason if first is not None else 0,
        refused_topics=tuple(i.topic for i in response.items if i.topic is not None),
        detail=detail,
        counts=counts,
    )
