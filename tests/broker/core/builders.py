"""Builders shared by the routing-engine tests.

The engine is pure, so every test works the same way: build command messages the way an IBM client
would (an MQRFH2 whose ``<psc>`` folder holds the command, plus MQMD fields), route them against an
in-memory :class:`~broker.core.state.BrokerState`, then read the effects back the way a subscriber or
the shell would (decode each Put's RFH2, parse the reply's ``<pscr>``). Keeping those steps here
means each test states only the command, the state and the exact expected messages.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from broker.core import engine
from broker.core.authority import Authority
from broker.core.effects import DELIVERY, FORWARD, PROXY, REPLY, DeadLetter, Effect, Outcome, Put
from broker.core.state import BrokerConfig, BrokerState, Neighbour, QueueInfo
from broker.core.system import CONTROL_QUEUE, DEFAULT_STREAM, INTER_BROKER_QUEUE
from broker.protocol import psc, pscr, rfh2
from queues.message import (
    CCSID_UTF8,
    MQEI_UNLIMITED,
    MQENC_NATIVE,
    MQFMT_NONE,
    MQFMT_RF_HEADER_2,
    MQFMT_STRING,
    MQMT_REQUEST,
    MQPER_PERSISTENT,
    Message,
)

QMGR = "QM1"
NOW = 1_767_225_600_000  # 2026-01-01 00:00:00 UTC, in milliseconds
USER = "alice"
REPLY_Q = "ALICE.REPLY"
STREAM = DEFAULT_STREAM
CONTROL = CONTROL_QUEUE
INTER = INTER_BROKER_QUEUE
_OPTION_ELEMENTS = {"Publish": "PubOpt", "DeletePub": "DelOpt"}
_COMMAND_QUEUES = {"Publish": STREAM, "DeletePub": STREAM}


class _AnyId:
    """Equal to any generated 24-byte, non-zero MsgId: ids are hashes whose recipe may change;
    tests pin their properties (deterministic, distinct) instead of the recipe."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, bytes) and len(other) == 24 and any(other)

    def __repr__(self) -> str:
        return "ANY_ID"


ANY_ID = _AnyId()


def msg_id(n: int) -> bytes:
    """A recognisable 24-byte MsgId; the harness numbers commands 1, 2, 3..."""
    return f"MSG{n:021d}".encode()


def correl(text: str) -> bytes:
    """A 24-byte CorrelId from a short label."""
    return text.encode().ljust(24, b"\x00")


def psc_text(command: str, *topics: str, opts: Sequence[str] = (), **properties: str) -> str:
    """A ``<psc>`` folder as IBM's samples write it: Command, one element per option, Topics,
    then the other properties (keyword = element name, e.g. ``SubPoint="Pounds"``)."""
    option = _OPTION_ELEMENTS.get(command, "RegOpt")
    parts = [f"<Command>{command}</Command>"]
    parts += [f"<{option}>{name}</{option}>" for name in opts]
    parts += [f"<Topic>{psc.escape_text(topic)}</Topic>" for topic in topics]
    parts += [f"<{name}>{psc.escape_text(value)}</{name}>" for name, value in properties.items()]
    return "<psc>" + "".join(parts) + "</psc>"


def rfh2_body(folders: Sequence[str], payload: bytes = b"", *, encoding: int = MQENC_NATIVE) -> bytes:
    """One MQRFH2 header holding ``folders``, then a string payload."""
    header = rfh2.RFH2Header(
        encoding=encoding,
        ccsid=CCSID_UTF8,
        format=MQFMT_STRING if payload else MQFMT_NONE,
        folders=tuple(folders),
    )
    return rfh2.encode(rfh2.RFH2Body((header,), payload), encoding)


def message(
    folder: str | psc.Command,
    *,
    extra: Sequence[str] = (),
    payload: bytes = b"",
    body: bytes | None = None,
    **md: Any,
) -> Message:
    """A command message: ``folder`` (text or a command rendered with ``psc.render``) followed by
    ``extra`` folders, ``payload`` as the user data, and MQMD fields as a client sets them."""
    text = folder if isinstance(folder, str) else psc.render(folder)
    encoding = md.get("encoding", MQENC_NATIVE)
    assert isinstance(encoding, int)
    defaults: dict[str, object] = {
        "msg_id": msg_id(1),
        "format": MQFMT_RF_HEADER_2,
        "msg_type": MQMT_REQUEST,
        "reply_to_q": REPLY_Q,
        "user_id": USER,
        "persistence": MQPER_PERSISTENT,
        "priority": 4,
        "expiry": MQEI_UNLIMITED,
        "put_date": "20260101",
        "put_time": "00000000",
    }
    defaults.update(md)
    if body is None:
        body = rfh2_body((text, *extra), payload, encoding=encoding)
    return Message(body=body, **defaults)  # type: ignore[arg-type]


def command_queue(folder: str | psc.Command) -> str:
    """Where an application puts this command: Publish and DeletePub on the stream, the rest
    on the control queue."""
    name = psc.command_name(folder) if isinstance(folder, str) else type(folder).__name__
    return _COMMAND_QUEUES.get(name or "", CONTROL)


# --- reading effects back -------------------------------------------------------------------


@dataclass(frozen=True)
class Sent:
    """One Put effect as its receiver sees it."""

    queue: str
    q_mgr: str
    kind: str
    topic: str
    md: dict[str, object]  # every MQMD field of the message but its body
    folders: tuple[str, ...]
    payload: bytes
    message: Message

    @property
    def psc(self) -> psc.Command:
        """The one ``<psc>`` folder, parsed (deliveries and broker commands carry exactly one)."""
        (folder,) = (f for f in self.folders if rfh2.folder_name(f) == "psc")
        return psc.parse(folder)

    @property
    def psc_folder(self) -> str:
        (folder,) = (f for f in self.folders if rfh2.folder_name(f) == "psc")
        return folder

    @property
    def response(self) -> pscr.Response:
        return pscr.parse_folders(self.folders)


def mqmd(m: Message) -> dict[str, object]:
    return {name: value for name, value in m._asdict().items() if name != "body"}


def decode_put(put: Put) -> Sent:
    m = put.message
    body = rfh2.decode(m.body, m.encoding, m.format)
    assert rfh2.decode(rfh2.encode(body, m.encoding), m.encoding, m.format) == body
    return Sent(put.queue, put.q_mgr, put.kind, put.topic, mqmd(m), body.folders, body.payload, m)


def puts(outcome: Outcome, kind: str | None = None) -> list[Sent]:
    """The outcome's Puts of ``kind`` (all when None), decoded, in effect order."""
    return [decode_put(e) for e in outcome.effects if isinstance(e, Put) and (kind is None or e.kind == kind)]


def deliveries(outcome: Outcome) -> list[Sent]:
    return puts(outcome, DELIVERY)


def forwards(outcome: Outcome) -> list[Sent]:
    return puts(outcome, FORWARD)


def proxies(outcome: Outcome) -> list[Sent]:
    return puts(outcome, PROXY)


def reply(outcome: Outcome) -> Sent | None:
    """The ``<pscr>`` reply, None when the command gets none; never more than one."""
    replies = puts(outcome, REPLY)
    assert len(replies) <= 1
    return replies[0] if replies else None


def reply_folders(outcome: Outcome) -> tuple[str, ...]:
    """The reply's folders exactly: ``<pscr>`` and, for warning and error, the echoed ``<psc>``."""
    answer = reply(outcome)
    assert answer is not None, "expected a reply"
    assert answer.payload == b""
    return answer.folders


def dead_letters(outcome: Outcome) -> list[DeadLetter]:
    return [e for e in outcome.effects if isinstance(e, DeadLetter)]


def changes(outcome: Outcome) -> list[Effect]:
    """The state-changing effects (everything but Puts and dead letters), in order."""
    return [e for e in outcome.effects if not isinstance(e, Put | DeadLetter)]


def pscr_ok() -> tuple[str]:
    return ("<pscr><Completion>ok</Completion></pscr>",)


def pscr_error(
    reason: int,
    echoed: str | None,
    *,
    topic: str | None = None,
    parameter: str | None = None,
    detail: str | None = None,
) -> tuple[str, ...]:
    """The exact folders of an error reply (``detail``: the refusal's words, as the outcome
    has them)."""
    return pscr.to_folders(pscr.error(pscr.ResponseItem(reason, topic, parameter, detail), echoed))


def pscr_warning(items: Iterable[tuple[int, str]], echoed: str) -> tuple[str, ...]:
    """The exact folders of a warning reply with one (reason, topic) Response per item."""
    return pscr.to_folders(pscr.warning([pscr.ResponseItem(r, t) for r, t in items], echoed))


# --- a broker under test ----------------------------------------------------------------------


class Broker:
    """A BrokerState plus a clock and MsgId counter: send commands, get outcomes, keep state."""

    def __init__(
        self,
        *,
        qmgr: str = QMGR,
        queues: Iterable[str | QueueInfo] = (REPLY_Q,),
        authority: Authority | None = None,
        neighbours: Iterable[str] = (),
        streams: dict[str, str] | None = None,
        now: int = NOW,
    ) -> None:
        infos = [q if isinstance(q, QueueInfo) else QueueInfo(q) for q in queues]
        config = BrokerConfig(qmgr) if streams is None else BrokerConfig(qmgr, streams=streams)
        self.state = BrokerState(
            config,
            authority=authority,
            queues={info.name: info for info in infos},
            neighbours=[Neighbour(n) for n in neighbours],
        )
        self.now = now
        self._numbers = itertools.count(1)
        self.last_msg_id = b""

    @property
    def qmgr(self) -> str:
        return self.state.qmgr

    def send(
        self,
        folder: str | psc.Command,
        queue: str | None = None,
        *,
        apply: bool = True,
        extra: Sequence[str] = (),
        payload: bytes = b"",
        **md: Any,
    ) -> Outcome:
        """Put one command on ``queue`` (default: where its command belongs) and route it; its
        state-changing effects are applied unless ``apply`` is False."""
        number = next(self._numbers)
        md.setdefault("msg_id", msg_id(number))
        m = message(folder, extra=extra, payload=payload, **md)
        return self.route(m, queue or command_queue(folder), apply=apply, sequence=number)

    def route(self, m: Message, queue: str, *, apply: bool = True, sequence: int = 0) -> Outcome:
        self.last_msg_id = m.msg_id
        outcome = engine.route(
            m, engine.source_of(self.state, queue), self.state, self.now, sequence=sequence
        )
        if apply:
            self.state.apply_all(outcome.effects)
        return outcome

    def deliver(self, sent: Sent, *, apply: bool = True) -> Outcome:
        """Carry a broker-to-broker Put to this broker (its channel did the move)."""
        assert sent.q_mgr == self.qmgr, f"{sent.q_mgr} is not {self.qmgr}"
        return self.route(sent.message, sent.queue, apply=apply)
