"""Tables of the broker network: neighbours (links) and the channel's in-flight batches."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, LargeBinary, MetaData, SmallInteger, String, Table, Text

from queues.schema import NAMING

metadata = MetaData(naming_convention=NAMING)

neighbours = Table(
    "psb_neighbours",
    metadata,
    Column("name", String(48), primary_key=True),  # the neighbour's queue manager name
    Column("url", Text, nullable=False),  # its admin API base URL (inbound channel endpoint)
    Column("token", Text, nullable=False),  # the link's shared secret, sent and expected
    Column("epoch", String(32), nullable=False),  # fixed when this side defined the link
    Column("next_batch", BigInteger, nullable=False),  # sender: the next batch number
    Column("received_batch", BigInteger, nullable=False),  # receiver: the last batch taken
    Column("received_epoch", String(32), nullable=True),  # receiver: the sender's epoch
    Column("synced", SmallInteger, nullable=False),  # proxies sent to it since it was linked
    Column("sender_owner", String(96), nullable=True),  # which broker process runs the channel
    Column("sender_lease_until", BigInteger, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("last_sent_at", BigInteger, nullable=True),
    Column("last_received_at", BigInteger, nullable=True),
    Column("last_error", Text, nullable=True),
)

outbox = Table(
    "psb_channel_outbox",
    metadata,
    Column("link", String(48), primary_key=True),
    Column("batch_no", BigInteger, primary_key=True, autoincrement=False),
    Column("payload", LargeBinary, nullable=False),  # the exact request body, resent as is
    Column("messages", BigInteger, nullable=False),
    Column("created_at", BigInteger, nullable=False),
)
