"""MQTT: outbound QoS 1/2 messages stored as runs, one row per routing batch and session.

``psb_mqtt_outbound`` held a row per message in flight: a B-tree insertion per delivery and
a deletion per acknowledgement, which cost more than the rest of the delivery. Its
successor ``psb_mqtt_outbound_runs`` holds the messages one batch sent one session, packed
in their sending order (the format of ``broker.store.mqtt.pack_messages``), with a bitmap
of those acknowledged for good and one of those PUBREC'd. Each message in flight is copied
into a run of its own, so sessions keep what they had in flight, in the same order.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-26
"""

from __future__ import annotations

import struct

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

# One message of a run: packet id, QoS, RETAIN, topic length, payload length; topic; payload.
_HEAD = struct.Struct(">HBBHI")


def upgrade() -> None:
    runs = op.create_table(
        "psb_mqtt_outbound_runs",
        sa.Column("session_key", sa.LargeBinary(16), nullable=False),
        sa.Column("seq", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("messages", sa.LargeBinary(), nullable=False),
        sa.Column("acked", sa.LargeBinary(), nullable=False),
        sa.Column("released", sa.LargeBinary(), nullable=False),
        sa.Column("pending", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("session_key", "seq", name="pk_psb_mqtt_outbound_runs"),
    )
    assert runs is not None
    if op.get_bind().dialect.name == "postgresql":
        # A run is tens of kilobytes of payloads, written once and read back only after a
        # restart: compressing it (PostgreSQL's default for a value over 2 kB) cost more than
        # the rest of the batch's writes.
        op.execute("ALTER TABLE psb_mqtt_outbound_runs ALTER COLUMN messages SET STORAGE EXTERNAL")
    old = sa.table(
        "psb_mqtt_outbound",
        *(sa.column(name) for name in ("session_key", "packet_id", "seq", "topic", "payload", "qos")),
        sa.column("retain"),
        sa.column("released"),
    )
    rows = op.get_bind().execute(sa.select(old)).all()
    if rows:
        op.bulk_insert(runs, [_run(row) for row in rows])
    op.drop_table("psb_mqtt_outbound")


def _run(row: sa.Row) -> dict[str, object]:
    topic = row.topic.encode("utf-8")
    head = _HEAD.pack(row.packet_id, row.qos, row.retain, len(topic), len(row.payload))
    return {
        "session_key": row.session_key,
        "seq": row.seq,
        "messages": head + topic + row.payload,
        "acked": b"\x00",
        "released": b"\x01" if row.released else b"\x00",
        "pending": 1,
    }


def downgrade() -> None:
    outbound = op.create_table(
        "psb_mqtt_outbound",
        sa.Column("session_key", sa.LargeBinary(16), nullable=False),
        sa.Column("packet_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("qos", sa.SmallInteger(), nullable=False),
        sa.Column("retain", sa.SmallInteger(), nullable=False),
        sa.Column("released", sa.SmallInteger(), nullable=False),
        sa.PrimaryKeyConstraint("session_key", "packet_id", name="pk_psb_mqtt_outbound"),
    )
    assert outbound is not None
    names = ("session_key", "seq", "messages", "acked", "released")
    runs = sa.table("psb_mqtt_outbound_runs", *(sa.column(n) for n in names))
    rows = []
    for run in op.get_bind().execute(sa.select(runs).order_by(runs.c.seq)).all():
        for index, (packet_id, qos, retain, topic, payload) in enumerate(_messages(run.messages)):
            if not _bit(run.acked, index):
                rows.append(
                    {
                        "session_key": run.session_key,
                        "packet_id": packet_id,
                        "seq": run.seq * 65536 + index,  # the order they were sent in
                        "topic": topic,
                        "payload": payload,
                        "qos": qos,
                        "retain": retain,
                        "released": int(_bit(run.released, index)),
                    }
                )
    if rows:
        op.bulk_insert(outbound, rows)
    op.drop_table("psb_mqtt_outbound_runs")


def _bit(bitmap: bytes, index: int) -> bool:
    return bool(bitmap[index // 8] >> (index % 8) & 1)


def _messages(blob: bytes) -> list[tuple[int, int, int, str, bytes]]:
    out, pos = [], 0
    while pos < len(blob):
        packet_id, qos, retain, topic_length, payload_length = _HEAD.unpack_from(blob, pos)
        pos += _HEAD.size
        topic = blob[pos : pos + topic_length].decode("utf-8")
        pos += topic_length
        out.append((packet_id, qos, retain, topic, bytes(blob[pos : pos + payload_length])))
        pos += payload_length
    return out
