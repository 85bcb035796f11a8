"""Table of the broker network's channels: the batches in flight to each neighbour (the
neighbours themselves are state every router reads: ``broker.store.schema``)."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, LargeBinary, MetaData, String, Table

from queues.schema import NAMING

metadata = MetaData(naming_convention=NAMING)

outbox = Table(
    "psb_channel_outbox",
    metadata,
    Column("link", String(48), primary_key=True),
    Column("batch_no", BigInteger, primary_key=True, autoincrement=False),
    Column("payload", LargeBinary, nullable=False),  # the exact request body, resent as is
    Column("messages", BigInteger, nullable=False),
    Column("created_at", BigInteger, nullable=False),
)
