"""Tables of the queue manager, written once for SQLite and PostgreSQL.

One message table serves every queue: the claim index ``(queue, priority DESC,
id)`` gives priority-then-FIFO order with a single index range scan, and keeps
queue definition cheap (no DDL per queue, so Alembic owns every table). The
queue row carries the current depth, maintained in the same transaction as the
puts and gets that change it, so MQ_Q_FULL is exact without counting rows.

These objects are the models Alembic migrations must match (a test compares
them); change them only together with a migration.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Sequence,
    SmallInteger,
    String,
    Table,
)

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING)

# SQLite only treats INTEGER PRIMARY KEY as the auto-incrementing rowid.
Id = BigInteger().with_variant(Integer(), "sqlite")

qmgr = Table(
    "mq_qmgr",
    metadata,
    Column("name", String(48), primary_key=True),
    Column("description", String(64), nullable=False, server_default=""),
    Column("created_at", BigInteger, nullable=False),
)

queues = Table(
    "mq_queues",
    metadata,
    Column("name", String(48), primary_key=True),
    Column("description", String(64), nullable=False, server_default=""),
    Column("max_depth", Integer, nullable=False),
    Column("max_msg_length", Integer, nullable=False),
    Column("backout_threshold", Integer, nullable=False, server_default="0"),
    Column("backout_requeue_q", String(48), nullable=False, server_default=""),
    Column("def_priority", SmallInteger, nullable=False, server_default="0"),
    Column("def_persistence", SmallInteger, nullable=False, server_default="0"),
    Column("put_enabled", SmallInteger, nullable=False, server_default="1"),
    Column("get_enabled", SmallInteger, nullable=False, server_default="1"),
    # normal | xmitq: a transmission queue holds messages bound for another queue manager.
    Column("usage", String(8), nullable=False, server_default="normal"),
    # predefined | tempdyn | permdyn, as MQ's DEFTYPE.
    Column("definition_type", String(12), nullable=False, server_default="predefined"),
    # none | correlid, as MQ's INDXTYPE: whether gets by CorrelId use an index.
    Column("index_type", String(8), nullable=False, server_default="none"),
    Column("depth", Integer, nullable=False, server_default="0"),
    # Messages put to the queue and gotten from it since it was defined (MQ's MSGSIN and
    # MSGSOUT, never reset), changed with the depth in the same statement: the console's rates.
    Column("put_count", BigInteger, nullable=False, server_default="0"),
    Column("get_count", BigInteger, nullable=False, server_default="0"),
    Column("created_at", BigInteger, nullable=False),
    Column("altered_at", BigInteger, nullable=False),
)

# Who has a queue open, as MQ's open handles (IPPROCS, OPPROCS): a process that reads or writes
# a queue for its whole life (the broker's routers, its channels) records it here and renews the
# row while it runs, so that deleting the queue, or altering it into something that process
# cannot use, is refused with MQRC_OBJECT_IN_USE (``queues.opens``). A row lapses at ``until``,
# or at once when ``owner`` names a process of this machine that is gone (``queues.owners``).
opens = Table(
    "mq_opens",
    metadata,
    Column("queue", String(48), primary_key=True),
    Column("owner", String(96), primary_key=True),
    Column("purpose", String(128), nullable=False),  # who, for people: "broker QM1 routes it"
    Column("reads", SmallInteger, nullable=False),  # gets must stay enabled
    Column("writes", SmallInteger, nullable=False),  # puts must stay enabled
    Column("min_msg_length", Integer, nullable=False),  # MAXMSGL may not go below it
    Column("until", BigInteger, nullable=False),
)


def mqmd_columns() -> list[Column[Any]]:
    """The MQMD fields every table of stored messages keeps (queue rows, retained publications),
    but the priority, which each places itself (first in the queue's claim index): new columns
    each call, as a column belongs to one table."""
    return [
        Column("msg_id", LargeBinary(24), nullable=False),
        Column("correl_id", LargeBinary(24), nullable=False),
        Column("format", String(8), nullable=False),
        Column("encoding", Integer, nullable=False),
        Column("ccsid", Integer, nullable=False),
        Column("msg_type", Integer, nullable=False),
        Column("report", Integer, nullable=False),
        Column("reply_to_q", String(48), nullable=False),
        Column("reply_to_qmgr", String(48), nullable=False),
        Column("user_id", String(12), nullable=False),
        Column("persistence", SmallInteger, nullable=False),
        Column("expiry", Integer, nullable=False),
        Column("put_appl_type", Integer, nullable=False),
        Column("put_appl_name", String(28), nullable=False),
        Column("put_date", String(8), nullable=False),
        Column("put_time", String(8), nullable=False),
    ]


messages = Table(
    "mq_messages",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("queue", String(48), nullable=False),
    Column("priority", SmallInteger, nullable=False),
    Column("expires_at", BigInteger, nullable=True),
    *mqmd_columns(),
    Column("backout_count", Integer, nullable=False),
    Column("put_at", BigInteger, nullable=False),
    Column("body", LargeBinary, nullable=False),
    # The CorrelId again on queues with INDXTYPE(CORRELID), NULL elsewhere: only those rows
    # enter the CorrelId index, which would otherwise cost every put a third of its time.
    Column("correl_key", LargeBinary(24), nullable=True),
    # SQLite only: which router has claimed the message and in which turn (``queues.claims``).
    # Set in a short transaction of its own, so that routing happens outside the one write lock.
    Column("claimed_by", String(40), nullable=True),
    Column("claim_turn", BigInteger, nullable=True),
    sqlite_autoincrement=True,
)

Index("ix_mq_messages_claim", messages.c.queue, messages.c.priority.desc(), messages.c.id)


def _where_set(name: str, column: Column[Any]) -> Index:
    """An index on (queue, ``column``) of only the rows where ``column`` is set: both
    databases then skip the index entirely for the rest, on put and on delete."""
    present = column.isnot(None)
    return Index(name, messages.c.queue, column, postgresql_where=present, sqlite_where=present)


_where_set("ix_mq_messages_correl_key", messages.c.correl_key)
_where_set("ix_mq_messages_expiry", messages.c.expires_at)
_where_set("ix_mq_messages_claimed_by", messages.c.claimed_by)

# The turns of concurrent claims on PostgreSQL (``queues.sql``, "claim turns"): 1..2147483646,
# cycling. Migration 0010 creates it there; SQLite has no sequences and needs none.
claim_turns = Sequence("mq_claim_turns")

# What a put writes: the claim columns start empty.
MESSAGE_COLUMNS = tuple(c.name for c in messages.columns if c.name not in ("id", "claimed_by", "claim_turn"))
