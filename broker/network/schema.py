"""Tables of the broker network's channels: the batches in flight to each neighbour and the
channels an operator stopped (the neighbours themselves are state every router reads:
``broker.store.schema``)."""

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

# Channels an operator stopped (MQ's STOP CHANNEL): the sender takes nothing off the link's
# transmission queue until the channel is started again. Kept here, not in a process, so every
# broker process that may hold the link's sender lease honours it.
stopped_channels = Table(
    "psb_stopped_channels",
    metadata,
    Column("link", String(48), primary_key=True),
    Column("stopped_at", BigInteger, nullable=False),
)
