"""Request and response bodies of the admin API, with the limits that keep bad input out.

Input is validated here, before it reaches the queue manager, SQL or a ``<psc>``
folder: queue names by MQ's rules, topics by the topic rules and XML's character
set (a NUL would otherwise reach PostgreSQL, and a control character would make
the broker dead-letter the command), user ids as MQMD UserIdentifiers (12
printable characters), integers within their column types, and every string and
list bounded. What passes here can still be refused by the queue manager or the
broker; those refusals come back as problems carrying the MQ reason.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    StrictBool,
    StringConstraints,
    WithJsonSchema,
    model_validator,
)

from broker.admin.accounts import MAX_LIFETIME as MAX_TOKEN_LIFETIME
from broker.core.system import QueueProblem
from broker.core.topics import check_subscribe_topic
from broker.protocol.options import RegOpt
from broker.protocol.psc import MAX_FOLDER_BYTES, MAX_SUB_IDENTITY_LENGTH, MAX_TOPIC_LENGTH, MAX_TOPICS
from broker.service.health import Outage, TaskReport
from queues.definition import DEFINITION_TYPES, INDEX_TYPES, MAX_MAX_DEPTH, MAX_MAX_MSG_LENGTH, USAGES
from queues.message import FORMAT_LENGTH, USER_ID_LENGTH
from queues.names import NAME_PATTERN

MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_LIMIT = 1000
DEFAULT_LIMIT = 100
MAX_ID = 2**63 - 1
MAX_INT32 = 2**31 - 1
MAX_SUB_POINT_LENGTH = 128  # MQ_SUB_POINT_LENGTH
MAX_TEXT_LENGTH = 10240  # MQ_SUB_NAME_LENGTH, MQ_USER_DATA_LENGTH

# Characters XML 1.0 (and so a <psc> folder) can carry; also keeps NUL away from PostgreSQL.
XML_TEXT = r"^[^\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]*$"
QUEUE_NAME = NAME_PATTERN
QUEUE_NAME_OR_NONE = f"^$|{NAME_PATTERN}"
QUEUE_PATTERN = r"^[A-Za-z0-9._/%*?]{1,48}$"
USER_ID = rf"^[!-~]{{1,{USER_ID_LENGTH}}}$"
PRINCIPAL = r"^[!-~]{1,64}$"
HEX_ID = r"^([0-9A-Fa-f]{2}){1,24}$"
MSG_ID = r"^[0-9A-Fa-f]{48}$"
CURSOR = r"^-?[0-9]{1,2}:[0-9]{1,18}$"  # 18 digits stay within a BIGINT
FORMAT = rf"^[ -~]{{0,{FORMAT_LENGTH}}}$"
BASE64 = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


def _topic(value: str) -> str:
    check_subscribe_topic(value)
    return value


QueueName = Annotated[str, StringConstraints(pattern=QUEUE_NAME), Field(examples=["SCORES"])]
Topic = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_TOPIC_LENGTH, pattern=XML_TEXT),
    AfterValidator(_topic),
    Field(examples=["Sport/Soccer/#"]),
]
SubPoint = Annotated[str, StringConstraints(max_length=MAX_SUB_POINT_LENGTH, pattern=XML_TEXT)]
UserId = Annotated[str, StringConstraints(pattern=USER_ID), Field(examples=["alice"])]
HexId = Annotated[str, StringConstraints(pattern=HEX_ID), Field(examples=["414d5120514d31"])]
BoundedText = Annotated[str, StringConstraints(max_length=MAX_TEXT_LENGTH, pattern=XML_TEXT)]


Int32 = Annotated[int, Field(ge=0, le=MAX_INT32)]
Flag = StrictBool  # a JSON true or false, nothing that merely converts to one


def _expiry(value: int) -> int:
    if value == 0:
        raise ValueError("an expiry is -1 (unlimited) or a positive number of tenths of a second")
    return value


# MQMD Expiry as MQ takes it: -1, or 1 and more tenths of a second (0 is MQRC_EXPIRY_ERROR).
Expiry = Annotated[
    int,
    Field(ge=-1, le=MAX_INT32),
    AfterValidator(_expiry),
    WithJsonSchema({"type": "integer", "anyOf": [{"const": -1}, {"minimum": 1, "maximum": MAX_INT32}]}),
]


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_NOT_AN_INTEGER = object()  # what pydantic then refuses as "Input should be a valid integer"


def _takes_int(annotation: Any) -> bool:
    return annotation is int or int in get_args(annotation)


class Strict(BaseModel):
    """Request bodies: unknown fields are errors, so a misspelt option is never silently ignored.
    Values must have the JSON type the schema gives: a flag is ``true`` or ``false``
    (:data:`Flag`), never ``0``; an integer is a JSON number without a fraction (``5`` or ``5.0``,
    as JSON Schema says), never ``false`` or ``"5"``, which Python would turn into one."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _json_integers(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        wrong = {
            key: _NOT_AN_INTEGER
            for name, field in cls.model_fields.items()
            if _takes_int(field.annotation) and isinstance(data.get(key := field.alias or name), bool | str)
        }
        return {**data, **wrong} if wrong else data


# -- problems ----------------------------------------------------------------------------------


class FieldError(BaseModel):
    loc: list[str]
    msg: str
    type: str


class Problem(BaseModel):
    """RFC 9457 problem details, with the MQ reason when there is one."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "type": "/problems/mq/MQRC_UNKNOWN_OBJECT_NAME",
                    "title": "MQRC_UNKNOWN_OBJECT_NAME (2085)",
                    "status": 404,
                    "detail": "queue 'SCORES' is not defined",
                    "instance": "/api/v1/queues/SCORES",
                    "reason": 2085,
                    "reason_name": "MQRC_UNKNOWN_OBJECT_NAME",
                }
            ]
        }
    )

    type: str
    title: str
    status: int
    detail: str
    instance: str
    reason: int | None = None
    reason_name: str | None = None
    topic: str | None = None
    parameter: str | None = None
    errors: list[FieldError] | None = None


# -- health ------------------------------------------------------------------------------------


class Health(BaseModel):
    status: Literal["ok"]


class QueueProblemOut(BaseModel):
    """One of the broker's own queues that cannot do its part, and what that stops."""

    queue: str
    reason: int
    reason_name: str
    effect: str

    @classmethod
    def of(cls, problem: QueueProblem) -> QueueProblemOut:
        return cls.model_validate(problem.fields())


class DatabaseOutageOut(BaseModel):
    """The database cannot be used now: the process's background work waits for it."""

    error: str = Field(description="the last error met")
    since: float | None = Field(
        None, description="seconds since the epoch; null when only this request found it unavailable"
    )
    tasks: list[str] = Field(description="the background tasks of this process waiting for it")

    @classmethod
    def of(cls, outage: Outage) -> DatabaseOutageOut:
        return cls(error=outage.error, since=outage.since, tasks=list(outage.tasks))


class TaskOut(BaseModel):
    """A supervised background task of this process (the routing loop, the MQTT gateway...)."""

    name: str
    state: Literal["running", "waiting for the database", "failing"]
    alive: bool = Field(description="false: its thread or task has ended, so the process is not ready")
    failures: int = Field(description="failures in a row for a reason other than the database")

    @classmethod
    def of(cls, task: TaskReport) -> TaskOut:
        return cls.model_validate(
            {"name": task.name, "state": task.state, "alive": task.alive, "failures": task.failures}
        )


class Readiness(BaseModel):
    status: Literal["ready", "degraded"] = Field(
        description="degraded: this process serves, but the database is unavailable (its work waits"
        " and resumes when it answers) or some of the broker's own queues cannot be used (the broker"
        " routes the rest meanwhile): see database and problems"
    )
    revision: str | None = Field(description="the database schema's; null while the database is unavailable")
    problems: list[QueueProblemOut]
    database: DatabaseOutageOut | None = Field(None, description="set while the database is unavailable")
    tasks: list[TaskOut] = Field(default_factory=list, description="this process's background tasks")


# -- queues ------------------------------------------------------------------------------------


class QueueAttributes(Strict):
    """Attributes to set (DEFINE/ALTER QLOCAL); those left out keep their value or MQ's default."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"max_depth": 100000, "backout_threshold": 3}]}
    )

    description: str | None = Field(None, max_length=64, pattern=XML_TEXT)
    max_depth: int | None = Field(None, ge=0, le=MAX_MAX_DEPTH)
    max_msg_length: int | None = Field(None, ge=0, le=MAX_MAX_MSG_LENGTH)
    backout_threshold: int | None = Field(None, ge=0, le=MAX_MAX_DEPTH)
    backout_requeue_q: str | None = Field(None, pattern=QUEUE_NAME_OR_NONE)
    def_priority: int | None = Field(None, ge=0, le=9)
    def_persistence: int | None = Field(None, ge=0, le=1)
    put_enabled: Flag | None = None
    get_enabled: Flag | None = None
    # Literal of the tuples the queue manager checks (one list, not a copy): pydantic validates
    # them, mypy wants literals written out.
    usage: Literal[USAGES] | None = None  # type: ignore[valid-type]
    definition_type: Literal[DEFINITION_TYPES] | None = None  # type: ignore[valid-type]
    index_type: Literal[INDEX_TYPES] | None = Field(  # type: ignore[valid-type]
        None, description="INDXTYPE: correlid indexes gets by CorrelId (reply queues); none (default)"
    )

    def changes(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True, exclude={"name", "replace"})


class QueueCreate(QueueAttributes):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"name": "SCORES", "max_depth": 100000, "description": "scores"}]},
    )

    name: QueueName
    replace: Flag = Field(False, description="alter the queue if it exists (MQ's REPLACE)")


class Queue(BaseModel):
    name: str
    description: str
    max_depth: int
    max_msg_length: int
    backout_threshold: int
    backout_requeue_q: str
    def_priority: int
    def_persistence: int
    put_enabled: bool
    get_enabled: bool
    usage: str
    definition_type: str
    index_type: str
    depth: int
    put_count: int = Field(
        description="messages put to the queue since it was defined (MQ's MSGSIN, committed, never reset):"
        " two readings a known time apart give its put rate"
    )
    get_count: int = Field(description="messages gotten from the queue since it was defined (MSGSOUT)")
    created_at: int = Field(description="milliseconds since the epoch")
    altered_at: int


class QueuePage(BaseModel):
    items: list[Queue]
    total: int
    offset: int
    limit: int


class Purged(BaseModel):
    queue: str
    purged: int
    deleted: bool


# -- messages ----------------------------------------------------------------------------------


class MessageDescriptor(BaseModel):
    """MQMD fields as amqsbcg shows them: ids in hex, Format unpadded."""

    msg_id: str
    correl_id: str
    format: str
    encoding: int
    ccsid: int
    msg_type: int
    report: int
    reply_to_q: str
    reply_to_qmgr: str
    user_id: str
    persistence: int
    priority: int
    expiry: int
    put_appl_type: int
    put_appl_name: str
    put_date: str
    put_time: str
    backout_count: int


class MessageOut(MessageDescriptor):
    body_length: int
    body_text: str | None = Field(description="the body, when it is printable UTF-8")
    body_base64: str


class BrowsedMessage(MessageOut):
    cursor: str = Field(description="pass as ?after= to continue the browse after this message")
    put_at: int


class BrowsePage(BaseModel):
    items: list[BrowsedMessage]
    next_after: str | None = Field(description="the cursor of the next page; null at the end")


class MessageIn(Strict):
    """A message to put: the body as text (UTF-8) or base64, and MQMD fields."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"body_text": "hello", "priority": 5, "correl_id": "0102"}],
            # one body or none, never both
            "not": {
                "properties": {"body_text": {"type": "string"}, "body_base64": {"type": "string"}},
                "required": ["body_text", "body_base64"],
            },
        },
    )

    body_text: str | None = Field(None, description="the body as text, put in UTF-8")
    body_base64: str | None = Field(None, pattern=BASE64, description="the body as base64")
    format: str | None = Field(None, pattern=FORMAT, description="MQMD Format (default MQSTR for text)")
    correl_id: HexId | None = None
    msg_id: HexId | None = Field(None, description="default: generated by the queue manager")
    msg_type: int = Field(8, ge=1, le=999_999_999, description="1 request, 2 reply, 4 report, 8 datagram")
    priority: int = Field(-1, ge=-1, le=9, description="-1: the queue's default")
    persistence: int = Field(2, ge=0, le=2, description="0 no, 1 yes, 2 as the queue's default")
    expiry: Expiry = Field(-1, description="tenths of a second; -1 unlimited")
    report: Int32 = 0
    encoding: Int32 = 546
    ccsid: int = Field(1208, ge=1, le=65535)
    reply_to_q: str = Field("", pattern=QUEUE_NAME_OR_NONE)
    reply_to_qmgr: str = Field("", pattern=QUEUE_NAME_OR_NONE)
    user_id: UserId | None = Field(None, description="default: the token's principal")

    @model_validator(mode="after")
    def _one_body(self) -> MessageIn:
        if self.body_text is not None and self.body_base64 is not None:
            raise ValueError("give body_text or body_base64, not both")
        if self.body_text is not None and not _encodable(self.body_text):
            raise ValueError("body_text holds a lone surrogate, which no UTF-8 text can")
        return self

    def body(self) -> bytes:
        if self.body_base64 is not None:
            return base64.b64decode(self.body_base64, validate=True)
        return (self.body_text or "").encode("utf-8")


class PutResult(BaseModel):
    queue: str
    msg_id: str


class DeadLetterHeader(BaseModel):
    """The MQDLH: why the message is on the dead-letter queue and where it was going."""

    reason: int
    reason_name: str
    dest_q_name: str
    dest_q_mgr_name: str
    format: str = Field(description="Format of the original data")
    encoding: int
    ccsid: int
    put_appl_type: int
    put_appl_name: str
    put_date: str
    put_time: str


class DeadLetter(BrowsedMessage):
    dead_letter: DeadLetterHeader | None = Field(description="null when the body holds no MQDLH")
    data_text: str | None = Field(description="the original data, when it is printable UTF-8")
    data_base64: str | None = Field(description="the original data after the MQDLH")


class DeadLetterPage(BaseModel):
    items: list[DeadLetter]
    next_after: str | None


class Retried(BaseModel):
    msg_id: str
    queue: str
    reason: int = Field(description="why it had been dead-lettered")
    reason_name: str


# -- subscriptions -----------------------------------------------------------------------------

PERSISTENCE_OPTIONS: dict[str, RegOpt] = {
    "as-publisher": RegOpt.PersAsPub,
    "as-queue": RegOpt.PersAsQueue,
    "persistent": RegOpt.Pers,
    "non-persistent": RegOpt.NonPers,
}
REGISTRATION_OPTIONS: dict[str, RegOpt] = {
    "local": RegOpt.Local,
    "new_pubs_only": RegOpt.NewPubsOnly,
    "pub_on_req_only": RegOpt.PubOnReqOnly,
    "inform_if_retained": RegOpt.InformIfRet,
    "dups_ok": RegOpt.DupsOK,
    "add_name": RegOpt.AddName,
    "no_alter": RegOpt.NoAlter,
    "full_response": RegOpt.FullResp,
    "join_shared": RegOpt.JoinShared,
    "join_exclusive": RegOpt.JoinExcl,
    "variable_user_id": RegOpt.VariableUserId,
}


class SubscriptionCreate(Strict):
    """A RegSub sent to the broker on the caller's behalf: the CLI's ``broker subscribe`` options."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"topics": ["Sport/Soccer/#"], "queue": "SCORES", "inform_if_retained": True}]
        },
    )

    topics: list[Topic] = Field(min_length=1, max_length=MAX_TOPICS)
    queue: QueueName
    qmgr: QueueName | None = Field(None, description="subscriber queue manager (default: this one)")
    sub_point: SubPoint | None = None
    sub_name: BoundedText | None = Field(None, min_length=1)
    sub_identity: str | None = Field(None, min_length=1, max_length=MAX_SUB_IDENTITY_LENGTH, pattern=XML_TEXT)
    sub_user_data: BoundedText | None = None
    correl_id: str | None = Field(None, pattern=MSG_ID, description="CorrelId for CorrelAsId (48 hex)")
    persistence: Literal["as-publisher", "as-queue", "persistent", "non-persistent"] | None = None
    expiry: Expiry = Field(-1, description="lifetime in tenths of a second; -1 none")
    user_id: UserId | None = Field(None, description="act as this user (default: the token's principal)")
    local: Flag = False
    new_pubs_only: Flag = False
    pub_on_req_only: Flag = False
    inform_if_retained: Flag = False
    dups_ok: Flag = False
    add_name: Flag = False
    no_alter: Flag = False
    full_response: Flag = False
    join_shared: Flag = False
    join_exclusive: Flag = False
    variable_user_id: Flag = False

    def options(self) -> RegOpt:
        options = RegOpt(0)
        for name, option in REGISTRATION_OPTIONS.items():
            if getattr(self, name):
                options |= option
        if self.persistence is not None:
            options |= PERSISTENCE_OPTIONS[self.persistence]
        if self.correl_id is not None:
            options |= RegOpt.CorrelAsId
        return options


class SubscriptionOut(BaseModel):
    id: int
    topic: str
    sub_point: str
    queue: str
    qmgr: str
    correl_id: str | None
    user_id: str
    options: list[str]
    sub_name: str | None
    sub_user_data: str | None
    expires_at: int | None
    temporary: bool
    members: list[str]
    origin: str | None
    created_at: int


class SubscriptionPage(BaseModel):
    items: list[SubscriptionOut]
    next_after: int | None = Field(description="pass as ?after= for the next page; null at the end")


class ResponseItem(BaseModel):
    """One ``<Response>`` of the broker's ``<pscr>``."""

    reason: int
    reason_name: str
    topic: str | None
    parameter: str | None


class Registered(BaseModel):
    completion: Literal["ok", "warning"]
    subscriptions: list[SubscriptionOut]
    warnings: list[ResponseItem] = Field(description="topics the broker refused or warned about")


# -- retained publications ---------------------------------------------------------------------


class MqttSession(BaseModel):
    """An MQTT client's stored session (``since``: when it last connected, epoch ms;
    ``node``: the node of the MQTT cluster its client is connected to, "" when offline;
    ``offline_since``: when its client went, 0 while connected; ``dropped``: messages
    dropped from its queue over the ``mqtt_max_queued`` limit; ``refused``: its client's
    publications and subscriptions the broker's authority refused; ``keepalive``: seconds, as
    its last CONNECT asked; ``bytes_in`` and ``bytes_out``: of its current or last connection,
    written by its listener every 5 seconds)."""

    client_id: str
    user: str
    address: str
    since: int
    protocol_version: str
    clean_session: bool
    connected: bool
    node: str
    in_flight: int
    queued: int
    queue: str
    offline_since: int
    dropped: int
    refused: int
    keepalive: int
    bytes_in: int
    bytes_out: int
    session_expiry: int | None = Field(
        None, description="MQTT 5.0: seconds the session outlives its connection (4294967295: never)"
    )
    receive_maximum: int | None = Field(None, description="MQTT 5.0: as its client's CONNECT gave it")
    topic_alias_maximum: int | None = Field(None, description="MQTT 5.0: as its client's CONNECT gave it")


class MqttNode(BaseModel):
    """A node of the MQTT cluster (a ``broker serve --mqtt``, one per machine): ``state`` is
    ``alive``, ``silent`` (no heartbeat for ``node_timeout`` by this server's clock, not yet
    declared dead) or ``dead`` (declared dead, its sessions released); ``clients``: connected
    at its last heartbeat; ``processes``: its live listener processes; times in epoch ms."""

    name: str
    state: Literal["alive", "silent", "dead"]
    clients: int
    processes: int
    last_heartbeat: int
    started_at: int
    address: str


class RetainedSummary(BaseModel):
    id: int
    sub_point: str
    topic: str
    retained_at: int
    expires_at: int | None
    body_length: int
    body_text: str | None


class RetainedPage(BaseModel):
    items: list[RetainedSummary]
    next_after: int | None


class RetainedDetail(RetainedSummary):
    topics: list[str] = Field(description="every topic of the retained Publish")
    pub_time: str | None
    seq_num: str | None
    folders: list[str] = Field(description="the publisher's other MQRFH2 folders")
    body_base64: str
    mqmd: MessageDescriptor


# -- ACLs --------------------------------------------------------------------------------------


class RuleIn(Strict):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"principal": "alice", "topic": "Sport/Tennis", "permission": "publish", "allow": False}
            ]
        },
    )

    principal: UserId = Field(description="a user or group name: at most 12 characters, as a UserIdentifier")
    kind: Literal["user", "group"] = "user"
    topic: Topic
    permission: Literal["publish", "subscribe"]
    allow: Flag


class Rule(BaseModel):
    id: int | None
    principal: str
    kind: str
    topic: str
    permission: str
    allow: bool


class RulePage(BaseModel):
    items: list[Rule]
    total: int
    offset: int
    limit: int


class AclCheck(BaseModel):
    user: str
    permission: str
    topic: str
    allowed: bool
    rule: Rule | None = Field(description="the deciding rule; null when the default policy decided")
    decided_by: str
    default_policy: str


class Groups(BaseModel):
    groups: dict[str, list[str]]


class Membership(BaseModel):
    group: str
    user: str
    member: bool
    changed: bool


# -- tokens and audit --------------------------------------------------------------------------


class TokenIn(Strict):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"role": "operator", "principal": "deploy"}]}
    )

    role: Literal["viewer", "operator", "admin"]
    principal: UserId
    expires_in: int | None = Field(
        None, ge=1, le=MAX_TOKEN_LIFETIME, description="seconds until the token expires (none: it never does)"
    )


class TokenOut(BaseModel):
    id: int
    prefix: str = Field(description="the first characters of the secret, to tell tokens apart")
    role: str
    principal: str
    created_at: int
    revoked_at: int | None
    expires_at: int | None = Field(None, description="epoch ms; none: never")


class IssuedTokenOut(TokenOut):
    token: str = Field(description="the secret: shown this once, stored only as a hash")


class TokenPage(BaseModel):
    items: list[TokenOut]
    next_after: int | None


class AuditEntryOut(BaseModel):
    id: int
    at: int
    token_id: int | None
    principal: str
    method: str
    path: str
    resource: str
    summary: dict[str, Any]
    status: int


class AuditPage(BaseModel):
    items: list[AuditEntryOut]
    next_before: int | None = Field(description="pass as ?before= for older entries; null at the end")


# -- status ------------------------------------------------------------------------------------


class Counters(BaseModel):
    batches: int = 0
    messages: int = 0
    publications: int = 0
    deliveries: int = 0
    replies: int = 0
    forwards: int = 0
    dead_lettered: int = 0
    refusals: dict[str, int] = Field(default_factory=dict, description='"3081 MQRCCF_NOT_AUTHORIZED": n')


class RouterStatus(BaseModel):
    instance: str
    started_at: int
    heartbeat_at: int
    uptime_seconds: float
    counters: Counters


class ErrorNote(BaseModel):
    instance: str
    at: float
    where: str
    error: str


class QueueDepth(BaseModel):
    name: str
    depth: int
    max_depth: int


class ApiProcess(BaseModel):
    started_at: int
    uptime_seconds: float


class Status(BaseModel):
    qmgr: str
    api: ApiProcess
    routers: list[RouterStatus] = Field(description="routers that reported within the last 30 s")
    totals: Counters = Field(description="summed over those routers")
    queues: list[QueueDepth]
    problems: list[QueueProblemOut] = Field(description="the broker's own queues that cannot be used now")
    last_errors: list[ErrorNote]


# -- MQTT session detail and principals --------------------------------------------------------

MAX_PASSWORD_LENGTH = 1024  # characters: 4 KiB of UTF-8 at most, well within an MQTT CONNECT's 65,535


def _password(value: SecretStr) -> SecretStr:
    """A password an MQTT client can send, with errors that never echo it (the schema says
    the same: ``WithJsonSchema``)."""
    text = value.get_secret_value()
    if not text:
        raise ValueError("the password is empty")
    if len(text) > MAX_PASSWORD_LENGTH:
        raise ValueError(f"a password is at most {MAX_PASSWORD_LENGTH:,} characters")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("the password is not valid Unicode text") from None
    return value


Password = Annotated[
    SecretStr,
    AfterValidator(_password),
    WithJsonSchema(
        {
            "type": "string",
            "format": "password",
            "writeOnly": True,
            "minLength": 1,
            "maxLength": MAX_PASSWORD_LENGTH,
            "description": "stored only as a salted scrypt hash; never returned, logged or audited",
        }
    ),
]


class MqttGrant(BaseModel):
    """A subscription of an MQTT session: its topic filter, the QoS granted, and MQTT 5.0's No
    Local and Retain As Published options and Subscription Identifier (null: none)."""

    filter: str
    qos: int
    no_local: bool = False
    retain_as_published: bool = False
    subscription_identifier: int | None = None


class MqttSessionDetail(MqttSession):
    subscriptions: list[MqttGrant] = Field(description="by topic filter")


class MqttPrincipal(BaseModel):
    """A user name MQTT clients log in with (``broker mqtt passwd``); ``created_at`` in epoch ms."""

    user: str
    created_at: int


class MqttPrincipalIn(Strict):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"user": "sensor1", "password": "s3cret"}]}
    )

    user: UserId = Field(description="at most 12 characters: the MQMD UserIdentifier of its publications")
    password: Password


class MqttPasswordIn(Strict):
    password: Password


# -- getting, moving and copying messages; publishing ------------------------------------------

MAX_SELECTION = 100  # messages moved or copied in one request (one unit of work)
MAX_FOLDERS = 16  # extra MQRFH2 folders of one publication

MsgId = Annotated[str, StringConstraints(pattern=MSG_ID), Field(examples=["414d5120514d31" + "0" * 34])]
Folder = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_FOLDER_BYTES, pattern=XML_TEXT),
    Field(examples=["<usr><colour>red</colour></usr>"]),
]


def _utf8(text: str) -> str:
    if not _encodable(text):
        raise ValueError("the text holds a lone surrogate, which no UTF-8 text can")
    return text


class MessageSelection(Strict):
    """Messages of a queue, by MsgId, and the queue they go to."""

    msg_ids: list[MsgId] = Field(min_length=1, max_length=MAX_SELECTION, description="48 hex digits each")
    target: QueueName


class Transferred(BaseModel):
    queue: str
    target: str
    msg_ids: list[str] = Field(description="the messages' MsgIds, on the target queue as on the source")


class Destination(Strict):
    queue: QueueName


class PublicationIn(Strict):
    """A publication, sent to the broker as an application's Publish command."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "topics": ["Sport/Soccer"],
                    "body_text": "1-0",
                    "retain": True,
                    "folders": ["<usr><a>1</a></usr>"],
                }
            ]
        },
    )

    topics: list[Topic] = Field(min_length=1, max_length=MAX_TOPICS, description="no wildcard levels")
    body_text: Annotated[str, AfterValidator(_utf8)] = Field(
        "", description="the payload, put in UTF-8 (MQSTR)"
    )
    retain: Flag = Field(False, description="RetainPub: the broker keeps it for later subscribers")
    local: Flag = Field(False, description="Local: never passed on to neighbouring brokers")
    sub_point: SubPoint | None = None
    folders: list[Folder] = Field(
        default_factory=list,
        max_length=MAX_FOLDERS,
        description="extra MQRFH2 folders after the <psc> one, each one XML element (<usr>, <mcd>...)",
    )
    persistence: int = Field(2, ge=0, le=2, description="0 no, 1 yes, 2 as the stream queue's default")
    priority: int = Field(-1, ge=-1, le=9, description="-1: the stream queue's default")
    expiry: Expiry = Field(-1, description="tenths of a second; -1 unlimited")
    user_id: UserId | None = Field(None, description="publish as this user (default: the token's principal)")


class Published(BaseModel):
    completion: Literal["ok", "warning"]
    topics: list[str]
    warnings: list[ResponseItem] = Field(description="topics the broker refused or warned about")


# -- configuration backup ----------------------------------------------------------------------


class ConfigChange(BaseModel):
    """One line of an import's report: what it does to one object."""

    action: Literal["create", "alter", "delete", "leave"] = Field(
        description="leave: the broker has it, the file leaves it out, and the import does not prune"
    )
    kind: str = Field(examples=["queue"])
    name: str = Field(examples=["APP.OUT"])
    line: str = Field(examples=["alter queue APP.OUT: max_depth 5000 -> 10000"])


class ConfigReport(BaseModel):
    """What an import of a configuration file changed, or would change (``dry_run``)."""

    dry_run: bool
    changes: list[ConfigChange] = Field(description="created, altered and deleted objects")
    left: list[ConfigChange] = Field(description="objects the file leaves out, left as they are")
    lines: list[str] = Field(description="the report as the CLI prints it ('no changes' if none)")
