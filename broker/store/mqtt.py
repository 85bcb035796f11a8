"""MQTT sessions in SQL: every statement on the ``psb_mqtt_*`` tables.

A session is what a client id keeps between connections: the queue its broker
subscriptions deliver to (an ordinary local queue, so the routing loop, the Spark job and
a neighbour's forwards all deliver to it as to any subscriber), the QoS granted per filter,
the received QoS 2 ids awaiting PUBREL and the outbound QoS 1/2 messages not yet
acknowledged. The listener writes them in the same transaction as the routing they belong
to, in bulk for a whole batch of packets.

Passwords of MQTT principals are kept as salted scrypt hashes (``scrypt$n$r$p$salt$hash``),
never in clear.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache, partial
from hashlib import blake2b
from typing import Any

from sqlalchemy import (
    Connection,
    Delete,
    Engine,
    Row,
    RowMapping,
    Select,
    Table,
    Update,
    and_,
    bindparam,
    delete,
    func,
    or_,
    select,
    text,
    update,
)

from broker.protocol.mqtt.packets import (
    MQTT_5,
    MQTT_31,
    MQTT_311,
    NEVER_EXPIRES,
    NO_PROPERTIES,
    Properties,
    Will,
)
from broker.protocol.mqtt.v5.properties import WILL, read_properties, write_properties
from broker.protocol.mqtt.wire import PUBLISH, Reader
from broker.store import schema
from broker.store.schema import (
    mqtt_inbound,
    mqtt_nodes,
    mqtt_outbound_runs,
    mqtt_principals,
    mqtt_sessions,
    mqtt_subscriptions,
)
from queues.bulk import execute_rows, insert_mappings, insert_rows, parameters
from queues.errors import MQError
from queues.reasons import Reason
from queues.schema import queues as queue_definitions
from queues.sql import among, insert_new

QUEUE_PREFIX = "SYSTEM.MQTT."  # + 36 hex digits: 48 characters, MQ's longest queue name
SHARE_QUEUE_PREFIX = QUEUE_PREFIX + "SHARE."  # + 30 hex digits
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
VERSIONS = {MQTT_31: "3.1", MQTT_311: "3.1.1", MQTT_5: "5.0"}  # by CONNECT protocol level


@lru_cache(maxsize=4096)
def session_key(client_id: str) -> bytes:
    """The key of ``client_id``'s rows (remembered: a batch names its connected clients' keys
    once per message stored or acknowledged)."""
    return blake2b(client_id.encode("utf-8"), digest_size=16, person=b"mqtt-session").digest()


def filter_key(text: str) -> bytes:
    return blake2b(text.encode("utf-8"), digest_size=16, person=b"mqtt-filter").digest()


@lru_cache(maxsize=4096)
def queue_for(client_id: str) -> str:
    """The session queue of ``client_id``: a name of MQ characters whatever the id holds."""
    digest = blake2b(client_id.encode("utf-8"), digest_size=18, person=b"mqtt-queue").hexdigest()
    return QUEUE_PREFIX + digest.upper()


def share_queue_for(share: str, topic_filter: str) -> str:
    """The queue of the shared subscription ``$share/{share}/{topic_filter}``: its members
    take its publications from it in turn. Its name is under :data:`QUEUE_PREFIX` (an MQTT
    queue) but never a session queue's, whose suffix is hex digits alone."""
    text = f"{share}/{topic_filter}".encode()
    digest = blake2b(text, digest_size=15, person=b"mqtt-share").hexdigest()
    return SHARE_QUEUE_PREFIX + digest.upper()


# -- passwords -----------------------------------------------------------------------------


def hash_password(password: bytes, *, salt: bytes | None = None) -> str:
    salt = os.urandom(16) if salt is None else salt
    digest = hashlib.scrypt(password, salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32)
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${salt.hex()}${digest.hex()}"


def verify_password(password: bytes, stored: str) -> bool:
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        found = hashlib.scrypt(
            password, salt=bytes.fromhex(salt), n=int(n), r=int(r), p=int(p), dklen=len(digest) // 2
        )
    except ValueError:
        return False
    return hmac.compare_digest(found.hex(), digest)


def set_password(conn: Connection, user_id: str, password: bytes, now: int) -> None:
    """Set the password of ``user_id``, adding the principal if there is none (``broker mqtt
    passwd``)."""
    set_password_hash(conn, user_id, hash_password(password), now)


def set_password_hash(conn: Connection, user_id: str, hashed: str, now: int) -> None:
    """Give ``user_id`` the stored hash ``hashed``, adding the principal if there is none (a
    configuration import, which holds hashes, never passwords)."""
    if not _rehash(conn, user_id, hashed):
        _add(conn, user_id, hashed, now)


class NoSuchPrincipal(MQError):
    """No MQTT principal has this name: 2085, a 404."""

    def __init__(self, user_id: str) -> None:
        super().__init__(Reason.MQRC_UNKNOWN_OBJECT_NAME, f"no MQTT principal {user_id}")


class PrincipalExists(MQError):
    """An MQTT principal has this name already: 4001, a 409 (its password is kept)."""

    def __init__(self, user_id: str) -> None:
        super().__init__(Reason.MQRCCF_OBJECT_ALREADY_EXISTS, f"MQTT principal {user_id} exists already")


def add_principal(conn: Connection, user_id: str, hashed: str, now: int) -> None:
    """Add the principal ``user_id`` with the password ``hashed`` (:func:`hash_password`'s,
    made before the transaction: scrypt takes a while, and the write lock would wait for it);
    :class:`PrincipalExists` if there is one."""
    if not _add(conn, user_id, hashed, now):
        raise PrincipalExists(user_id)


def change_password(conn: Connection, user_id: str, hashed: str) -> None:
    """Give ``user_id`` the password ``hashed`` (as :func:`add_principal` takes it);
    :class:`NoSuchPrincipal` if there is no such principal."""
    if not _rehash(conn, user_id, hashed):
        raise NoSuchPrincipal(user_id)


def _rehash(conn: Connection, user_id: str, hashed: str) -> bool:
    principals = mqtt_principals.c
    statement = update(mqtt_principals).where(principals.user_id == user_id).values(password_hash=hashed)
    return bool(conn.execute(statement).rowcount)


def _add(conn: Connection, user_id: str, hashed: str, now: int) -> bool:
    row = {"user_id": user_id, "password_hash": hashed, "created_at": now}
    statement = insert_new(conn, mqtt_principals, ("user_id",)).values(row)
    return conn.execute(statement.returning(mqtt_principals.c.user_id)).first() is not None


def password_hash(conn: Connection, user_id: str) -> str | None:
    return conn.execute(
        select(mqtt_principals.c.password_hash).where(mqtt_principals.c.user_id == user_id)
    ).scalar()


def has_principal(conn: Connection, user_id: str) -> bool:
    found = conn.execute(select(mqtt_principals.c.user_id).where(mqtt_principals.c.user_id == user_id))
    return found.first() is not None


def delete_principal(conn: Connection, user_id: str) -> None:
    """Remove the principal ``user_id`` (its connected clients stay until they reconnect);
    :class:`NoSuchPrincipal` if there is none."""
    if not conn.execute(delete(mqtt_principals).where(mqtt_principals.c.user_id == user_id)).rowcount:
        raise NoSuchPrincipal(user_id)


def list_principals(conn: Connection) -> list[tuple[str, int]]:
    rows = conn.execute(
        select(mqtt_principals.c.user_id, mqtt_principals.c.created_at).order_by(mqtt_principals.c.user_id)
    )
    return [(row.user_id, row.created_at) for row in rows]


# -- sessions ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredSession:
    client_id: str
    queue: str
    user_id: str
    clean: bool
    protocol_level: int
    address: str
    created_at: int
    connected_at: int
    online: bool = True
    in_flight: int = 0  # outbound messages sent and not yet acknowledged
    offline_since: int = 0  # epoch ms its client went (0 while online)
    dropped: int = 0  # messages dropped over the queued-message limit, since it was created
    refused: int = 0  # its client's publications and subscriptions the broker refused
    owner: str = ""  # the listener process its client is connected to (queues.owners)
    will: Will | None = None  # its connected client's, until published or discarded
    node: str = ""  # the node holding it (read with it: its holder, until released)
    keepalive: int = 0  # seconds, as its client's last CONNECT asked
    bytes_in: int = 0  # sent by its client on its current (or last) connection, as last written
    bytes_out: int = 0  # sent to its client on that connection, as last written
    expiry: int | None = None  # MQTT 5.0's Session Expiry Interval (None: 3.1 or 3.1.1)
    receive_maximum: int | None = None  # MQTT 5.0: as its client's CONNECT gave them
    topic_alias_maximum: int | None = None
    will_due: int | None = None  # epoch ms its client's will is due, if it waits (MQTT 5.0)

    @property
    def key(self) -> bytes:
        return session_key(self.client_id)

    @property
    def version(self) -> str:
        """The MQTT version its client speaks, as people name it."""
        return VERSIONS.get(self.protocol_level, str(self.protocol_level))


@dataclass(frozen=True, slots=True)
class OutboundRow:
    packet_id: int
    topic: str
    payload: bytes
    qos: int
    retain: bool
    released: bool
    properties: Properties = NO_PROPERTIES  # an MQTT 5.0 subscriber's: sent again with it


def find_session(conn: Connection, client_id: str) -> StoredSession | None:
    return find_sessions(conn, [client_id]).get(client_id)


def find_sessions(
    conn: Connection, client_ids: Sequence[str], *, lock: bool = False
) -> dict[str, StoredSession]:
    """The stored sessions of ``client_ids`` (those there are), by client id, each with the
    node holding it: one query. ``lock``: their rows locked until the transaction ends (a
    listener opening them: another opening one meanwhile waits, then finds it held)."""
    if not client_ids:
        return {}
    keys = [session_key(client_id) for client_id in client_ids]
    statement = _with_node(select(mqtt_sessions)).where(among(conn, mqtt_sessions.c.session_key, keys))
    if lock:
        statement = statement.with_for_update(of=mqtt_sessions)
    return {stored.client_id: stored for stored in map(_session, conn.execute(statement))}


def _with_node(statement: Select[Any]) -> Select[Any]:
    """``statement`` with the name of the node holding each session: that of the member its
    owner names while the session is online and that member's sessions are not released."""
    sessions, nodes = mqtt_sessions.c, mqtt_nodes.c
    held = and_(sessions.owner == nodes.owner, sessions.online == 1, nodes.released == 0)
    return statement.add_columns(nodes.node).select_from(mqtt_sessions.outerjoin(mqtt_nodes, held))


def list_sessions(
    conn: Connection, *, after: str | None = None, limit: int | None = None
) -> list[StoredSession]:
    """The stored sessions by client id (those after ``after``, at most ``limit``: a page),
    each with its count of unacknowledged outbound messages."""
    statement = _shown().order_by(mqtt_sessions.c.client_id).limit(limit)
    if after is not None:
        statement = statement.where(mqtt_sessions.c.client_id > after)
    return [_session(row) for row in conn.execute(statement)]


def show_session(conn: Connection, client_id: str) -> StoredSession | None:
    """The session of ``client_id`` as :func:`list_sessions` gives it (its in-flight count
    included), or None."""
    row = conn.execute(_shown().where(mqtt_sessions.c.session_key == session_key(client_id))).first()
    return None if row is None else _session(row)


def _shown() -> Select[Any]:
    """The sessions with the node holding each and its count of outbound messages in flight:
    those stored, and those its node holds in memory alone (as last written)."""
    stored = (
        select(func.coalesce(func.sum(mqtt_outbound_runs.c.pending), 0))
        .where(mqtt_outbound_runs.c.session_key == mqtt_sessions.c.session_key)
        .scalar_subquery()
    )
    in_flight = (stored + mqtt_sessions.c.in_flight_held).label("in_flight")
    return _with_node(select(mqtt_sessions, in_flight))


def count_sessions(conn: Connection) -> tuple[int, int]:
    """(sessions with a client connected, sessions): one aggregate, for the console's overview."""
    online, total = conn.execute(
        select(func.coalesce(func.sum(mqtt_sessions.c.online), 0), func.count())
    ).one()
    return int(online), int(total)


_NO_WILL = {"will_topic": None, "will_payload": None, "will_properties": None, "will_due": None}
_GONE = {"online": 0, **_NO_WILL, "will_qos": 0, "will_retain": 0}


def set_offline(
    conn: Connection, now: int, client_ids: Sequence[str] | None = None, *, owner: str | None = None
) -> None:
    """The sessions' clients have gone (all sessions, without ``client_ids``), their wills with
    them; only those ``owner`` holds, if given (one taken over since is another's). Only
    sessions still online are touched: a restart does not reset an expiry clock."""
    statement = (
        update(mqtt_sessions).where(mqtt_sessions.c.online == 1).values({**_GONE, "offline_since": now})
    )
    if client_ids is not None:
        statement = statement.where(among(conn, mqtt_sessions.c.session_key, map(session_key, client_ids)))
    if owner is not None:
        statement = statement.where(mqtt_sessions.c.owner == owner)
    conn.execute(statement)


def release_owner(conn: Connection, owner: str, now: int) -> list[StoredSession]:
    """Mark offline the sessions ``owner`` held (a member declared dead), their wills taken
    with them: returns them as they were, wills included, for the caller to publish those
    and end the clean ones in the same transaction."""
    online = and_(mqtt_sessions.c.owner == owner, mqtt_sessions.c.online == 1)
    held = [_session(row) for row in conn.execute(select(mqtt_sessions).where(online))]
    if held:
        conn.execute(update(mqtt_sessions).where(online).values({**_GONE, "offline_since": now}))
    return held


def clear_will(conn: Connection, client_id: str) -> None:
    """The will of ``client_id``'s connection has been published (in this transaction)."""
    statement = update(mqtt_sessions).where(mqtt_sessions.c.session_key == session_key(client_id))
    conn.execute(statement.values(_NO_WILL))


def delay_wills(conn: Connection, now: int, delayed: Sequence[tuple[str, Will, int]], owner: str) -> None:
    """The sessions' clients have gone (by the epoch ms ``now``) and their wills wait: each
    (client id, will, epoch ms it is due) is kept with its session, offline, for whoever
    publishes it when due (:func:`take_due_wills`) or when the session ends first. Only the
    sessions ``owner`` held: one taken over since is another's."""
    if not delayed:
        return
    sessions = mqtt_sessions.c
    names = ("will_topic", "will_payload", "will_qos", "will_retain", "will_properties")
    rows = [
        {"k": session_key(client_id), **_will_columns(will), "will_due": due}
        for client_id, will, due in delayed
    ]
    statement = (
        update(mqtt_sessions)
        .where(sessions.session_key == bindparam("k"), sessions.owner == owner)
        .values(
            online=0,
            offline_since=now,
            will_due=bindparam("will_due"),
            **{name: bindparam(name) for name in names},
        )
    )
    conn.execute(statement, rows)


def wills_due(conn: Connection, now: int) -> bool:
    """Whether a will that waited is due by the epoch ms ``now`` (one look at an index)."""
    statement = select(mqtt_sessions.c.will_due).where(mqtt_sessions.c.will_due <= now).limit(1)
    return conn.execute(statement).first() is not None


def take_wills(
    conn: Connection, *, due_by: int | None = None, client_ids: Sequence[str] | None = None
) -> list[StoredSession]:
    """The offline sessions whose wills wait, with them: those due by the epoch ms ``due_by``,
    or those of ``client_ids`` (their sessions end), the wills taken from them in this
    transaction for the caller to publish in it. So each is published once, whoever takes it:
    rows another transaction holds are passed over (PostgreSQL), as that one is taking them or
    opening the session again."""
    if client_ids is not None and not client_ids:
        return []
    sessions = mqtt_sessions.c
    statement = select(mqtt_sessions).where(sessions.will_due.is_not(None), sessions.online == 0)
    if due_by is not None:
        statement = statement.where(sessions.will_due <= due_by)
    if client_ids is not None:
        statement = statement.where(among(conn, sessions.session_key, map(session_key, client_ids)))
    taken = [_session(row) for row in conn.execute(statement.with_for_update(skip_locked=True))]
    if taken:
        keys = [stored.key for stored in taken]
        conn.execute(update(mqtt_sessions).where(among(conn, sessions.session_key, keys)).values(_NO_WILL))
    return taken


def _session(row: Row[Any]) -> StoredSession:
    m = row._mapping
    return StoredSession(
        m["client_id"],
        m["queue"],
        m["user_id"],
        bool(m["clean"]),
        m["protocol_level"],
        m["address"],
        m["created_at"],
        m["connected_at"],
        bool(m["online"]),
        m.get("in_flight", 0),
        m["offline_since"],
        m["dropped"],
        m["refused"],
        m["owner"],
        _will(m),
        m.get("node") or "",
        m["keepalive"],
        m["bytes_in"],
        m["bytes_out"],
        m["expiry"],
        m["receive_maximum"],
        m["topic_alias_maximum"],
        m["will_due"],
    )


def _will(m: RowMapping) -> Will | None:
    topic = m["will_topic"]
    if topic is None:
        return None
    block = m["will_properties"]
    properties = (
        NO_PROPERTIES if block is None else read_properties(Reader(bytearray(block), 0, len(block)), WILL)
    )
    return Will(topic, m["will_payload"], m["will_qos"], bool(m["will_retain"]), properties)


def _will_columns(will: Will | None) -> dict[str, Any]:
    """The columns that hold ``will`` (None: no will)."""
    if will is None:
        return {
            "will_topic": None,
            "will_payload": None,
            "will_qos": 0,
            "will_retain": 0,
            "will_properties": None,
        }
    block = write_properties(will.properties, WILL)
    return {
        "will_topic": will.topic,
        "will_payload": will.payload,
        "will_qos": will.qos,
        "will_retain": int(will.retain),
        "will_properties": block if len(block) > 1 else None,  # more than an empty block's length
    }


def save_session(conn: Connection, session: StoredSession) -> None:
    """Create the session, or record its new connection."""
    save_sessions(
        conn, [session], existing={session.client_id} if find_session(conn, session.client_id) else set()
    )


def save_sessions(conn: Connection, stored: Sequence[StoredSession], existing: Collection[str]) -> None:
    """Create the sessions, or record their new connections (``existing``: the client ids
    whose session is stored already): a statement for the new ones, one for the others."""
    new = [_connection(s) | _creation(s) for s in stored if s.client_id not in existing]
    insert_mappings(conn, mqtt_sessions, new)
    known = [
        (session.key, *map(_connection(session).__getitem__, _CONNECTION_COLUMNS))
        for session in stored
        if session.client_id in existing
    ]
    execute_rows(conn, "save_sessions", _reconnection, ("k", *_CONNECTION_COLUMNS), known)


def _reconnection(dialect: str) -> Update:
    sessions = mqtt_sessions.c
    columns = {name: sessions[name] for name in _CONNECTION_COLUMNS}
    named = parameters(dialect, {"k": sessions.session_key} | columns)
    return (
        update(mqtt_sessions)
        .where(sessions.session_key == named["k"])
        .values({name: named[name] for name in _CONNECTION_COLUMNS})
    )


_CONNECTION_COLUMNS = (
    "user_id",
    "clean",
    "protocol_level",
    "address",
    "connected_at",
    "online",
    "offline_since",
    "owner",
    "will_topic",
    "will_payload",
    "will_qos",
    "will_retain",
    "will_properties",
    "will_due",
    "keepalive",
    "bytes_in",
    "bytes_out",
    "in_flight_held",
    "expiry",
    "receive_maximum",
    "topic_alias_maximum",
)


def _connection(session: StoredSession) -> dict[str, Any]:
    """The columns a session's new connection sets."""
    return {
        "user_id": session.user_id,
        "clean": int(session.clean),
        "protocol_level": session.protocol_level,
        "address": session.address[:64],
        "connected_at": session.connected_at,
        "online": 1,
        "offline_since": 0,
        "owner": session.owner,
        **_will_columns(session.will),
        "will_due": None,
        "keepalive": session.keepalive,
        "bytes_in": session.bytes_in,
        "bytes_out": session.bytes_out,
        "in_flight_held": 0,
        "expiry": session.expiry,
        "receive_maximum": session.receive_maximum,
        "topic_alias_maximum": session.topic_alias_maximum,
    }


def _creation(session: StoredSession) -> dict[str, Any]:
    """The columns set once, when a session is created."""
    return {
        "session_key": session.key,
        "client_id": session.client_id,
        "queue": session.queue,
        "created_at": session.created_at,
        "next_seq": 1,
    }


def offline_sessions(conn: Connection) -> list[StoredSession]:
    """The sessions no client is connected to."""
    statement = select(mqtt_sessions).where(mqtt_sessions.c.online == 0)
    return [_session(row) for row in conn.execute(statement.order_by(mqtt_sessions.c.client_id))]


def expired(session: StoredSession, now: int, default: int) -> bool:
    """Whether ``session``, offline, has outlived its expiry by the epoch ms ``now``: its own
    Session Expiry Interval (MQTT 5.0), else ``default`` seconds (0: never)."""
    seconds = default if session.expiry is None else session.expiry
    if session.online or not seconds or seconds == NEVER_EXPIRES:
        return False
    return session.offline_since + seconds * 1000 < now


def expired_sessions(conn: Connection, now: int, default: int) -> list[StoredSession]:
    """The offline sessions :func:`expired` by ``now``, in one query."""
    sessions = mqtt_sessions.c
    own = and_(
        sessions.expiry.is_not(None),
        sessions.expiry < NEVER_EXPIRES,
        sessions.offline_since + sessions.expiry * 1000 < now,
    )
    overdue = (
        or_(own, and_(sessions.expiry.is_(None), sessions.offline_since < now - default * 1000))
        if default
        else own
    )
    statement = select(mqtt_sessions).where(sessions.online == 0, overdue).order_by(sessions.client_id)
    return [_session(row) for row in conn.execute(statement)]


def set_expiry(conn: Connection, client_id: str, expiry: int) -> None:
    """The Session Expiry Interval an MQTT 5.0 client's DISCONNECT set."""
    sessions = mqtt_sessions.c
    conn.execute(
        update(mqtt_sessions).where(sessions.session_key == session_key(client_id)).values(expiry=expiry)
    )


def count_dropped(conn: Connection, client_id: str, count: int) -> None:
    conn.execute(
        update(mqtt_sessions)
        .where(mqtt_sessions.c.session_key == session_key(client_id))
        .values(dropped=mqtt_sessions.c.dropped + count)
    )


def count_refused(conn: Connection, counts: Mapping[str, int]) -> None:
    """So many more of each client's publications or subscriptions were refused (authority);
    one statement for them all, which reads nothing back (it may go in a pipeline)."""
    rows = [(session_key(client_id), count) for client_id, count in counts.items() if count]
    execute_rows(conn, "count_refused", _refusal, _PAIR, rows)


def _refusal(dialect: str) -> Update:
    sessions = mqtt_sessions.c
    named = parameters(dialect, {"k": sessions.session_key, "v": sessions.refused})
    return (
        update(mqtt_sessions)
        .where(sessions.session_key == named["k"])
        .values(refused=sessions.refused + named["v"])
    )


def record_traffic(conn: Connection, owner: str, counts: Mapping[str, tuple[int, int, int]]) -> None:
    """The bytes in and out of each client's connection so far and the deliveries in flight
    to it held in memory alone (by client id), on the sessions ``owner`` holds (one another
    listener process has taken over is left alone): one statement for them all, which reads
    nothing back."""
    rows = [(session_key(client_id), owner, *numbers) for client_id, numbers in counts.items()]
    execute_rows(conn, "record_traffic", _traffic, ("k", "o", "i", "b", "f"), rows)


def _traffic(dialect: str) -> Update:
    sessions = mqtt_sessions.c
    named = parameters(
        dialect,
        {
            "k": sessions.session_key,
            "o": sessions.owner,
            "i": sessions.bytes_in,
            "b": sessions.bytes_out,
            "f": sessions.in_flight_held,
        },
    )
    return (
        update(mqtt_sessions)
        .where(sessions.session_key == named["k"], sessions.owner == named["o"])
        .values(bytes_in=named["i"], bytes_out=named["b"], in_flight_held=named["f"])
    )


def delete_session(conn: Connection, client_id: str) -> None:
    delete_sessions(conn, [client_id])


def delete_sessions(conn: Connection, client_ids: Sequence[str]) -> None:
    """Delete the sessions and everything stored for them: a statement per table."""
    if not client_ids:
        return
    keys = [session_key(client_id) for client_id in client_ids]
    for table in (mqtt_subscriptions, mqtt_inbound, mqtt_outbound_runs, mqtt_sessions):
        conn.execute(delete(table).where(among(conn, table.c.session_key, keys)))


# -- subscriptions -------------------------------------------------------------------------


# A grant: the QoS granted (in MQTT 5.0 the Subscription Options byte without Retain Handling,
# column qos) and, above those bits, the SUBSCRIBE's Subscription Identifier (column
# subscription_id; 0: none). One int, as every delivery's rules read it.
OPTION_BITS, ID_SHIFT = 0b1111, 4


def granted(conn: Connection, client_id: str) -> dict[str, int]:
    """The session's filters and the grant of each."""
    return granted_of(conn, [client_id])[client_id]


def granted_of(conn: Connection, client_ids: Sequence[str]) -> dict[str, dict[str, int]]:
    """:func:`granted` of each session, in one query (a fleet resuming at once)."""
    clients = _by_key(client_ids)
    subscriptions = mqtt_subscriptions.c
    rows = conn.execute(
        select(
            subscriptions.session_key, subscriptions.filter, subscriptions.qos, subscriptions.subscription_id
        ).where(among(conn, subscriptions.session_key, clients))
    )
    found: dict[str, dict[str, int]] = {client_id: {} for client_id in client_ids}
    for row in rows:
        found[clients[row.session_key]][row.filter] = row.qos | row.subscription_id << ID_SHIFT
    return found


def _by_key(client_ids: Sequence[str]) -> dict[bytes, str]:
    return {session_key(client_id): client_id for client_id in client_ids}


# A subscription's row, by (session key, filter key): (filter, grant), or None: revoked.
Grants = Mapping[tuple[bytes, bytes], tuple[str, int] | None]


def grant(conn: Connection, client_id: str, filters: Sequence[tuple[str, int]]) -> None:
    key = session_key(client_id)
    set_grants(conn, {(key, filter_key(f)): (f, q) for f, q in filters})


def revoke(conn: Connection, client_id: str, filters: Iterable[str]) -> None:
    key = session_key(client_id)
    set_grants(conn, {(key, filter_key(f)): None for f in filters})


def set_grants(conn: Connection, grants: Grants) -> None:
    """Each subscription granted (its row replaced) or revoked (its row deleted): one deletion
    and one insertion for all of them, whichever sessions they are of (a batch's SUBSCRIBEs)."""
    if not grants:
        return
    _delete_pairs(conn, mqtt_subscriptions, "filter_key", list(grants))
    rows = [
        (key, fkey, value[0], value[1] & OPTION_BITS, value[1] >> ID_SHIFT)
        for (key, fkey), value in grants.items()
        if value is not None
    ]
    columns = ("session_key", "filter_key", "filter", "qos", "subscription_id")
    insert_rows(conn, mqtt_subscriptions, columns, rows)


# -- QoS 2 ids received --------------------------------------------------------------------


def awaiting_release(conn: Connection, client_id: str) -> list[int]:
    return awaiting_release_of(conn, [client_id])[client_id]


def awaiting_release_of(conn: Connection, client_ids: Sequence[str]) -> dict[str, list[int]]:
    """The QoS 2 ids of each session received and not yet released, in one query."""
    clients = _by_key(client_ids)
    inbound = mqtt_inbound.c
    rows = conn.execute(
        select(inbound.session_key, inbound.packet_id).where(among(conn, inbound.session_key, clients))
    )
    found: dict[str, list[int]] = {client_id: [] for client_id in client_ids}
    for row in rows:
        found[clients[row.session_key]].append(row.packet_id)
    return found


def record_received(conn: Connection, ids: Sequence[tuple[str, int]]) -> None:
    insert_rows(conn, mqtt_inbound, ("session_key", "packet_id"), [(session_key(c), p) for c, p in ids])


def forget_received(conn: Connection, ids: Sequence[tuple[str, int]]) -> None:
    _delete_pairs(conn, mqtt_inbound, "packet_id", [(session_key(c), p) for c, p in ids])


# -- outbound messages ---------------------------------------------------------------------
# Stored as runs: the messages one routing batch sent one session, packed in one row.

_MESSAGE = struct.Struct(">HBBHI")  # packet id, QoS, flags, topic length, payload length
_PROPERTIES = struct.Struct(">I")  # the length of the property block after the payload
_RETAIN = 0x01  # flags: RETAIN
_WITH_PROPERTIES = 0x80  # flags: the publication's MQTT 5.0 property block follows its payload
RUN_BYTES = 16 << 20  # payload bytes past which a session's new messages start another run

# An outbound message as a run holds it: (packet id, topic, payload, QoS, RETAIN, properties).
OutboundMessage = tuple[int, str, bytes, int, bool, Properties]


@dataclass(slots=True, eq=False)
class OutboundRun:
    """Outbound QoS 1/2 messages one routing batch sent one session, in their sending order,
    and which of them are acknowledged for good (``acked``) or PUBREC'd (``released``), a bit
    per message. The row is deleted when ``pending`` reaches 0."""

    key: bytes  # the session's
    seq: int  # orders the session's runs, and so its messages, in their sending order
    messages: list[OutboundMessage]
    acked: bytearray
    released: bytearray
    pending: int

    @classmethod
    def new(cls, key: bytes, seq: int, messages: list[OutboundMessage]) -> OutboundRun:
        size = (len(messages) + 7) // 8
        return cls(key, seq, messages, bytearray(size), bytearray(size), len(messages))

    def is_acked(self, index: int) -> bool:
        return bool(self.acked[index >> 3] >> (index & 7) & 1)

    def is_released(self, index: int) -> bool:
        return bool(self.released[index >> 3] >> (index & 7) & 1)

    def acknowledge(self, index: int) -> bool:
        """Message ``index`` is acknowledged for good; False if it already was."""
        if self.is_acked(index):
            return False
        self.acked[index >> 3] |= 1 << (index & 7)
        self.pending -= 1
        return True

    def release(self, index: int) -> bool:
        """PUBREC came for message ``index``; False if it already had."""
        if self.is_released(index):
            return False
        self.released[index >> 3] |= 1 << (index & 7)
        return True

    def in_flight(self) -> list[OutboundRow]:
        """The messages not yet acknowledged for good, in their sending order."""
        return [
            OutboundRow(packet_id, topic, payload, qos, retain, self.is_released(index), properties)
            for index, (packet_id, topic, payload, qos, retain, properties) in enumerate(self.messages)
            if not self.is_acked(index)
        ]


def new_runs(
    key: bytes, messages: list[OutboundMessage], next_seq: Callable[[], int], limit: int = RUN_BYTES
) -> list[OutboundRun]:
    """The runs that store ``messages``, new to one session: one, unless their payloads add
    up to more than ``limit`` bytes (a run is one value of a row, and both databases cap a
    value at 1 GB; a session with many large messages in flight gets several runs)."""
    runs: list[OutboundRun] = []
    start, size = 0, 0
    for index, message in enumerate(messages):
        size += len(message[2])
        if size > limit and index > start:
            runs.append(OutboundRun.new(key, next_seq(), messages[start:index]))
            start, size = index, len(message[2])
    runs.append(OutboundRun.new(key, next_seq(), messages[start:] if start else messages))
    return runs


def pack_messages(messages: Iterable[OutboundMessage]) -> bytes:
    """A run's messages as one value; a message with MQTT 5.0 properties (most have none)
    carries them as PUBLISH does, after its payload."""
    parts: list[bytes] = []
    names: dict[str, bytes] = {}  # a run's messages are mostly on a few topics
    for packet_id, topic, payload, qos, retain, properties in messages:
        name = names.get(topic)
        if name is None:
            name = names[topic] = topic.encode("utf-8")
        flags = _RETAIN if retain else 0
        if properties is NO_PROPERTIES:
            parts += (_MESSAGE.pack(packet_id, qos, flags, len(name), len(payload)), name, payload)
            continue
        block = write_properties(properties, PUBLISH)
        head = _MESSAGE.pack(packet_id, qos, flags | _WITH_PROPERTIES, len(name), len(payload))
        parts += (head, name, payload, _PROPERTIES.pack(len(block)), block)
    return b"".join(parts)


def unpack_messages(blob: bytes) -> list[OutboundMessage]:
    messages: list[OutboundMessage] = []
    pos, size = 0, len(blob)
    while pos < size:
        packet_id, qos, flags, topic_length, payload_length = _MESSAGE.unpack_from(blob, pos)
        pos += _MESSAGE.size
        topic = bytes(blob[pos : pos + topic_length]).decode("utf-8")
        pos += topic_length
        payload = bytes(blob[pos : pos + payload_length])
        pos += payload_length
        properties = NO_PROPERTIES
        if flags & _WITH_PROPERTIES:
            (length,) = _PROPERTIES.unpack_from(blob, pos)
            pos += _PROPERTIES.size
            properties = read_properties(Reader(bytearray(blob[pos : pos + length]), 0, length), PUBLISH)
            pos += length
        messages.append((packet_id, topic, payload, qos, bool(flags & _RETAIN), properties))
    return messages


def load_runs(conn: Connection, client_id: str) -> list[OutboundRun]:
    """The session's runs with messages in flight, in their sending order."""
    return load_runs_of(conn, [client_id])[client_id]


def load_runs_of(conn: Connection, client_ids: Sequence[str]) -> dict[str, list[OutboundRun]]:
    """:func:`load_runs` of each session, in one query."""
    clients = _by_key(client_ids)
    runs = mqtt_outbound_runs.c
    rows = conn.execute(
        select(runs.session_key, runs.seq, runs.messages, runs.acked, runs.released, runs.pending)
        .where(among(conn, runs.session_key, clients))
        .order_by(runs.session_key, runs.seq)
    )
    found: dict[str, list[OutboundRun]] = {client_id: [] for client_id in client_ids}
    for key, seq, messages, acked, released, pending in rows:
        run = OutboundRun(key, seq, unpack_messages(messages), bytearray(acked), bytearray(released), pending)
        found[clients[key]].append(run)
    return found


def unacknowledged(conn: Connection, client_id: str) -> list[OutboundRow]:
    """The session's outbound messages in flight, in the order they were first sent."""
    return [row for run in load_runs(conn, client_id) for row in run.in_flight()]


def last_outbound_seq(conn: Connection) -> int:
    """The highest ``seq`` of any stored run (0 if none): one counter, carried on from there,
    orders every session's messages without a statement per session. (A session resumed from
    another listener process may hold higher ones: its runs are loaded, and show them.)"""
    return conn.execute(select(func.max(mqtt_outbound_runs.c.seq))).scalar() or 0


def store_runs(conn: Connection, runs: Sequence[OutboundRun]) -> None:
    """Record runs about to be sent, whatever sessions they are for."""
    rows = [
        (run.key, run.seq, pack_messages(run.messages), bytes(run.acked), bytes(run.released), run.pending)
        for run in runs
    ]
    insert_rows(conn, mqtt_outbound_runs, _RUN_COLUMNS, rows)


def update_runs(conn: Connection, runs: Iterable[OutboundRun]) -> None:
    """Write the runs' bitmaps as they are now (those with messages still in flight)."""
    rows = [(run.key, run.seq, bytes(run.acked), bytes(run.released), run.pending) for run in runs]
    execute_rows(conn, "update_runs", _run_update, ("k", "s", "a", "r", "p"), rows)


def _run_update(dialect: str) -> Update:
    runs = mqtt_outbound_runs.c
    values = parameters(
        dialect,
        {"k": runs.session_key, "s": runs.seq, "a": runs.acked, "r": runs.released, "p": runs.pending},
    )
    return (
        update(mqtt_outbound_runs)
        .where(runs.session_key == values["k"], runs.seq == values["s"])
        .values(acked=values["a"], released=values["r"], pending=values["p"])
    )


def delete_runs(conn: Connection, runs: Iterable[OutboundRun]) -> None:
    """Delete runs whose every message is acknowledged for good."""
    _delete_pairs(conn, mqtt_outbound_runs, "seq", [(run.key, run.seq) for run in runs])


def vacuum(engine: Engine) -> None:
    """PostgreSQL: VACUUM the tables every batch churns (outbound runs stored and deleted,
    QoS 2 ids recorded and forgotten), so that the space of their deleted rows is used again.
    At 1,000 QoS 1 publications/s to ten subscribers, ten thousand runs come and go a second;
    left to autovacuum (which looks at a database once a minute, and never when it is off) the
    table grows by hundreds of megabytes, past the server's shared buffers, and every batch
    waits on its writes to disk. A few live rows and a second's dead ones take milliseconds.
    The tables a session that ends with its connection churns (``CHURN_TABLES``) are vacuumed
    too once they hold ``CHURNED`` dead rows: after a wave of clients has come and gone their
    lookups by key would visit every dead row's index entry until then (10,000 clients of a
    failover after a storm took 5.4 s to resume, 3.8 s once vacuumed). SKIP_LOCKED: a table
    another node is vacuuming is left to it. (SQLite reuses the pages of deleted rows by itself.)"""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        dead = conn.execute(_DEAD_ROWS, {"names": [table.name for table in CHURN_TABLES], "dead": CHURNED})
        churned = dead.scalars()
        names = [mqtt_outbound_runs.name, mqtt_inbound.name, *churned]
        conn.exec_driver_sql(f"VACUUM (SKIP_LOCKED) {', '.join(names)}")


# Tables with a row or more per session, subscription or change: a wave of clients that come
# and go leaves as many dead rows.
CHURN_TABLES = (mqtt_sessions, mqtt_subscriptions, schema.subscriptions, schema.changes, queue_definitions)
CHURNED = 1_000  # dead rows that make one worth a VACUUM (a few milliseconds)
_DEAD_ROWS = text(
    "SELECT relname FROM pg_stat_user_tables WHERE relname = ANY(:names) AND n_dead_tup >= :dead"
)


def _delete_pairs(conn: Connection, table: Table, column: str, pairs: Sequence[tuple[bytes, object]]) -> None:
    """Delete rows by (session_key, ``column``) pairs."""
    execute_rows(conn, (table.name, column), partial(_deletion, table, column), _PAIR, pairs)


def _deletion(table: Table, column: str, dialect: str) -> Delete:
    keys, values = table.c.session_key, table.c[column]
    named = parameters(dialect, {"k": keys, "v": values})
    return delete(table).where(keys == named["k"], values == named["v"])


_PAIR = ("k", "v")
_RUN_COLUMNS = ("session_key", "seq", "messages", "acked", "released", "pending")
