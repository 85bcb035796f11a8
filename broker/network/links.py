"""Every SQL statement about links: neighbours, channel batches, leases.

Exactly once across two databases works like this. The sender moves a batch of
messages off the transmission queue into ``psb_channel_outbox`` under the next
batch number, in one transaction, and sends that payload until the receiver
confirms it (resending the very same bytes after any failure or restart). The
receiver takes a batch only if its number is above the last one it recorded
for that sender (and epoch), recording it in the same transaction as its puts;
a resent batch is confirmed without being put again. Then the sender deletes
the outbox entry. A crash on either side at any point leaves exactly one of:
the batch still in the outbox (resent, deduplicated), or gone with its
messages delivered.

A stopped channel (a row in ``psb_stopped_channels``) takes nothing more off its
transmission queue and sends nothing, whichever process holds its lease, until
it is started again.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, delete, insert, or_, select, update

from broker.network.schema import outbox, stopped_channels
from broker.store import NEIGHBOUR, log_changes
from broker.store.schema import neighbours
from queues.errors import MQError
from queues.ids import now_ms
from queues.names import check_qmgr_name
from queues.owners import dead_here
from queues.reasons import Reason
from queues.sql import insert_new


@dataclass(frozen=True, slots=True)
class Link:
    name: str
    url: str
    token: str
    epoch: str
    next_batch: int
    received_batch: int
    synced: bool
    sender_owner: str | None
    created_at: int
    last_sent_at: int | None
    last_received_at: int | None
    last_error: str | None
    stopped_at: int | None  # when an operator stopped the channel; None while it may run

    @property
    def stopped(self) -> bool:
        return self.stopped_at is not None

    @classmethod
    def from_row(cls, row: Any) -> Link:
        return cls(
            name=row.name,
            url=row.url,
            token=row.token,
            epoch=row.epoch,
            next_batch=row.next_batch,
            received_batch=row.received_batch,
            synced=bool(row.synced),
            sender_owner=row.sender_owner,
            created_at=row.created_at,
            last_sent_at=row.last_sent_at,
            last_received_at=row.last_received_at,
            last_error=row.last_error,
            stopped_at=row.stopped_at,
        )


# A link with its channel's stop, if any.
_LINKS = select(neighbours, stopped_channels.c.stopped_at).select_from(
    neighbours.outerjoin(stopped_channels, stopped_channels.c.link == neighbours.c.name)
)


def _changed(conn: Connection, name: str) -> None:
    log_changes(conn, [(NEIGHBOUR, hashlib.blake2b(name.encode(), digest_size=24).digest())])


def _url_pattern() -> str:
    """An http(s) URL whose host is a DNS name, an IPv4 address or a bracketed IPv6 address,
    with an optional port and path (no user, query or fragment): the URLs the channel can
    call, as one regular expression, so that the admin API's schema says exactly what the
    broker accepts."""
    label = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    h16 = r"[0-9A-Fa-f]{1,4}"
    ipv6 = "|".join(
        (
            rf"(?:{h16}:){{7}}{h16}",
            rf"(?:{h16}:){{1,7}}:",
            rf"(?:{h16}:){{1,6}}:{h16}",
            rf"(?:{h16}:){{1,5}}(?::{h16}){{1,2}}",
            rf"(?:{h16}:){{1,4}}(?::{h16}){{1,3}}",
            rf"(?:{h16}:){{1,3}}(?::{h16}){{1,4}}",
            rf"(?:{h16}:){{1,2}}(?::{h16}){{1,5}}",
            rf"{h16}:(?::{h16}){{1,6}}",
            rf":(?:(?::{h16}){{1,7}}|:)",
        )
    )
    port = r"(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})"
    path = r"(?:/(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})*)*"
    return rf"^https?://(?:{label}(?:\.{label})*|\[(?:{ipv6})\])(?::{port})?{path}$"


URL_PATTERN = _url_pattern()
MAX_URL_LENGTH = 2000
# A link token travels in an HTTP header: printable ASCII, no spaces.
TOKEN_PATTERN = r"^[\x21-\x7e]{16,512}$"


def _check_url(url: str) -> None:
    """A link URL must be one the channel can call (:data:`URL_PATTERN`)."""
    if len(url) > MAX_URL_LENGTH or not re.fullmatch(URL_PATTERN, url):
        raise MQError(
            Reason.MQRCCF_ATTR_VALUE_ERROR,
            f"url {url[:100]!r} is not an http(s) URL with a host name or IP address (and an optional "
            "port and path): use e.g. http://10.0.0.2:8080 (punycode for other host names)",
        )


def list_links(conn: Connection) -> list[Link]:
    return [Link.from_row(row) for row in conn.execute(_LINKS.order_by(neighbours.c.name))]


def get_link(conn: Connection, name: str) -> Link | None:
    row = conn.execute(_LINKS.where(neighbours.c.name == name)).first()
    return None if row is None else Link.from_row(row)


def check_link(name: str, url: str, token: str) -> None:
    """Refuse a definition that cannot work (before anything is sent to the neighbour)."""
    check_qmgr_name(name)
    _check_url(url)
    check_token(token)


def check_token(token: str) -> None:
    """A link token travels as a bearer token in an HTTP header: 16 to 512 characters of
    printable ASCII without blanks (:data:`TOKEN_PATTERN`), or no neighbour could be sent it."""
    if not re.fullmatch(TOKEN_PATTERN, token):
        raise MQError(
            Reason.MQRCCF_ATTR_VALUE_ERROR,
            "a link token must be 16 to 512 printable ASCII characters without blanks: it is sent in an "
            "HTTP header",
        )


def add_link(conn: Connection, name: str, url: str, token: str) -> Link:
    check_link(name, url, token)
    added = conn.execute(
        insert_new(conn, neighbours, ("name",))
        .values(
            name=name,
            url=url.rstrip("/"),
            token=token,
            epoch=os.urandom(16).hex(),
            next_batch=1,
            received_batch=0,
            received_epoch=None,
            synced=0,
            sender_owner=None,
            sender_lease_until=0,
            created_at=now_ms(),
        )
        .returning(neighbours.c.name)
    ).first()
    if added is None:
        raise MQError(Reason.MQRCCF_OBJECT_ALREADY_EXISTS, f"neighbour {name} is already defined")
    conn.execute(delete(stopped_channels).where(stopped_channels.c.link == name))  # a new link runs
    _changed(conn, name)
    link = get_link(conn, name)
    assert link is not None
    return link


def update_link(conn: Connection, name: str, *, url: str | None = None, token: str | None = None) -> Link:
    """Change where the channel sends and the secret it sends; the channel uses them from the
    next batch it takes, and for a batch taken before that it has to resend (the batch numbers
    and the epoch stay, so nothing is put twice)."""
    values: dict[str, Any] = {}
    if url is not None:
        _check_url(url)
        values["url"] = url.rstrip("/")
    if token is not None:
        check_token(token)
        values["token"] = token
    if (
        values
        and not conn.execute(update(neighbours).where(neighbours.c.name == name).values(**values)).rowcount
    ):
        raise MQError(Reason.MQRCCF_UNKNOWN_BROKER, f"neighbour {name} is not defined")
    link = get_link(conn, name)
    if link is None:
        raise MQError(Reason.MQRCCF_UNKNOWN_BROKER, f"neighbour {name} is not defined")
    return link


def remove_link(conn: Connection, name: str) -> None:
    if not conn.execute(delete(neighbours).where(neighbours.c.name == name)).rowcount:
        raise MQError(Reason.MQRCCF_UNKNOWN_BROKER, f"neighbour {name} is not defined")
    conn.execute(delete(outbox).where(outbox.c.link == name))
    conn.execute(delete(stopped_channels).where(stopped_channels.c.link == name))
    _changed(conn, name)


def authenticate(conn: Connection, sender: str, token: str) -> Link:
    """The link a request claims to come from, if its token is that link's; else 3085."""
    link = get_link(conn, sender)
    if link is None or not hmac.compare_digest(link.token.encode(), token.encode()):
        raise MQError(Reason.MQRCCF_UNKNOWN_BROKER, f"{sender} is not a neighbour with that token")
    return link


def stop_channel(conn: Connection, name: str) -> bool:
    """Stop ``name``'s channel (MQ's STOP CHANNEL); False if it was stopped already. Its
    messages wait on the transmission queue; a batch already sent is still confirmed."""
    if get_link(conn, name) is None:
        raise MQError(Reason.MQRCCF_UNKNOWN_BROKER, f"neighbour {name} is not defined")
    stop = insert_new(conn, stopped_channels, ("link",)).values(link=name, stopped_at=now_ms())
    return conn.execute(stop.returning(stopped_channels.c.link)).first() is not None


def start_channel(conn: Connection, name: str) -> bool:
    """Let ``name``'s channel send again (MQ's START CHANNEL); False if it was not stopped."""
    if get_link(conn, name) is None:
        raise MQError(Reason.MQRCCF_UNKNOWN_BROKER, f"neighbour {name} is not defined")
    return bool(conn.execute(delete(stopped_channels).where(stopped_channels.c.link == name)).rowcount)


def mark_synced(conn: Connection, name: str) -> bool:
    """True for the one process that gets to send a new neighbour its proxies."""
    stmt = update(neighbours).where(neighbours.c.name == name, neighbours.c.synced == 0).values(synced=1)
    return bool(conn.execute(stmt).rowcount)


# -- sender side ---------------------------------------------------------------------------------


def acquire_sender(conn: Connection, name: str, owner: str, lease_ms: int) -> bool:
    """Hold (or renew) the right to run ``name``'s channel: one sender per link. A lease
    held by a dead process of this machine (the broker before a crash and restart) is
    taken over at once rather than left to lapse (``queues.owners``)."""
    now = now_ms()
    take = update(neighbours).values(sender_owner=owner, sender_lease_until=now + lease_ms)
    free = or_(neighbours.c.sender_owner == owner, neighbours.c.sender_lease_until < now)
    if conn.execute(take.where(neighbours.c.name == name, free)).rowcount:
        return True
    holder = conn.execute(select(neighbours.c.sender_owner).where(neighbours.c.name == name)).scalar()
    if holder is None or not dead_here(holder):
        return False
    return bool(
        conn.execute(take.where(neighbours.c.name == name, neighbours.c.sender_owner == holder)).rowcount
    )


def release_sender(conn: Connection, name: str, owner: str) -> None:
    conn.execute(
        update(neighbours)
        .where(neighbours.c.name == name, neighbours.c.sender_owner == owner)
        .values(sender_owner=None, sender_lease_until=0)
    )


@dataclass(frozen=True, slots=True)
class InFlight:
    """A batch in the outbox: sent (or about to be) and not yet confirmed."""

    number: int
    payload: bytes
    messages: int


def in_flight(conn: Connection, name: str) -> InFlight | None:
    """The oldest batch not yet confirmed, if any (sent, or resent, as is)."""
    row = conn.execute(
        select(outbox.c.batch_no, outbox.c.payload, outbox.c.messages)
        .where(outbox.c.link == name)
        .order_by(outbox.c.batch_no)
        .limit(1)
    ).first()
    return None if row is None else InFlight(row.batch_no, row.payload, row.messages)


def next_batch_number(conn: Connection, name: str) -> int:
    stmt = (
        update(neighbours)
        .where(neighbours.c.name == name)
        .values(next_batch=neighbours.c.next_batch + 1)
        .returning(neighbours.c.next_batch)
    )
    return int(conn.execute(stmt).scalar_one()) - 1


def store_batch(conn: Connection, name: str, number: int, payload: bytes, messages: int) -> None:
    conn.execute(
        insert(outbox).values(
            link=name, batch_no=number, payload=payload, messages=messages, created_at=now_ms()
        )
    )


def confirm_batch(conn: Connection, name: str, number: int) -> None:
    conn.execute(delete(outbox).where(outbox.c.link == name, outbox.c.batch_no == number))
    conn.execute(
        update(neighbours).where(neighbours.c.name == name).values(last_sent_at=now_ms(), last_error=None)
    )


def record_error(conn: Connection, name: str, error: str) -> None:
    conn.execute(update(neighbours).where(neighbours.c.name == name).values(last_error=error[:2000]))


def outbox_depth(conn: Connection) -> dict[str, int]:
    """Messages in flight per link (taken off the transmission queue, not yet confirmed)."""
    depths: dict[str, int] = {}
    for row in conn.execute(select(outbox.c.link, outbox.c.messages)):
        depths[row.link] = depths.get(row.link, 0) + row.messages
    return depths


# -- receiver side -------------------------------------------------------------------------------


def accept_batch(conn: Connection, sender: str, epoch: str, number: int) -> bool:
    """Record batch ``number`` from ``sender``; False if it was taken before (a resend).

    The row lock this takes also serialises two receivers racing on one batch."""
    stmt = (
        update(neighbours)
        .where(
            neighbours.c.name == sender,
            or_(
                neighbours.c.received_epoch.is_(None),
                neighbours.c.received_epoch != epoch,
                neighbours.c.received_batch < number,
            ),
        )
        .values(received_batch=number, received_epoch=epoch, last_received_at=now_ms())
    )
    return bool(conn.execute(stmt).rowcount)
