"""The configuration file of ``broker config export`` and ``broker config import``, as typed
definitions (``docs/configuration.md`` describes every table and key).

A :class:`Configuration` holds one tuple of definitions per table of the file, each sorted by
what names its entries, so that two exports of the same broker are the same text and a diff
of two shows what changed. Reading a file checks all of it before anything is changed: every
unknown key, wrong type, invalid name or topic and duplicate is a :class:`Problem` with its
place (line, table, entry, key), and :class:`InvalidConfiguration` lists them all. Nothing
here reads a database or a clock: ``broker.admin.config_backup`` does, and
``broker.admin.config_changes`` compares two configurations.
"""

from __future__ import annotations

import base64
import binascii
import re
import tomllib
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from functools import cache, partial
from types import NoneType, UnionType
from typing import Any, get_args, get_origin, get_type_hints

from broker.core.authority import AclRule, Permission, PrincipalKind, check_principal
from broker.core.retained import RetainedPublication
from broker.core.subscription import STORED_OPTIONS, Identity, Subscription, SubscriptionKey
from broker.core.topics import check_publish_topic, check_subscribe_topic
from broker.network import links
from broker.protocol import brokerpath, psc, pscr, rfh2
from broker.protocol.options import PubOpt, RegOpt, option_names
from broker.store.mqtt import QUEUE_PREFIX as MQTT_QUEUE_PREFIX
from queues.definition import SETTABLE, QueueDefinition, check_attributes
from queues.errors import MQError
from queues.ids import derived_id, mq_date_time
from queues.message import FORMAT_LENGTH, MQFMT_RF_HEADER_2, Message
from queues.names import RULE, check_qmgr_name, is_valid_name
from queues.reasons import Reason

FORMAT = 1  # of the file; a later format that this release cannot read is refused
SYSTEM_PREFIX = "SYSTEM."
META = "configuration"  # the file's one plain table: what the export holds
MAX_SUB_POINT_LENGTH = 128  # MQ_SUB_POINT_LENGTH
MAX_TEXT_LENGTH = 10240  # MQ_SUB_NAME_LENGTH, MQ_USER_DATA_LENGTH
MAX_MQLONG = 2**31 - 1
MAX_BIGINT = 2**63 - 1
# Characters no value may hold: what XML 1.0 (a <psc> folder) cannot carry, NUL among them,
# which PostgreSQL cannot store either.
_NOT_STORABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_HEX = re.compile(r"(?:[0-9A-Fa-f]{2}){1,24}")
_SCRYPT = re.compile(r"scrypt\$[0-9]+\$[0-9]+\$[0-9]+\$[0-9a-f]+\$[0-9a-f]+")
_BROKER_FOLDERS = frozenset({psc.FOLDER, pscr.FOLDER, brokerpath.FOLDER})
_QUEUE_DEFAULTS = QueueDefinition(name="")
_MESSAGE_DEFAULTS = Message()


# -- the definitions ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """A local queue's attributes, those an administrator sets (not its depth or counters)."""

    name: str
    description: str = _QUEUE_DEFAULTS.description
    max_depth: int = _QUEUE_DEFAULTS.max_depth
    max_msg_length: int = _QUEUE_DEFAULTS.max_msg_length
    backout_threshold: int = _QUEUE_DEFAULTS.backout_threshold
    backout_requeue_q: str = _QUEUE_DEFAULTS.backout_requeue_q
    def_priority: int = _QUEUE_DEFAULTS.def_priority
    def_persistence: int = _QUEUE_DEFAULTS.def_persistence
    put_enabled: bool = _QUEUE_DEFAULTS.put_enabled
    get_enabled: bool = _QUEUE_DEFAULTS.get_enabled
    usage: str = _QUEUE_DEFAULTS.usage
    definition_type: str = _QUEUE_DEFAULTS.definition_type
    index_type: str = _QUEUE_DEFAULTS.index_type

    @classmethod
    def of(cls, definition: QueueDefinition) -> QueueConfig:
        return cls(definition.name, **{name: getattr(definition, name) for name in SETTABLE})

    def attributes(self) -> dict[str, Any]:
        """What ``QueueManager.define_queue`` takes."""
        return {name: getattr(self, name) for name in SETTABLE}


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscriptionConfig:
    """A subscription as registered: who it delivers to, on what, and its options. ``None``
    for ``queue_manager`` is the importing broker's own queue manager."""

    topic: str
    queue: str
    queue_manager: str | None = None
    sub_point: str = ""
    correl_id: str | None = None  # hex
    filter: str | None = None
    user: str
    options: tuple[str, ...] = ()
    sub_name: str | None = None
    sub_user_data: str | None = None
    sub_identities: tuple[str, ...] = ()
    exclusive: str | None = None
    expires_at: int | None = None  # epoch ms

    @classmethod
    def of(cls, sub: Subscription, qmgr: str) -> SubscriptionConfig:
        identity = sub.identity
        return cls(
            topic=sub.key.topic,
            queue=identity.queue,
            queue_manager=None if identity.q_mgr == qmgr else identity.q_mgr,
            sub_point=sub.key.sub_point,
            correl_id=identity.correl_id.hex() if identity.correl_id is not None else None,
            filter=sub.key.filter,
            user=sub.user_id,
            options=tuple(option_names(RegOpt(sub.options & STORED_OPTIONS))),
            sub_name=sub.sub_name,
            sub_user_data=sub.sub_user_data,
            sub_identities=sub.members,
            exclusive=sub.exclusive,
            expires_at=sub.expires_at,
        )

    def key(self, qmgr: str) -> SubscriptionKey:
        correl_id = bytes.fromhex(self.correl_id) if self.correl_id is not None else None
        identity = Identity(self.queue_manager or qmgr, self.queue, correl_id)
        return SubscriptionKey(identity, self.sub_point, self.topic, self.filter)

    def subscription(self, qmgr: str, *, seq: int, created_at: int) -> Subscription:
        """The subscription the broker keeps for this definition."""
        options = 0
        for name in self.options:
            options |= RegOpt[name]
        return Subscription(
            key=self.key(qmgr),
            user_id=self.user,
            options=options,
            created_at=created_at,
            seq=seq,
            sub_name=self.sub_name,
            sub_user_data=self.sub_user_data,
            expires_at=self.expires_at,
            members=self.sub_identities,
            exclusive=self.exclusive,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RetainedConfig:
    """A retained publication: its topic, the MQMD fields its subscribers' copies take, the
    ``<psc>`` fields they see, its other MQRFH2 folders and the body that follows them."""

    topic: str
    sub_point: str = ""
    encoding: int = _MESSAGE_DEFAULTS.encoding
    ccsid: int = _MESSAGE_DEFAULTS.ccsid
    persistence: int = _MESSAGE_DEFAULTS.persistence
    priority: int = _MESSAGE_DEFAULTS.priority
    expiry: int = _MESSAGE_DEFAULTS.expiry  # tenths of a second, counted from the import
    pub_time: str | None = None
    seq_num: str | None = None
    folders: tuple[str, ...] = ()
    body_format: str = ""
    body_encoding: int = _MESSAGE_DEFAULTS.encoding
    body_ccsid: int = _MESSAGE_DEFAULTS.ccsid
    body_base64: str = ""

    @classmethod
    def of(cls, pub: RetainedPublication) -> RetainedConfig:
        body, message = pub.rfh2, pub.message
        return cls(
            topic=pub.topic,
            sub_point=pub.sub_point,
            encoding=message.encoding,
            ccsid=message.ccsid,
            persistence=message.persistence,
            priority=message.priority,
            expiry=message.expiry,
            pub_time=pub.publish.pub_time,
            seq_num=pub.publish.seq_num,
            folders=tuple(f for f in body.folders if rfh2.folder_name(f) not in _BROKER_FOLDERS),
            body_format=body.payload_format.rstrip(),
            body_encoding=body.payload_encoding,
            body_ccsid=body.payload_ccsid,
            body_base64=base64.b64encode(body.payload).decode("ascii"),
        )

    def publication(self, qmgr: str, now: int) -> RetainedPublication:
        """The publication as the broker keeps it, as if it had just been published with
        RetainPub: its ``<psc>`` names its topic, its MsgId derives from what it holds."""
        command = psc.Publish(
            topics=(self.topic,),
            sub_point=self.sub_point or None,
            options=PubOpt.RetainPub,
            pub_time=self.pub_time,
            seq_num=self.seq_num,
        )
        header = rfh2.RFH2Header(
            encoding=self.body_encoding,
            ccsid=self.body_ccsid,
            format=self.body_format.ljust(FORMAT_LENGTH),
            folders=(psc.render(command), *self.folders),
        )
        payload = base64.b64decode(self.body_base64, validate=True)
        body = rfh2.encode(rfh2.RFH2Body((header,), payload), self.encoding)
        date, time = mq_date_time(now)
        message = Message(
            body=body,
            msg_id=derived_id(b"retained", self.sub_point.encode(), self.topic.encode(), body),
            format=MQFMT_RF_HEADER_2,
            encoding=self.encoding,
            ccsid=self.ccsid,
            persistence=self.persistence,
            priority=self.priority,
            expiry=self.expiry,
            put_appl_name=qmgr[:28],
            put_date=date,
            put_time=time,
        )
        decoded = rfh2.decode(body, self.encoding, MQFMT_RF_HEADER_2)
        return RetainedPublication(self.sub_point, self.topic, message, command, decoded, now)


@dataclass(frozen=True, slots=True, kw_only=True)
class AclRuleConfig:
    """Allow or deny a user or group one permission on a topic and below it."""

    principal: str
    kind: str = str(PrincipalKind.USER)
    permission: str
    topic: str
    allow: bool

    @classmethod
    def of(cls, rule: AclRule) -> AclRuleConfig:
        return cls(
            principal=rule.principal,
            kind=str(rule.kind),
            permission=str(rule.permission),
            topic=rule.pattern,
            allow=rule.allow,
        )

    def rule(self) -> AclRule:
        kind, permission = PrincipalKind(self.kind), Permission(self.permission)
        return AclRule(self.principal, kind, self.topic, permission, self.allow)


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """A group of ACL rules and its members, the whole membership."""

    name: str
    members: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NeighbourConfig:
    """A neighbouring broker; ``token`` None leaves the link's secret as it is."""

    name: str
    url: str
    token: str | None = None


@dataclass(frozen=True, slots=True)
class MqttPrincipalConfig:
    """A user MQTT clients log in as, with its salted scrypt password hash."""

    user: str
    password_hash: str


@dataclass(frozen=True, slots=True)
class Problem:
    """What is wrong with a file, and where: its line (when a line scan finds it), table,
    entry (1 for the first ``[[table]]`` of its name), the entry's name and key."""

    message: str
    line: int | None = None
    table: str | None = None
    index: int | None = None
    name: str | None = None
    key: str | None = None

    @property
    def place(self) -> str:
        parts = [f"line {self.line}"] if self.line is not None else []
        entry = " ".join(
            [self.table or "", str(self.index) if self.index else "", f"({self.name})" if self.name else ""]
        )
        parts += [" ".join(entry.split())] if entry.strip() else []
        parts += [self.key] if self.key else []
        return ": ".join(parts)

    def location(self) -> list[str]:
        """Table, entry and key, as an API error's ``loc``."""
        return [str(part) for part in (self.table, self.index, self.key) if part]

    def __str__(self) -> str:
        return f"{self.place}: {self.message}" if self.place else self.message


class InvalidConfiguration(MQError):
    """4005 MQRCCF_ATTR_VALUE_ERROR: a file that cannot be imported; ``problems`` lists every
    reason, each with its place."""

    def __init__(self, problems: list[Problem]) -> None:
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        super().__init__(Reason.MQRCCF_ATTR_VALUE_ERROR, f"{count}: " + "; ".join(map(str, problems)))
        self.problems = problems


# -- the kinds of definition, one per table ---------------------------------------------------


Check = Callable[[Any], Iterator[tuple[str | None, str]]]


@dataclass(frozen=True, slots=True)
class Kind:
    """One table of the file: its definitions' class, what names an entry (``key``, unique in
    the file), how a report names it, and the checks an entry must pass beyond its types."""

    table: str  # its [[table]] in the file
    attribute: str  # its tuple in Configuration
    noun: str  # how a report names one
    cls: type
    key: tuple[str, ...]
    describe: Callable[[Any], str]
    check: Check
    normalise: Callable[[Any, str], Any] = lambda item, qmgr: item  # as the broker of qmgr reads it
    hidden: tuple[str, ...] = ()  # secrets: a report says they change, never what they hold
    kept_if_absent: tuple[str, ...] = ()  # left as they are when the file leaves them out
    prunable: bool = True  # deleted by an import with prune when the file leaves them out

    def key_of(self, item: Any) -> tuple[Any, ...]:
        return tuple(getattr(item, name) for name in self.key)


def _text_problems(item: Any) -> Iterator[tuple[str | None, str]]:
    """Every string of ``item`` must be one the broker can store and put in a ``<psc>``."""
    for f in fields(item):
        value = getattr(item, f.name)
        for text in value if isinstance(value, tuple) else (value,):
            if isinstance(text, str) and _NOT_STORABLE.search(text):
                yield f.name, "holds a control character other than tab, line feed or carriage return"
                break


def _mq_problem(check: Callable[[], object]) -> str | None:
    try:
        check()
    except MQError as exc:
        return exc.detail or exc.reason_name
    return None


def _check_queue(queue: QueueConfig) -> Iterator[tuple[str | None, str]]:
    if not is_valid_name(queue.name):
        yield "name", f"{queue.name!r} is not a queue name: use {RULE}"
    elif queue.name.startswith(SYSTEM_PREFIX):
        yield "name", "a SYSTEM. queue goes in [[system_queue]]"
    yield from _check_attributes(queue)


def _check_system_queue(queue: QueueConfig) -> Iterator[tuple[str | None, str]]:
    if not is_valid_name(queue.name) or not queue.name.startswith(SYSTEM_PREFIX):
        yield "name", f"{queue.name!r} is not the name of a SYSTEM. queue ({RULE})"
    elif queue.name.startswith(MQTT_QUEUE_PREFIX):
        yield "name", "an MQTT session's queue belongs to its session, not to the configuration"
    yield from _check_attributes(queue)


def _check_attributes(queue: QueueConfig) -> Iterator[tuple[str | None, str]]:
    for name, value in queue.attributes().items():
        if problem := _mq_problem(partial(check_attributes, {name: value})):
            yield name, problem
    if queue.definition_type == "tempdyn":
        yield "definition_type", "a temporary dynamic queue lives only while its creator holds it open"


def _check_subscription(sub: SubscriptionConfig) -> Iterator[tuple[str | None, str]]:
    if topic := _mq_problem(partial(_check_topic, sub.topic, wildcards=True)):
        yield "topic", topic
    if not is_valid_name(sub.queue):
        yield "queue", f"{sub.queue!r} is not a queue name: use {RULE}"
    elif sub.queue.startswith(MQTT_QUEUE_PREFIX):
        yield "queue", "an MQTT session's subscriptions belong to its session, not to the configuration"
    if sub.queue_manager is not None and (
        problem := _mq_problem(partial(check_qmgr_name, sub.queue_manager))
    ):
        yield "queue_manager", problem
    yield from _check_length(sub, "sub_point", MAX_SUB_POINT_LENGTH)
    yield from _check_principal(sub, "user")
    unknown = [name for name in sub.options if name not in RegOpt.__members__]
    if unknown:
        yield "options", f"{', '.join(unknown)}: not RegOpt names"
    elif any(RegOpt[name] & ~STORED_OPTIONS for name in sub.options):
        kept = ", ".join(option_names(RegOpt(STORED_OPTIONS)))
        yield "options", f"a subscription keeps only these options: {kept}"
    correl_as_id = "CorrelAsId" in sub.options
    if sub.correl_id is not None and not _HEX.fullmatch(sub.correl_id):
        yield "correl_id", "must be 1 to 24 bytes in hex digits"
    elif (sub.correl_id is not None) != correl_as_id:
        yield "correl_id", "a CorrelId goes with the CorrelAsId option, and only with it"
    for name in ("sub_name", "sub_user_data", "filter"):
        yield from _check_length(sub, name, MAX_TEXT_LENGTH)
    if any(len(identity) > psc.MAX_SUB_IDENTITY_LENGTH for identity in sub.sub_identities):
        yield "sub_identities", f"a SubIdentity has at most {psc.MAX_SUB_IDENTITY_LENGTH} characters"
    if sub.exclusive is not None and sub.exclusive not in sub.sub_identities:
        yield "exclusive", "must be one of sub_identities"
    if sub.expires_at is not None and not 0 <= sub.expires_at <= MAX_BIGINT:
        yield "expires_at", "must be epoch milliseconds (0 or more)"


def _check_retained(pub: RetainedConfig) -> Iterator[tuple[str | None, str]]:
    problems = list(_retained_fields(pub))
    yield from problems
    if not problems and (built := _mq_problem(lambda: pub.publication("QM", 0))):
        yield None, f"the publication cannot be built: {built}"


def _retained_fields(pub: RetainedConfig) -> Iterator[tuple[str | None, str]]:
    if topic := _mq_problem(partial(_check_topic, pub.topic, wildcards=False)):
        yield "topic", topic
    yield from _check_length(pub, "sub_point", MAX_SUB_POINT_LENGTH)
    if pub.persistence not in (0, 1, 2):
        yield "persistence", "must be 0 (not persistent), 1 (persistent) or 2 (as the queue)"
    if not -1 <= pub.priority <= 9:
        yield "priority", "must be -1 (as the queue) to 9"
    if pub.expiry != -1 and not 1 <= pub.expiry <= MAX_MQLONG:
        yield "expiry", "must be -1 (unlimited) or tenths of a second (1 or more)"
    for name in ("encoding", "ccsid", "body_encoding", "body_ccsid"):
        if not -MAX_MQLONG - 1 <= getattr(pub, name) <= MAX_MQLONG:
            yield name, "must fit an MQLONG (32 bits)"
    if len(pub.body_format) > FORMAT_LENGTH or not pub.body_format.isascii():
        yield "body_format", f"an MQ format name has at most {FORMAT_LENGTH} ASCII characters"
    for folder in pub.folders:
        if problem := _mq_problem(partial(_check_folder, folder)):
            yield "folders", problem
    try:
        base64.b64decode(pub.body_base64, validate=True)
    except binascii.Error:
        yield "body_base64", "is not base64"


def _check_topic(topic: str, *, wildcards: bool) -> None:
    """A subscription's topic (``wildcards``) or a publication's, as the broker checks them."""
    psc.check_topics((topic,), wildcards=wildcards)
    (check_subscribe_topic if wildcards else check_publish_topic)(topic)


def _check_folder(folder: str) -> None:
    name = rfh2.folder_name(folder)
    if name in _BROKER_FOLDERS:
        raise MQError(Reason.MQRC_RFH_ERROR, f"the <{name}> folder is the broker's, not the publication's")
    psc.load_folder(folder, name)


def _check_acl_rule(rule: AclRuleConfig) -> Iterator[tuple[str | None, str]]:
    yield from _check_principal(rule, "principal")
    if rule.kind not in PrincipalKind.__members__.values():
        yield "kind", f"must be {' or '.join(PrincipalKind)}"
    if rule.permission not in Permission.__members__.values():
        yield "permission", f"must be {' or '.join(Permission)}"
    if problem := _mq_problem(lambda: check_subscribe_topic(rule.topic)):
        yield "topic", problem


def _check_group(group: GroupConfig) -> Iterator[tuple[str | None, str]]:
    yield from _check_principal(group, "name")
    for member in group.members:
        if problem := _mq_problem(partial(check_principal, member)):
            yield "members", problem
    if not group.members:
        yield "members", "a group is its members: list one at least"
    twice = sorted(member for member, count in Counter(group.members).items() if count > 1)
    if twice:
        yield "members", f"listed twice: {', '.join(twice)}"


def _check_neighbour(neighbour: NeighbourConfig) -> Iterator[tuple[str | None, str]]:
    if problem := _mq_problem(lambda: check_qmgr_name(neighbour.name)):
        yield "name", problem
    if len(neighbour.url) > links.MAX_URL_LENGTH or not re.fullmatch(links.URL_PATTERN, neighbour.url):
        yield "url", "must be an http(s) URL with a host name or IP address (and an optional port and path)"
    if neighbour.token is not None and (problem := _mq_problem(partial(links.check_token, neighbour.token))):
        yield "token", problem


def _check_mqtt_principal(principal: MqttPrincipalConfig) -> Iterator[tuple[str | None, str]]:
    yield from _check_principal(principal, "user")
    if not _SCRYPT.fullmatch(principal.password_hash):
        yield "password_hash", "must be a hash as the broker stores it: scrypt$N$r$p$salt$hash"


def _check_principal(item: Any, name: str) -> Iterator[tuple[str | None, str]]:
    if problem := _mq_problem(lambda: check_principal(getattr(item, name))):
        yield name, problem


def _check_length(item: Any, name: str, limit: int) -> Iterator[tuple[str | None, str]]:
    value = getattr(item, name)
    if value is not None and len(value) > limit:
        yield name, f"has at most {limit} characters"


def _normal_subscription(sub: SubscriptionConfig, qmgr: str) -> SubscriptionConfig:
    """Hex digits in lower case, the options in bit order, and no queue manager for the one
    reading the file, as the broker reads them back."""
    bits = RegOpt(0)
    for name in sub.options:
        bits |= RegOpt[name]
    correl_id = sub.correl_id.lower() if sub.correl_id is not None else None
    queue_manager = None if sub.queue_manager == qmgr else sub.queue_manager
    return replace(sub, queue_manager=queue_manager, correl_id=correl_id, options=tuple(option_names(bits)))


def _normal_group(group: GroupConfig, _: str) -> GroupConfig:
    return GroupConfig(group.name, tuple(sorted(group.members)))


def _normal_neighbour(neighbour: NeighbourConfig, _: str) -> NeighbourConfig:
    """A link's URL is kept without a trailing slash."""
    return NeighbourConfig(neighbour.name, neighbour.url.rstrip("/"), neighbour.token)


def _describe_subscription(sub: SubscriptionConfig) -> str:
    text = f"{sub.topic} -> {sub.queue}"
    text += f" at {sub.queue_manager}" if sub.queue_manager else ""
    text += f" (sub point {sub.sub_point})" if sub.sub_point else ""
    text += f" (correl_id {sub.correl_id})" if sub.correl_id else ""
    return text + (f" (filter {sub.filter})" if sub.filter is not None else "")


KINDS: tuple[Kind, ...] = (
    Kind("queue", "queues", "queue", QueueConfig, ("name",), lambda q: q.name, _check_queue),
    Kind(
        "system_queue",
        "system_queues",
        "system queue",
        QueueConfig,
        ("name",),
        lambda q: q.name,
        _check_system_queue,
        prunable=False,
    ),
    Kind(
        "subscription",
        "subscriptions",
        "subscription",
        SubscriptionConfig,
        ("queue_manager", "queue", "correl_id", "sub_point", "topic", "filter"),
        _describe_subscription,
        _check_subscription,
        normalise=_normal_subscription,
    ),
    Kind(
        "retained",
        "retained",
        "retained publication",
        RetainedConfig,
        ("sub_point", "topic"),
        lambda p: p.topic + (f" (sub point {p.sub_point})" if p.sub_point else ""),
        _check_retained,
    ),
    Kind(
        "acl_rule",
        "acl_rules",
        "acl rule",
        AclRuleConfig,
        ("principal", "kind", "permission", "topic"),
        lambda r: f"{r.kind} {r.principal} {r.permission} {r.topic}",
        _check_acl_rule,
    ),
    Kind("group", "groups", "group", GroupConfig, ("name",), lambda g: g.name, _check_group, _normal_group),
    Kind(
        "neighbour",
        "neighbours",
        "neighbour",
        NeighbourConfig,
        ("name",),
        lambda n: n.name,
        _check_neighbour,
        _normal_neighbour,
        hidden=("token",),
        kept_if_absent=("token",),
    ),
    Kind(
        "mqtt_principal",
        "mqtt_principals",
        "mqtt principal",
        MqttPrincipalConfig,
        ("user",),
        lambda p: p.user,
        _check_mqtt_principal,
        hidden=("password_hash",),
    ),
)
KIND = {kind.table: kind for kind in KINDS}


def sort_key(kind: Kind, item: Any) -> tuple[tuple[int, Any], ...]:
    """Entries in the order of what names them (a missing value first)."""
    return tuple((0, "") if value is None else (1, value) for value in kind.key_of(item))


# -- the whole configuration --------------------------------------------------------------------

Place = tuple[str, tuple[Any, ...]]  # a kind's table and an entry's key


@dataclass(frozen=True, slots=True)
class Configuration:
    """Everything the file holds, each kind sorted by its key. ``retained`` None: the file
    leaves retained publications out (an import leaves them as they are). ``places``: where
    each entry of a file read was, for problems found when it is compared with a broker."""

    queue_manager: str = ""
    queues: tuple[QueueConfig, ...] = ()
    system_queues: tuple[QueueConfig, ...] = ()
    subscriptions: tuple[SubscriptionConfig, ...] = ()
    retained: tuple[RetainedConfig, ...] | None = None
    acl_rules: tuple[AclRuleConfig, ...] = ()
    groups: tuple[GroupConfig, ...] = ()
    neighbours: tuple[NeighbourConfig, ...] = ()
    mqtt_principals: tuple[MqttPrincipalConfig, ...] = ()
    places: Mapping[Place, Problem] = field(default_factory=dict, compare=False, repr=False)

    def items(self, kind: Kind) -> tuple[Any, ...]:
        found: tuple[Any, ...] | None = getattr(self, kind.attribute)
        return found or ()

    def place(self, kind: Kind, item: Any, message: str) -> Problem:
        """A problem with ``item``, at its place in the file it was read from."""
        where = self.places.get((kind.table, kind.key_of(item)))
        if where is None:
            return Problem(message, table=kind.table, name=kind.describe(item))
        return Problem(message, where.line, where.table, where.index, where.name)


def configuration(queue_manager: str, **kinds: Any) -> Configuration:
    """A configuration of these definitions (keyword: a kind's attribute), each kind sorted."""
    ordered: dict[str, Any] = {
        kind.attribute: tuple(sorted(kinds[kind.attribute], key=partial(sort_key, kind)))
        for kind in KINDS
        if kinds.get(kind.attribute) is not None
    }
    return replace(Configuration(queue_manager), **ordered)


def document(config: Configuration, *, secrets: bool) -> dict[str, Any]:
    """The file's content: the ``[configuration]`` table, then one array of tables per kind,
    each entry's keys in the order of its definition, values left out where they are None."""
    meta = {"format": FORMAT, "queue_manager": config.queue_manager}
    found: dict[str, Any] = {META: {**meta, "retained": config.retained is not None, "secrets": secrets}}
    for kind in KINDS:
        entries = [
            {f.name: value for f in fields(item) if (value := getattr(item, f.name)) is not None}
            for item in config.items(kind)
        ]
        if entries:
            found[kind.table] = entries
    return found


# -- reading a file ----------------------------------------------------------------------------

_ARRAY_HEADER = re.compile(r"\s*\[\[\s*([A-Za-z0-9_-]+)\s*\]\]\s*(?:#.*)?")
_TABLE_HEADER = re.compile(r"\s*\[\s*([A-Za-z0-9_-]+)\s*\]\s*(?:#.*)?")
_KEY = re.compile(r"\s*([A-Za-z0-9_-]+)\s*=")


class _Lines:
    """Where each table and key of a file starts, found by scanning its lines (tomllib gives
    values only): a problem names the line to look at."""

    def __init__(self, text: str) -> None:
        self._tables: dict[tuple[str, int], int] = {}
        self._keys: dict[tuple[str, int, str], int] = {}
        counts: Counter[str] = Counter()
        section = ("", 0)
        for number, line in enumerate(text.splitlines(), 1):
            if match := _ARRAY_HEADER.fullmatch(line):
                counts[match.group(1)] += 1
                section = (match.group(1), counts[match.group(1)])
                self._tables.setdefault(section, number)
            elif match := _TABLE_HEADER.fullmatch(line):
                section = (match.group(1), 0)
                self._tables.setdefault(section, number)
            elif match := _KEY.match(line):
                self._keys.setdefault((*section, match.group(1)), number)

    def line(self, table: str, index: int, key: str | None) -> int | None:
        found = self._keys.get((table, index, key)) if key is not None else None
        return found if found is not None else self._tables.get((table, index))


def read(text: str, qmgr: str = "") -> Configuration:
    """The configuration ``text`` holds, as the broker of queue manager ``qmgr`` reads it;
    :class:`InvalidConfiguration` with every problem of it otherwise."""
    try:
        parsed = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidConfiguration([Problem(f"not TOML: {exc}")]) from None
    reader = _Reader(_Lines(text), qmgr)
    config = reader.configuration(parsed)
    if reader.problems:
        raise InvalidConfiguration(sorted(reader.problems, key=lambda p: p.line or 0))
    return config


class _Reader:
    def __init__(self, lines: _Lines, qmgr: str) -> None:
        self.lines = lines
        self.qmgr = qmgr
        self.problems: list[Problem] = []

    def problem(
        self, message: str, table: str, index: int = 0, key: str | None = None, name: str | None = None
    ) -> None:
        line = self.lines.line(table, index, key)
        self.problems.append(Problem(message, line, table or None, index or None, name, key))

    def configuration(self, parsed: dict[str, Any]) -> Configuration:
        for key in sorted(parsed.keys() - {META, *KIND}):
            message = f"unknown table or key {key!r} (the tables are {', '.join([META, *KIND])})"
            line = (
                self.lines.line("", 0, key) or self.lines.line(key, 0, None) or self.lines.line(key, 1, None)
            )
            self.problems.append(Problem(message, line, key))
        meta = self.meta(parsed.get(META, {}))
        kinds: dict[str, Any] = {}
        places: dict[Place, Problem] = {}
        for kind in KINDS:
            if kind.table in parsed:
                kinds[kind.attribute] = self.entries(kind, parsed[kind.table], places)
        retained = meta.get("retained", "retained" in kinds)
        if retained:
            kinds.setdefault("retained", [])
        elif "retained" in kinds:
            message = "[[retained]] tables in a file whose [configuration] says retained = false"
            self.problem(message, "retained", 1)
        return replace(configuration(meta.get("queue_manager", ""), **kinds), places=places)

    def meta(self, table: Any) -> dict[str, Any]:
        if not isinstance(table, dict):
            self.problem("must be a table: write [configuration]", META)
            return {}
        types = {"format": int, "queue_manager": str, "retained": bool, "secrets": bool}
        for key, value in table.items():
            if key not in types:
                self.problem(f"unknown key (the keys are {', '.join(types)})", META, 0, key)
            elif type(value) is not types[key]:
                self.problem(f"must be {_TYPE_NAMES[types[key]]}", META, 0, key)
            elif key == "format" and value != FORMAT:
                self.problem(f"this broker reads format {FORMAT}, not {value}", META, 0, key)
        return {key: value for key, value in table.items() if key in types and type(value) is types[key]}

    def entries(self, kind: Kind, value: Any, places: dict[Place, Problem]) -> list[Any]:
        if not isinstance(value, list):
            self.problem(f"must be an array of tables: write [[{kind.table}]]", kind.table)
            return []
        found: list[Any] = []
        for index, entry in enumerate(value, 1):
            item = self.entry(kind, index, entry)
            if item is None:
                continue
            key = kind.key_of(item)
            line = self.lines.line(kind.table, index, None)
            where = Problem("", line, kind.table, index, kind.describe(item))
            if (kind.table, key) in places:
                first = places[(kind.table, key)]
                self.problem(
                    f"duplicate of {first.place}",
                    kind.table,
                    index,
                    name=kind.describe(item),
                )
                continue
            places[(kind.table, key)] = where
            found.append(item)
        return found

    def entry(self, kind: Kind, index: int, entry: Any) -> Any:
        """The entry's definition, or None after its problems. The checks of its values run
        even when another key is wrong or missing, so that one reading lists every problem."""
        if not isinstance(entry, dict):
            self.problem("must be a table", kind.table, index)
            return None
        hints = _hints(kind.cls)
        found: list[tuple[str | None, str]] = [
            (key, f"unknown key (the keys are {', '.join(hints)})")
            for key in sorted(entry.keys() - hints.keys())
        ]
        values: dict[str, Any] = {}
        for f in fields(kind.cls):
            typed = _typed(entry[f.name], hints[f.name]) if f.name in entry else _ABSENT
            if typed is _WRONG:
                found.append((f.name, f"must be {_type_name(hints[f.name])}"))
            elif typed is _ABSENT and f.default is MISSING:
                found.append((f.name, "is missing"))
            if typed is _WRONG or typed is _ABSENT:
                if f.default is MISSING:
                    values[f.name] = _placeholder(hints[f.name])
                continue
            values[f.name] = typed
        wrong = {key for key, _ in found}
        item = kind.cls(**values)
        checks = list(_text_problems(item)) or list(kind.check(item))
        found += [(key, message) for key, message in checks if key not in wrong and (key or not wrong)]
        name = kind.describe(item) if not wrong.intersection(kind.key) else None
        for key, message in found:
            self.problem(message, kind.table, index, key, name)
        return kind.normalise(item, self.qmgr) if not found else None


_ABSENT = object()


def _placeholder(hint: Any) -> Any:
    """A value of the field's type for one that is missing or wrong, so that the other
    values can still be checked."""
    if isinstance(hint, UnionType):
        return None
    return () if get_origin(hint) is tuple else hint()


_WRONG = object()
_TYPE_NAMES = {str: "a string", int: "an integer", bool: "true or false"}


@cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def _typed(value: Any, hint: Any) -> Any:
    """``value`` as the field's type wants it (an array as a tuple), or ``_WRONG``."""
    if isinstance(hint, UnionType):  # X | None: None is what an absent key means
        (hint,) = (arg for arg in get_args(hint) if arg is not NoneType)
    if get_origin(hint) is tuple:
        ok = isinstance(value, list) and all(type(item) is str for item in value)
        return tuple(value) if ok else _WRONG
    return value if type(value) is hint else _WRONG


def _type_name(hint: Any) -> str:
    if isinstance(hint, UnionType):
        (hint,) = (arg for arg in get_args(hint) if arg is not NoneType)
    if get_origin(hint) is tuple:
        return "an array of strings"
    return _TYPE_NAMES[hint]
