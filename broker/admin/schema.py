"""Tables of the admin API: its bearer tokens and its audit log."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, LargeBinary, MetaData, SmallInteger, String, Table, Text

from queues.schema import NAMING, Id

metadata = MetaData(naming_convention=NAMING)

# Bearer tokens of the admin API: only a SHA-256 of the secret is kept, so a copy of the
# database grants nothing; the prefix lets an administrator tell tokens apart in listings.
api_tokens = Table(
    "psb_api_tokens",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("prefix", String(16), nullable=False),
    Column("secret_hash", LargeBinary(32), nullable=False, unique=True),
    Column("role", String(16), nullable=False),  # viewer | operator | admin
    Column("principal", String(12), nullable=False),  # MQMD UserIdentifier of commands sent for it
    Column("created_at", BigInteger, nullable=False),
    Column("revoked_at", BigInteger, nullable=True),
    Column("expires_at", BigInteger, nullable=True),  # epoch ms; NULL: never
)

# Who changed what through the admin API (or the token CLI), and how it ended.
api_audit = Table(
    "psb_api_audit",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("at", BigInteger, nullable=False),
    Column("token_id", BigInteger, nullable=True),
    Column("principal", String(64), nullable=False),
    Column("method", String(8), nullable=False),
    Column("path", Text, nullable=False),
    Column("resource", String(128), nullable=False),
    Column("summary", Text, nullable=False),  # JSON
    Column("status", SmallInteger, nullable=False),
)
