"""The ``<psc>`` command folder, parsed into typed immutable commands.

Applications speak to the broker in MQRFH2 ``<psc>`` folders; this module turns
one folder's text into a :class:`Publish`, :class:`RegSub`, :class:`DeregSub`,
:class:`ReqUpdate` or :class:`DeletePub`, or raises :class:`PscError` with the
reason IBM's broker would put in its ``<pscr>`` error response. It is pure: the
routing engine, the Spark pipeline and the admin API all parse the same way.

The folder is application data, so the parser is hardened (no DTD, no entities, no network,
no huge trees; any ``<!DOCTYPE`` refused before libxml2 sees it), and the first error is
reported in IBM's order. lxml parser objects must not be used by two threads at once, and
making one per call would add 70% to a parse, so each thread keeps its own. What the
specification leaves open, and why each choice: ``docs/decisions.md``, "<psc> commands".
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TypeVar

from lxml import etree

from broker.protocol.options import (
    DelOpt,
    Option,
    OptionError,
    PubOpt,
    RegOpt,
    option_names,
    option_reason,
    parse_option,
)
from queues.errors import MQError
from queues.message import MQCI_NONE
from queues.names import is_valid_name
from queues.reasons import Reason

FOLDER = "psc"  # the root element of a command folder
MAX_FOLDER_BYTES = 256 * 1024
"""UTF-8 size of the largest folder parsed; larger ones are 2337 unparsed."""
MAX_TOPICS = 1024
"""Most ``<Topic>`` elements in one command; more is 2337."""
MAX_TOPIC_LENGTH = 10240
"""Longest topic in characters (MQ's MQ_TOPIC_STR_LENGTH); longer is 3072."""
MAX_SUB_IDENTITY_LENGTH = 128
"""Longest SubIdentity (MQ_SUB_IDENTITY_LENGTH); longer is 3154."""
ERROR_TOPIC_LENGTH = 256
"""How much of an offending topic an error carries, as IBM's broker does."""
CACHED_FOLDER = 1024
"""Longest folder whose parsed command is remembered (1,024 of them at most)."""

_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")

_PROPERTIES = frozenset(
    {
        "Command",
        "Topic",
        "SubPoint",
        "Filter",
        "QMgrName",
        "QName",
        "RegOpt",
        "PubOpt",
        "DelOpt",
        "PubTime",
        "SeqNum",
        "SubName",
        "SubIdentity",
        "SubUserData",
        "CorrelId",
    }
)
_WILDCARD_LEVELS = frozenset({"#", "+"})
_CORREL_ID = re.compile(r"[0-9A-Fa-f]{48}")
_COMMAND = re.compile(r"<Command>\s*([^<\s]{1,32})\s*</Command>")
# Plain ints: IntFlag operators build a new member on every call.
_PERSISTENCE = int(RegOpt.NonPers | RegOpt.Pers | RegOpt.PersAsPub | RegOpt.PersAsQueue)
_DEREG_ALL = int(RegOpt.DeregAll)

_Properties = dict[str, list[str]]
_Subscription = TypeVar("_Subscription", "RegSub", "DeregSub")


class PscError(MQError):
    """A ``<psc>`` folder the broker refuses, with what the error response names.

    ``topic`` is the offending topic (for ``<Topic>`` in the response) and
    ``parameter`` the offending element, when the failure has one.
    """

    def __init__(
        self,
        reason: int,
        message: str,
        *,
        topic: str | None = None,
        parameter: str | None = None,
    ) -> None:
        super().__init__(reason, message)
        self.topic = topic
        self.parameter = parameter


# Each command's fields default to what a folder without the element means; ``folder`` is
# the folder's text as received ("" for a command built in process: rendered when put).
NO_PUB_OPTIONS = PubOpt(0)
NO_REG_OPTIONS = RegOpt(0)
NO_DEL_OPTIONS = DelOpt(0)


@dataclass(frozen=True, slots=True)
class Publish:
    """A publication on one or more topics (never wildcards)."""

    topics: tuple[str, ...]
    sub_point: str | None = None
    options: PubOpt = NO_PUB_OPTIONS
    pub_time: str | None = None
    seq_num: str | None = None
    q_mgr_name: str | None = None
    q_name: str | None = None
    correl_id: bytes | None = None
    folder: str = ""


@dataclass(frozen=True, slots=True)
class Registration:
    """What RegSub and DeregSub both name: the subscriptions of one queue, one per topic."""

    topics: tuple[str, ...]
    sub_point: str | None = None
    filter: str | None = None
    q_mgr_name: str | None = None
    q_name: str | None = None
    options: RegOpt = NO_REG_OPTIONS
    sub_name: str | None = None
    sub_identity: str | None = None
    sub_user_data: str | None = None
    correl_id: bytes | None = None
    folder: str = ""


@dataclass(frozen=True, slots=True)
class RegSub(Registration):
    """Register (or alter) subscriptions, one per topic."""


@dataclass(frozen=True, slots=True)
class DeregSub(Registration):
    """Deregister subscriptions; ``topics`` may be empty with DeregAll or SubName."""


@dataclass(frozen=True, slots=True)
class ReqUpdate:
    """Ask for the retained publications of exactly one (wildcard) topic."""

    topic: str
    sub_point: str | None = None
    filter: str | None = None
    q_mgr_name: str | None = None
    q_name: str | None = None
    options: RegOpt = NO_REG_OPTIONS
    sub_name: str | None = None
    correl_id: bytes | None = None
    folder: str = ""


@dataclass(frozen=True, slots=True)
class DeletePub:
    """Delete the retained publications of the given (wildcard) topics."""

    topics: tuple[str, ...]
    sub_point: str | None = None
    options: DelOpt = NO_DEL_OPTIONS
    q_mgr_name: str | None = None
    q_name: str | None = None
    folder: str = ""


Command = Publish | RegSub | DeregSub | ReqUpdate | DeletePub


def topics_of(command: Command) -> tuple[str, ...]:
    """The topics a command names (a ReqUpdate names one)."""
    return (command.topic,) if isinstance(command, ReqUpdate) else command.topics


class _Parser(threading.local):
    def __init__(self) -> None:
        self.xml = etree.XMLParser(
            resolve_entities=False,
            no_network=True,
            load_dtd=False,
            dtd_validation=False,
            attribute_defaults=False,
            huge_tree=False,
            remove_comments=True,
            remove_pis=True,
            collect_ids=False,
        )


_PARSER = _Parser()


def load_folder(folder: str, root: str) -> etree._Element:
    """The root element of one RFH2 folder, parsed safely; 2337 for anything unsafe.

    Shared with the ``<pscr>`` reader so that both sides of the protocol refuse
    the same hostile input the same way.
    """
    if _too_big(folder):
        raise PscError(Reason.MQRC_RFH_PARM_ERROR, f"<{root}> folder larger than {MAX_FOLDER_BYTES} bytes")
    if "<!DOCTYPE" in folder:
        raise PscError(Reason.MQRC_RFH_PARM_ERROR, f"<{root}> folder contains a DOCTYPE")
    try:
        element = etree.fromstring(folder.rstrip("\x00 "), _PARSER.xml)
    except (etree.LxmlError, ValueError) as exc:
        raise PscError(Reason.MQRC_RFH_PARM_ERROR, f"<{root}> folder is not XML: {exc}") from None
    if element.tag != root:
        raise PscError(Reason.MQRC_RFH_PARM_ERROR, f"root element is <{element.tag}>, not <{root}>")
    return element


def _too_big(folder: str) -> bool:
    # A character is at most 4 UTF-8 bytes: only folders near the limit are encoded.
    length = len(folder)
    if length <= MAX_FOLDER_BYTES // 4:
        return False
    if length > MAX_FOLDER_BYTES:
        return True
    return len(folder.encode("utf-8", "surrogatepass")) > MAX_FOLDER_BYTES


def parse(folder: str) -> Command:
    """The command in ``folder`` (the text of one ``<psc>`` NameValueData). Commands are
    immutable, so a short folder seen lately is parsed once: every publication of an MQTT
    client on one topic carries the same ``<psc>``, as do an application's repeated ones."""
    return _parse_cached(folder) if len(folder) <= CACHED_FOLDER else _parse(folder)


def _parse(folder: str) -> Command:
    properties = _properties(load_folder(folder, "psc"))
    grammar = _grammar(properties)
    grammar.check_properties(properties)
    return grammar.build(properties, grammar.options(properties), folder)


_parse_cached = lru_cache(maxsize=1024)(_parse)


def command_name(folder: str) -> str | None:
    """The ``<Command>`` value, best effort and never raising: for logs and DLQ reasons."""
    if not isinstance(folder, str):
        return None
    match = _COMMAND.search(folder)
    return match.group(1) if match else None


def _properties(root: etree._Element) -> _Properties:
    if not _blank(root.text):
        raise PscError(Reason.MQRC_RFH_PARM_ERROR, "text outside any <psc> property")
    properties: _Properties = {}
    for child in root:
        name = child.tag
        if name not in _PROPERTIES:
            raise PscError(Reason.MQRC_RFH_PARM_ERROR, f"unknown property <{name}>", parameter=str(name))
        if len(child) or not _blank(child.tail):
            raise PscError(Reason.MQRC_RFH_PARM_ERROR, f"<{name}> is not a flat property", parameter=name)
        values = properties.get(name)
        if values is None:
            properties[name] = [child.text or ""]
        else:
            values.append(child.text or "")
    return properties


def _blank(text: str | None) -> bool:
    return not text or text.isspace()


@dataclass(frozen=True, slots=True)
class _Grammar:
    """What one command accepts: its properties, its options and how it is built."""

    name: str
    properties: frozenset[str]
    repeatable: frozenset[str]
    option_element: str
    option_kind: type[Option]
    valid_options: int
    combinations: Callable[[int, _Properties], None]
    build: Callable[[_Properties, int, str], Command]

    def check_properties(self, properties: _Properties) -> None:
        for name, values in properties.items():
            if name not in self.properties:
                raise PscError(
                    Reason.MQRC_RFH_PARM_ERROR,
                    f"<{name}> is not valid on {self.name}",
                    parameter=name,
                )
            if len(values) > 1 and name not in self.repeatable:
                raise PscError(Reason.MQRC_RFH_DUPLICATE_PARM, f"<{name}> given twice", parameter=name)

    def options(self, properties: _Properties) -> int:
        """The OR of every option element, checked against this command's options."""
        kind = self.option_kind
        value = 0
        for text in properties.get(self.option_element, ()):
            try:
                value |= int(parse_option(kind, text.strip()))
            except OptionError as exc:
                raise PscError(exc.reason, exc.detail, parameter=self.option_element) from None
        invalid = value & ~self.valid_options
        if invalid:
            raise self.option_error(f"{option_names(kind(invalid))} not valid on {self.name}")
        self.combinations(value, properties)
        return value

    def option_error(self, message: str) -> PscError:
        return PscError(option_reason(self.option_kind), message, parameter=self.option_element)


def _grammar(properties: _Properties) -> _Grammar:
    values = properties.get("Command")
    if values is None:
        raise PscError(Reason.MQRC_RFH_PARM_MISSING, "<Command> is missing", parameter="Command")
    if len(values) > 1:
        raise PscError(Reason.MQRC_RFH_DUPLICATE_PARM, "<Command> given twice", parameter="Command")
    name = values[0].strip()
    grammar = _GRAMMARS.get(name)
    if grammar is None:
        raise PscError(Reason.MQRC_RFH_COMMAND_ERROR, f"unknown command {name!r}", parameter="Command")
    return grammar


# Value extraction. Each helper reads a property that check_properties has
# already limited to one occurrence (except Topic).


def _text(properties: _Properties, name: str) -> str | None:
    values = properties.get(name)
    return None if values is None else values[0]


def _token(properties: _Properties, name: str) -> str | None:
    values = properties.get(name)
    return (values[0].strip() or None) if values is not None else None


def _sub_point(properties: _Properties) -> str | None:
    return _text(properties, "SubPoint") or None


def _name(properties: _Properties, name: str, reason: Reason) -> str | None:
    value = _token(properties, name)
    if value is not None and not is_valid_name(value):
        raise PscError(reason, f"invalid <{name}> {value!r}", parameter=name)
    return value


def _q_name(properties: _Properties) -> str | None:
    return _name(properties, "QName", Reason.MQRCCF_Q_NAME_ERROR)


def _q_mgr_name(properties: _Properties) -> str | None:
    return _name(properties, "QMgrName", Reason.MQRCCF_Q_MGR_NAME_ERROR)


def _correl_id(properties: _Properties) -> bytes | None:
    values = properties.get("CorrelId")
    if values is None:
        return None
    text = values[0].strip()
    if _CORREL_ID.fullmatch(text) is None:
        raise PscError(
            Reason.MQRC_RFH_PARM_ERROR,
            "<CorrelId> must be 48 hexadecimal digits",
            parameter="CorrelId",
        )
    correl_id = bytes.fromhex(text)
    if correl_id == MQCI_NONE:
        raise PscError(Reason.MQRCCF_CORREL_ID_ERROR, "<CorrelId> is all zeros", parameter="CorrelId")
    return correl_id


def _sub_name(properties: _Properties) -> str | None:
    value = _text(properties, "SubName")
    if value is not None and _blank(value):
        raise PscError(Reason.MQRCCF_SUB_NAME_ERROR, "<SubName> is empty", parameter="SubName")
    return value


def _sub_identity(properties: _Properties) -> str | None:
    value = _text(properties, "SubIdentity")
    if value is not None and (_blank(value) or len(value) > MAX_SUB_IDENTITY_LENGTH):
        raise PscError(
            Reason.MQRCCF_SUB_IDENTITY_ERROR,
            f"<SubIdentity> must be 1 to {MAX_SUB_IDENTITY_LENGTH} characters",
            parameter="SubIdentity",
        )
    return value


def _topics(properties: _Properties, *, required: bool, wildcards: bool) -> tuple[str, ...]:
    topics = properties.get("Topic", ())
    if required and not topics:
        raise PscError(Reason.MQRC_RFH_PARM_MISSING, "<Topic> is missing", parameter="Topic")
    return check_topics(topics, wildcards=wildcards)


def check_topics(topics: Sequence[str], *, wildcards: bool) -> tuple[str, ...]:
    """``topics`` as a command's ``<Topic>`` values, checked as parsing checks them (their
    number, each one's length and wildcards): a command built in process, not parsed, is
    checked here before it is routed."""
    if len(topics) > MAX_TOPICS:
        raise PscError(Reason.MQRC_RFH_PARM_ERROR, f"more than {MAX_TOPICS} topics", parameter="Topic")
    for topic in topics:
        problem = _topic_problem(topic, wildcards)
        if problem:
            raise PscError(
                Reason.MQRCCF_TOPIC_ERROR,
                problem,
                topic=topic[:ERROR_TOPIC_LENGTH],
                parameter="Topic",
            )
    return tuple(topics)


def _topic_problem(topic: str, wildcards: bool) -> str | None:
    if not topic:
        return "empty topic"
    if len(topic) > MAX_TOPIC_LENGTH:
        return f"topic longer than {MAX_TOPIC_LENGTH} characters"
    if not wildcards and ("#" in topic or "+" in topic) and not _WILDCARD_LEVELS.isdisjoint(topic.split("/")):
        return "wildcard in a publication topic"
    return None


# Option combinations (sections 2.7 and 2.8 of the reference).


def _no_combinations(options: int, properties: _Properties) -> None:
    """Publish, ReqUpdate and DeletePub options combine freely."""


def _regsub_combinations(options: int, properties: _Properties) -> None:
    flags = RegOpt(options)
    if (options & _PERSISTENCE).bit_count() > 1:
        raise _REGSUB.option_error("more than one of NonPers, Pers, PersAsPub, PersAsQueue")
    if RegOpt.AddName in flags and "SubName" not in properties:
        raise _REGSUB.option_error("AddName needs <SubName>")
    if RegOpt.JoinShared in flags and RegOpt.JoinExcl in flags:
        raise _REGSUB.option_error("JoinShared and JoinExcl together")
    _check_full_response(_REGSUB, flags, properties)


def _deregsub_combinations(options: int, properties: _Properties) -> None:
    flags = RegOpt(options)
    if RegOpt.FullResp in flags and RegOpt.DeregAll in flags:
        raise _DEREGSUB.option_error("FullResp with DeregAll")
    if RegOpt.LeaveOnly in flags and "SubIdentity" not in properties:
        raise _DEREGSUB.option_error("LeaveOnly needs <SubIdentity>")
    _check_full_response(_DEREGSUB, flags, properties)


def _check_full_response(grammar: _Grammar, flags: RegOpt, properties: _Properties) -> None:
    if RegOpt.FullResp in flags and len(properties.get("Topic", ())) > 1:
        raise grammar.option_error("FullResp with more than one topic")


# Builders: keyword arguments are evaluated in order, which fixes the order of
# the value checks documented above.


def _publish(properties: _Properties, options: int, folder: str) -> Publish:
    return Publish(
        topics=_topics(properties, required=True, wildcards=False),
        sub_point=_sub_point(properties),
        options=PubOpt(options),
        pub_time=_token(properties, "PubTime"),
        seq_num=_token(properties, "SeqNum"),
        q_name=_q_name(properties),
        q_mgr_name=_q_mgr_name(properties),
        correl_id=_correl_id(properties),
        folder=folder,
    )


def _regsub(properties: _Properties, options: int, folder: str) -> RegSub:
    return _subscription(RegSub, properties, options, folder, topics_required=True)


def _deregsub(properties: _Properties, options: int, folder: str) -> DeregSub:
    # DeregAll or a SubName identifies what to remove without a topic.
    required = not (options & _DEREG_ALL or "SubName" in properties)
    return _subscription(DeregSub, properties, options, folder, topics_required=required)


def _subscription(
    kind: type[_Subscription],
    properties: _Properties,
    options: int,
    folder: str,
    *,
    topics_required: bool,
) -> _Subscription:
    return kind(
        sub_name=_sub_name(properties),
        sub_identity=_sub_identity(properties),
        topics=_topics(properties, required=topics_required, wildcards=True),
        sub_point=_sub_point(properties),
        filter=_token(properties, "Filter"),
        q_name=_q_name(properties),
        q_mgr_name=_q_mgr_name(properties),
        options=RegOpt(options),
        sub_user_data=_text(properties, "SubUserData"),
        correl_id=_correl_id(properties),
        folder=folder,
    )


def _requpdate(properties: _Properties, options: int, folder: str) -> ReqUpdate:
    return ReqUpdate(
        sub_name=_sub_name(properties),
        topic=_topics(properties, required=True, wildcards=True)[0],
        sub_point=_sub_point(properties),
        filter=_token(properties, "Filter"),
        q_name=_q_name(properties),
        q_mgr_name=_q_mgr_name(properties),
        options=RegOpt(options),
        correl_id=_correl_id(properties),
        folder=folder,
    )


def _deletepub(properties: _Properties, options: int, folder: str) -> DeletePub:
    return DeletePub(
        topics=_topics(properties, required=True, wildcards=True),
        sub_point=_sub_point(properties),
        options=DelOpt(options),
        q_name=_q_name(properties),
        q_mgr_name=_q_mgr_name(properties),
        folder=folder,
    )


def _mask(*options: int) -> int:
    return sum(options)


_ADDRESS = frozenset({"Command", "Topic", "SubPoint", "QMgrName", "QName"})
_SUBSCRIBER = _ADDRESS | {"Filter", "RegOpt", "SubName", "SubIdentity", "SubUserData", "CorrelId"}
_REPEATED_REG = frozenset({"Topic", "RegOpt"})

_REGSUB = _Grammar(
    name="RegSub",
    properties=_SUBSCRIBER,
    repeatable=_REPEATED_REG,
    option_element="RegOpt",
    option_kind=RegOpt,
    valid_options=_mask(
        RegOpt.CorrelAsId,
        RegOpt.Local,
        RegOpt.NewPubsOnly,
        RegOpt.PubOnReqOnly,
        RegOpt.InformIfRet,
        RegOpt.DupsOK,
        _PERSISTENCE,
        RegOpt.AddName,
        RegOpt.NoAlter,
        RegOpt.FullResp,
        RegOpt.JoinShared,
        RegOpt.JoinExcl,
        RegOpt.VariableUserId,
        RegOpt.Locked,
    ),
    combinations=_regsub_combinations,
    build=_regsub,
)
_DEREGSUB = _Grammar(
    name="DeregSub",
    properties=_SUBSCRIBER,
    repeatable=_REPEATED_REG,
    option_element="RegOpt",
    option_kind=RegOpt,
    valid_options=_mask(
        RegOpt.CorrelAsId, RegOpt.DeregAll, RegOpt.FullResp, RegOpt.LeaveOnly, RegOpt.VariableUserId
    ),
    combinations=_deregsub_combinations,
    build=_deregsub,
)
_GRAMMARS: dict[str, _Grammar] = {
    "Publish": _Grammar(
        name="Publish",
        properties=_ADDRESS | {"PubOpt", "PubTime", "SeqNum", "CorrelId"},
        repeatable=frozenset({"Topic", "PubOpt"}),
        option_element="PubOpt",
        option_kind=PubOpt,
        valid_options=_mask(
            PubOpt.CorrelAsId,
            PubOpt.RetainPub,
            PubOpt.OtherSubsOnly,
            PubOpt.IsRetainedPub,
            PubOpt.Local,
        ),
        combinations=_no_combinations,
        build=_publish,
    ),
    "RegSub": _REGSUB,
    "DeregSub": _DEREGSUB,
    "ReqUpdate": _Grammar(
        name="ReqUpdate",
        properties=_ADDRESS | {"Filter", "RegOpt", "SubName", "CorrelId"},
        repeatable=frozenset({"RegOpt"}),
        option_element="RegOpt",
        option_kind=RegOpt,
        valid_options=_mask(RegOpt.CorrelAsId, RegOpt.VariableUserId),
        combinations=_no_combinations,
        build=_requpdate,
    ),
    "DeletePub": _Grammar(
        name="DeletePub",
        properties=_ADDRESS | {"DelOpt"},
        repeatable=frozenset({"Topic", "DelOpt"}),
        option_element="DelOpt",
        option_kind=DelOpt,
        valid_options=_mask(DelOpt.Local),
        combinations=_no_combinations,
        build=_deletepub,
    ),
}


def escape_text(text: str) -> str:
    """``text`` as XML element content that always parses back to the same string,
    minus the characters XML 1.0 cannot carry at all (stripped)."""
    if _NOT_XML.search(text):
        text = _NOT_XML.sub("", text)
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\r", "&#13;")


def _element(name: str, value: str) -> str:
    return f"<{name}>{escape_text(value)}</{name}>"


_NAMES = {
    Publish: "Publish",
    RegSub: "RegSub",
    DeregSub: "DeregSub",
    ReqUpdate: "ReqUpdate",
    DeletePub: "DeletePub",
}
_OPTION_ELEMENT = {Publish: "PubOpt", DeletePub: "DelOpt"}


def render(command: Command) -> str:
    """The ``<psc>`` folder for ``command``: what clients send and what the broker
    forwards. Options are written one element per option name, as IBM's samples and
    rfhutil write them; ``folder`` is ignored. ``parse(render(c))`` equals ``c``
    apart from ``folder``."""
    kind = type(command)
    parts = [_element("Command", _NAMES[kind])]
    option_element = _OPTION_ELEMENT.get(kind, "RegOpt")
    parts += [_element(option_element, name) for name in option_names(command.options)]
    topics = (command.topic,) if isinstance(command, ReqUpdate) else command.topics
    parts += [_element("Topic", topic) for topic in topics]
    for name, attribute in _OPTIONAL_TEXT:
        value = getattr(command, attribute, None)
        if value is not None:
            parts.append(_element(name, value))
    correl_id = getattr(command, "correl_id", None)
    if correl_id is not None:
        parts.append(_element("CorrelId", correl_id.hex().upper()))
    return "<psc>" + "".join(parts) + "</psc>"


_OPTIONAL_TEXT = (
    ("SubPoint", "sub_point"),
    ("Filter", "filter"),
    ("QMgrName", "q_mgr_name"),
    ("QName", "q_name"),
    ("SubName", "sub_name"),
    ("SubIdentity", "sub_identity"),
    ("SubUserData", "sub_user_data"),
    ("PubTime", "pub_time"),
    ("SeqNum", "seq_num"),
)
