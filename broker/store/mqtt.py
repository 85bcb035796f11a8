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
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache, partial
from hashlib import blake2b
from typing import Any, cast

from sqlalchemy import (
    Connection,
    Delete,
    Table,
    Update,
    bindparam,
    delete,
    func,
    insert,
    literal_column,
    select,
    update,
)
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement

from broker.store.schema import (
    mqtt_inbound,
    mqtt_outbound,
    mqtt_principals,
    mqtt_sessions,
    mqtt_subscriptions,
)
from queues import sql
from queues.owners import dead_here

QUEUE_PREFIX = "SYSTEM.MQTT."  # + 36 hex digits: 48 characters, MQ's longest queue name
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1


@lru_cache(maxsize=16384)
def session_key(client_id: str) -> bytes:
    """The key of ``client_id``'s rows (remembered: a batch names its connected clients' keys
    once per message stored or acknowledged)."""
    return blake2b(client_id.encode("utf-8"), digest_size=16, person=b"mqtt-session").digest()


def filter_key(text: str) -> bytes:
    return blake2b(text.encode("utf-8"), digest_size=16, person=b"mqtt-filter").digest()


@lru_cache(maxsize=16384)
def queue_for(client_id: str) -> str:
    """The session queue of ``client_id``: a name of MQ characters whatever the id holds."""
    digest = blake2b(client_id.encode("utf-8"), digest_size=18, person=b"mqtt-queue").hexdigest()
    return QUEUE_PREFIX + digest.upper()


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
    hashed = hash_password(password)
    changed = conn.execute(
        update(mqtt_principals).where(mqtt_principals.c.user_id == user_id).values(password_hash=hashed)
    ).rowcount
    if not changed:
        conn.execute(insert(mqtt_principals).values(user_id=user_id, password_hash=hashed, created_at=now))


def password_hash(conn: Connection, user_id: str) -> str | None:
    return conn.execute(
        select(mqtt_principals.c.password_hash).where(mqtt_principals.c.user_id == user_id)
    ).scalar()


def delete_principal(conn: Connection, user_id: str) -> bool:
    return bool(conn.execute(delete(mqtt_principals).where(mqtt_principals.c.user_id == user_id)).rowcount)


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

    @property
    def key(self) -> bytes:
        return session_key(self.client_id)


@dataclass(frozen=True, slots=True)
class OutboundRow:
    packet_id: int
    topic: str
    payload: bytes
    qos: int
    retain: bool
    released: bool


def find_session(conn: Connection, client_id: str) -> StoredSession | None:
    row = conn.execute(
        select(mqtt_sessions).where(mqtt_sessions.c.session_key == session_key(client_id))
    ).first()
    return None if row is None else _session(row)


def list_sessions(
    conn: Connection, *, after: str | None = None, limit: int | None = None
) -> list[StoredSession]:
    """The stored sessions by client id (those after ``after``, at most ``limit``: a page),
    each with its count of unacknowledged outbound messages."""
    in_flight = (
        select(func.count())
        .where(mqtt_outbound.c.session_key == mqtt_sessions.c.session_key)
        .scalar_subquery()
        .label("in_flight")
    )
    statement = select(mqtt_sessions, in_flight).order_by(mqtt_sessions.c.client_id).limit(limit)
    if after is not None:
        statement = statement.where(mqtt_sessions.c.client_id > after)
    return [_session(row) for row in conn.execute(statement)]


def count_sessions(conn: Connection) -> tuple[int, int]:
    """(sessions with a client connected, sessions): one aggregate, for the console's overview."""
    online, total = conn.execute(
        select(func.coalesce(func.sum(mqtt_sessions.c.online), 0), func.count())
    ).one()
    return int(online), int(total)


def set_offline(conn: Connection, now: int, client_ids: Sequence[str] | None = None) -> None:
    """The sessions' clients have gone (all sessions: the listener starts, none is connected).
    Only sessions still online are touched: a restart does not reset an expiry clock."""
    statement = update(mqtt_sessions).where(mqtt_sessions.c.online == 1).values(online=0, offline_since=now)
    if client_ids is not None:
        statement = statement.where(mqtt_sessions.c.session_key.in_([session_key(c) for c in client_ids]))
    conn.execute(statement)


def release_dead(conn: Connection, now: int) -> int:
    """Mark offline the sessions held by listener processes of this machine that died (a
    listener process among several, killed: its clients are gone, and its sessions would
    otherwise look connected, never expire, and hold up the next takeover of each); returns
    how many. One look at the owners of the online sessions."""
    owners = conn.execute(
        select(mqtt_sessions.c.owner).where(mqtt_sessions.c.online == 1).distinct()
    ).scalars()
    dead = [owner for owner in owners if owner and dead_here(owner)]
    if not dead:
        return 0
    statement = (
        update(mqtt_sessions)
        .where(mqtt_sessions.c.online == 1, mqtt_sessions.c.owner.in_(dead))
        .values(online=0, offline_since=now)
    )
    return conn.execute(statement).rowcount


def _session(row: object) -> StoredSession:
    m = row._mapping  # type: ignore[attr-defined]
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
    )


def save_session(conn: Connection, session: StoredSession) -> None:
    """Create the session, or record its new connection."""
    values = {
        "user_id": session.user_id,
        "clean": int(session.clean),
        "protocol_level": session.protocol_level,
        "address": session.address[:64],
        "connected_at": session.connected_at,
        "online": 1,
        "offline_since": 0,
        "owner": session.owner,
    }
    changed = conn.execute(
        update(mqtt_sessions).where(mqtt_sessions.c.session_key == session.key).values(**values)
    ).rowcount
    if not changed:
        conn.execute(
            insert(mqtt_sessions).values(
                session_key=session.key,
                client_id=session.client_id,
                queue=session.queue,
                created_at=session.created_at,
                next_seq=1,
                **values,
            )
        )


def offline_sessions(conn: Connection, *, before: int | None = None) -> list[StoredSession]:
    """The sessions no client is connected to (gone before the epoch ms ``before``, if given)."""
    statement = select(mqtt_sessions).where(mqtt_sessions.c.online == 0)
    if before is not None:
        statement = statement.where(mqtt_sessions.c.offline_since < before)
    return [_session(row) for row in conn.execute(statement.order_by(mqtt_sessions.c.client_id))]


def count_dropped(conn: Connection, client_id: str, count: int) -> None:
    conn.execute(
        update(mqtt_sessions)
        .where(mqtt_sessions.c.session_key == session_key(client_id))
        .values(dropped=mqtt_sessions.c.dropped + count)
    )


def count_refused(conn: Connection, client_id: str, count: int) -> None:
    """``count`` more of the client's publications or subscriptions were refused (authority)."""
    if count:
        conn.execute(
            update(mqtt_sessions)
            .where(mqtt_sessions.c.session_key == session_key(client_id))
            .values(refused=mqtt_sessions.c.refused + count)
        )


def delete_session(conn: Connection, client_id: str) -> None:
    key = session_key(client_id)
    for table in (mqtt_subscriptions, mqtt_inbound, mqtt_outbound, mqtt_sessions):
        conn.execute(delete(table).where(table.c.session_key == key))


# -- subscriptions -------------------------------------------------------------------------


def granted(conn: Connection, client_id: str) -> dict[str, int]:
    """The session's filters and the QoS granted to each."""
    rows = conn.execute(
        select(mqtt_subscriptions.c.filter, mqtt_subscriptions.c.qos).where(
            mqtt_subscriptions.c.session_key == session_key(client_id)
        )
    )
    return {row.filter: row.qos for row in rows}


def grant(conn: Connection, client_id: str, filters: Sequence[tuple[str, int]]) -> None:
    if not filters:
        return
    key = session_key(client_id)
    _delete_pairs(conn, mqtt_subscriptions, "filter_key", [(key, filter_key(f)) for f, _ in filters])
    conn.execute(
        insert(mqtt_subscriptions),
        [{"session_key": key, "filter_key": filter_key(f), "filter": f, "qos": q} for f, q in filters],
    )


def revoke(conn: Connection, client_id: str, filters: Iterable[str]) -> None:
    key = session_key(client_id)
    _delete_pairs(conn, mqtt_subscriptions, "filter_key", [(key, filter_key(f)) for f in filters])


# -- QoS 2 ids received --------------------------------------------------------------------


def awaiting_release(conn: Connection, client_id: str) -> list[int]:
    rows = conn.execute(
        select(mqtt_inbound.c.packet_id).where(mqtt_inbound.c.session_key == session_key(client_id))
    )
    return [row.packet_id for row in rows]


def record_received(conn: Connection, ids: Sequence[tuple[str, int]]) -> None:
    if ids:
        rows = [(session_key(c), p) for c, p in ids]
        _execute_many(
            conn, "record_received", lambda: insert(mqtt_inbound), ("session_key", "packet_id"), rows
        )


def forget_received(conn: Connection, ids: Sequence[tuple[str, int]]) -> None:
    _delete_pairs(conn, mqtt_inbound, "packet_id", [(session_key(c), p) for c, p in ids])


# -- outbound messages ---------------------------------------------------------------------


def unacknowledged(conn: Connection, client_id: str) -> list[OutboundRow]:
    """The session's outbound messages in flight, in the order they were first sent."""
    rows = conn.execute(
        select(mqtt_outbound)
        .where(mqtt_outbound.c.session_key == session_key(client_id))
        .order_by(mqtt_outbound.c.seq)
    )
    return [
        OutboundRow(row.packet_id, row.topic, row.payload, row.qos, bool(row.retain), bool(row.released))
        for row in rows
    ]


# An outbound message about to be sent, as the values of its row (``_OUTBOUND_COLUMNS``):
# the listener stores one per QoS 1/2 delivery, so it builds the row's tuple and nothing else.
NewOutbound = tuple[bytes, int, int, str, bytes, int, int, int]


def new_outbound(client_id: str, seq: int, row: OutboundRow) -> NewOutbound:
    """An outbound message about to be sent to ``client_id``; ``seq`` orders it after the
    session's earlier ones (the order they are sent again in after a reconnection)."""
    return (
        session_key(client_id),
        row.packet_id,
        seq,
        row.topic,
        row.payload,
        row.qos,
        int(row.retain),
        int(row.released),
    )


def last_outbound_seq(conn: Connection, client_id: str | None = None) -> int:
    """The highest ``seq`` of any stored outbound message, or of ``client_id``'s (0 if none):
    one counter, carried on from there, orders every session's messages without a statement
    per session. A session taken over from another listener process may hold higher ones than
    this process has counted to, hence the question per session."""
    statement = select(func.max(mqtt_outbound.c.seq))
    if client_id is not None:
        statement = statement.where(mqtt_outbound.c.session_key == session_key(client_id))
    return conn.execute(statement).scalar() or 0


def store_outbound(conn: Connection, rows: Sequence[NewOutbound]) -> None:
    """Record messages about to be sent, whatever sessions they are for: one statement (on
    PostgreSQL a binary COPY from two rows up, as the queues' messages are written)."""
    if conn.dialect.name == "postgresql" and len(rows) > 1:
        sql.copy_rows(conn, mqtt_outbound, _OUTBOUND_COLUMNS, rows)
    elif rows:
        _execute_many(conn, "store_outbound", lambda: insert(mqtt_outbound), _OUTBOUND_COLUMNS, rows)


def release_outbound(conn: Connection, ids: Sequence[tuple[str, int]]) -> None:
    """PUBREC came for these QoS 2 messages: after a restart, PUBREL is what is sent again."""
    if ids:
        _execute_many(conn, "release_outbound", _release, _PAIR, [(session_key(c), p) for c, p in ids])


def _release() -> Update:
    where = (mqtt_outbound.c.session_key == bindparam("k"), mqtt_outbound.c.packet_id == bindparam("v"))
    return update(mqtt_outbound).where(*where).values(released=literal_column("1"))


def forget_outbound(conn: Connection, ids: Sequence[tuple[str, int]]) -> None:
    _delete_pairs(conn, mqtt_outbound, "packet_id", [(session_key(c), p) for c, p in ids])


def _delete_pairs(conn: Connection, table: Table, column: str, pairs: Sequence[tuple[bytes, object]]) -> None:
    """Delete rows by (session_key, ``column``) pairs: one statement, compiled once and
    executed for the whole batch's pairs."""
    if pairs:
        _execute_many(
            conn,
            (table.name, column),
            partial(_deletion, table, column),
            _PAIR,
            pairs,
        )


def _deletion(table: Table, column: str) -> Delete:
    return delete(table).where(table.c.session_key == bindparam("k"), table.c[column] == bindparam("v"))


def _execute_many(
    conn: Connection,
    name: Hashable,
    build: Callable[[], ClauseElement],
    columns: tuple[str, ...],
    rows: Sequence[tuple[Any, ...]],
) -> None:
    """One statement for many rows (each the values of ``columns``, in that order), compiled
    once per dialect and handed to the driver as it is: SQLAlchemy's processing of every
    row's parameters cost more than the statement. Rows already in the order of a positional
    statement's parameters go through untouched."""
    key = (conn.dialect.name, name)
    plan = _COMPILED.get(key)
    if plan is None:
        compiled = cast(SQLCompiler, build().compile(dialect=conn.dialect))
        order = tuple(compiled.positiontup or ()) if compiled.positional else None
        plan = _COMPILED[key] = (compiled.string, order)
    statement, order = plan
    if order is None:
        conn.exec_driver_sql(statement, [dict(zip(columns, row, strict=True)) for row in rows])
    elif order == columns:
        conn.exec_driver_sql(statement, list(rows))
    else:
        where = [columns.index(n) for n in order]
        conn.exec_driver_sql(statement, [tuple(row[i] for i in where) for row in rows])


_COMPILED: dict[tuple[str, Hashable], tuple[str, tuple[str, ...] | None]] = {}
_PAIR = ("k", "v")
_OUTBOUND_COLUMNS = ("session_key", "packet_id", "seq", "topic", "payload", "qos", "retain", "released")
