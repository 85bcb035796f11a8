"""The queue manager: MQ's put/get/browse/syncpoint semantics over SQL tables.

A unit of work is one database transaction. A destructive get deletes the row
inside it, so a backout (or a process killed with SIGKILL, whose connection
the database then aborts) puts the message back exactly where it was; a commit
makes puts and gets visible together. Depth counters on the queue rows change
in the same transaction, just before commit, which makes MQRC_Q_FULL exact even
with several processes putting to one queue; the same statement counts the
queue's puts and gets (the console's rates).
"""

from __future__ import annotations

import fnmatch
import getpass
import logging
import os
import sys
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Any, cast

from sqlalchemy import Connection, Engine, inspect
from sqlalchemy.exc import IntegrityError

from queues import claims, dlh, opens, sql, turn_watch
from queues.claims import Claim, Claimant
from queues.database import READ_ONLY, is_sqlite, make_engine, unavailable
from queues.definition import CORRELID, MAX_MAX_DEPTH, QueueDefinition, check_attributes
from queues.errors import MQError, NoMessageAvailable, UnknownObject
from queues.group_commit import GroupCommit
from queues.ids import mq_date_time, new_msg_id, now_ms
from queues.message import (
    FORMAT_LENGTH,
    ID_LENGTH,
    MQAT_UNIX,
    MQEI_UNLIMITED,
    MQENC_INTEGER_MASK,
    MQENC_NATIVE,
    MQFMT_DEAD_LETTER_HEADER,
    MQMI_NONE,
    MQPER_PERSISTENCE_AS_Q_DEF,
    MQPRI_PRIORITY_AS_Q_DEF,
    PUT_APPL_NAME_LENGTH,
    USER_ID_LENGTH,
    Message,
    derive,
)
from queues.names import DEAD_LETTER_QUEUE, check_qmgr_name, check_queue_name
from queues.reasons import Reason
from queues.schema import MESSAGE_COLUMNS
from queues.waiting import ArrivalNotifier
from queues.writer_lock import writer_lock

log = logging.getLogger(__name__)

EXPIRY_SWEEP_MS = 1000
SWEPT_KEPT = 4096  # queues remembered as swept, past which those swept over a second ago go
ABANDONED_GRACE_MS = 60_000


@dataclass(frozen=True, slots=True)
class PutResult:
    """What a put-many did: the MsgId of every item, in order, and which items
    went to the dead-letter queue instead (item index, reason)."""

    msg_ids: list[bytes]
    dead_lettered: list[tuple[int, int]]


@dataclass(frozen=True, slots=True)
class QueueHead:
    """A queue and when the message a get would take next was put (None when it is empty)."""

    definition: QueueDefinition
    head_put_at: int | None


@dataclass(frozen=True, slots=True)
class Browsed:
    """A browsed message and the cursor that continues the browse after it."""

    cursor: tuple[int, int]
    message: Message
    put_at: int


@contextmanager
def _translated() -> Iterator[None]:
    """A lost or locked database becomes MQRC_CONNECTION_BROKEN, which callers retry;
    anything else (a missing table, a bad statement) is a defect and keeps its own
    traceback, so that a service never retries a schema error forever."""
    try:
        yield
    except MQError:
        raise
    except Exception as exc:
        if not unavailable(exc):
            raise
        raise MQError(
            Reason.MQRC_CONNECTION_BROKEN, f"database unavailable: {getattr(exc, 'orig', exc)}"
        ) from exc


@contextmanager
def _waiting() -> Iterator[None]:
    """Log a wait for another unit of work's claim turn (PostgreSQL) that lasted long: its
    owner was slow, or stopped until the server ended it (``queues.sql``, claim turns)."""
    started = time.monotonic()
    yield
    waited = time.monotonic() - started
    if waited >= claims.WAIT_LOGGED_SECONDS:
        log.warning("waited for an earlier claim turn", extra={"seconds": round(waited, 1)})


_I = {name: index for index, name in enumerate(sql.COLUMNS)}
_ROW_MSG_ID = MESSAGE_COLUMNS.index("msg_id")  # in a stored row for a put (_row)
(
    _EXPIRES_AT,
    _BODY,
    _MSG_ID,
    _CORREL_ID,
    _FORMAT,
    _ENCODING,
    _CCSID,
    _MSG_TYPE,
    _REPORT,
    _REPLY_TO_Q,
    _REPLY_TO_QMGR,
    _USER_ID,
    _PERSISTENCE,
    _PRIORITY,
    _PUT_APPL_TYPE,
    _PUT_APPL_NAME,
    _PUT_DATE,
    _PUT_TIME,
    _BACKOUT_COUNT,
) = (
    _I[name]
    for name in (
        "expires_at",
        "body",
        "msg_id",
        "correl_id",
        "format",
        "encoding",
        "ccsid",
        "msg_type",
        "report",
        "reply_to_q",
        "reply_to_qmgr",
        "user_id",
        "persistence",
        "priority",
        "put_appl_type",
        "put_appl_name",
        "put_date",
        "put_time",
        "backout_count",
    )
)


def row_to_message(row: Any, now: int) -> Message:
    """A stored row (a tuple or Row in table column order) as the Message a get returns:
    positional access, because this runs once per message gotten."""
    expires_at = row[_EXPIRES_AT]
    expiry = MQEI_UNLIMITED if expires_at is None else max(1, -(-(expires_at - now) // 100))
    return Message(
        bytes(row[_BODY]),
        bytes(row[_MSG_ID]),
        bytes(row[_CORREL_ID]),
        row[_FORMAT],
        row[_ENCODING],
        row[_CCSID],
        row[_MSG_TYPE],
        row[_REPORT],
        row[_REPLY_TO_Q],
        row[_REPLY_TO_QMGR],
        row[_USER_ID],
        row[_PERSISTENCE],
        row[_PRIORITY],
        expiry,
        row[_PUT_APPL_TYPE],
        row[_PUT_APPL_NAME],
        row[_PUT_DATE],
        row[_PUT_TIME],
        row[_BACKOUT_COUNT],
    )


def _fixed_id(value: bytes, field: str) -> bytes:
    if len(value) > ID_LENGTH:
        raise MQError(Reason.MQRC_MD_ERROR, f"{field} is {len(value)} bytes; at most {ID_LENGTH}")
    return value.ljust(ID_LENGTH, b"\x00")


def _fixed_text(value: str, length: int, field: str) -> str:
    if len(value) > length:
        raise MQError(Reason.MQRC_MD_ERROR, f"{field} {value!r} is longer than {length} characters")
    return value


def _normalised_descriptor(m: Message) -> tuple[bytes, bytes, str]:
    """Pad short ids and formats as MQ does, or raise MQRC_MD_ERROR naming the field
    that does not fit (the slow path of a put: most messages need nothing)."""
    for value, length, name in (
        (m.reply_to_q, 48, "ReplyToQ"),
        (m.reply_to_qmgr, 48, "ReplyToQMgr"),
        (m.user_id, USER_ID_LENGTH, "UserIdentifier"),
        (m.put_appl_name, PUT_APPL_NAME_LENGTH, "PutApplName"),
    ):
        _fixed_text(value, length, name)
    return (
        _fixed_id(m.msg_id, "MsgId"),
        _fixed_id(m.correl_id, "CorrelId"),
        _fixed_text(m.format, FORMAT_LENGTH, "Format").ljust(FORMAT_LENGTH),
    )


def message_row(
    definition: QueueDefinition | None,
    queue: str,
    m: Message,
    now: int,
    stamp: tuple[str, str],
    qmgr: str,
    user_id: str,
    appl_name: str,
) -> tuple[Any, ...]:
    """The stored row for a put of ``m`` to ``queue`` (values in MESSAGE_COLUMNS order):
    checks what MQPUT checks, and fills what the queue manager fills (MsgId, the queue's
    default priority and persistence, put date and time, user and application).

    Pure, so that every writer stores the same row: the unit of work, and the Spark
    pipeline's tasks that stage deliveries in parallel. Depth is the caller's business.
    """
    if definition is None:
        raise UnknownObject(queue)
    if not definition.put_enabled:
        raise MQError(Reason.MQRC_PUT_INHIBITED, f"puts to {queue} are inhibited")
    if len(m.body) > definition.max_msg_length:
        raise MQError(
            Reason.MQRC_MSG_TOO_BIG_FOR_Q,
            f"message of {len(m.body)} bytes exceeds MAXMSGL {definition.max_msg_length} of {queue}",
        )
    if not -1 <= m.priority <= 9:
        raise MQError(Reason.MQRC_PRIORITY_ERROR, f"priority {m.priority} is not -1..9")
    if m.persistence not in (0, 1, 2):
        raise MQError(Reason.MQRC_PERSISTENCE_ERROR, f"persistence {m.persistence} is not 0, 1 or 2")
    if m.expiry != MQEI_UNLIMITED and m.expiry <= 0:
        raise MQError(Reason.MQRC_EXPIRY_ERROR, f"expiry {m.expiry} must be positive or -1")
    msg_id, correl_id, fmt = m.msg_id, m.correl_id, m.format
    if (
        len(msg_id) != ID_LENGTH
        or len(correl_id) != ID_LENGTH
        or len(fmt) != FORMAT_LENGTH
        or len(m.reply_to_q) > 48
        or len(m.reply_to_qmgr) > 48
        or len(m.user_id) > USER_ID_LENGTH
        or len(m.put_appl_name) > PUT_APPL_NAME_LENGTH
    ):
        msg_id, correl_id, fmt = _normalised_descriptor(m)
    # A short MsgId is NUL-padded, so one that pads to MQMI_NONE asks for a new MsgId too.
    if msg_id == MQMI_NONE:
        msg_id = new_msg_id(qmgr)
    return (
        queue,
        m.priority if m.priority != MQPRI_PRIORITY_AS_Q_DEF else definition.def_priority,
        None if m.expiry == MQEI_UNLIMITED else now + m.expiry * 100,
        msg_id,
        correl_id,
        fmt,
        m.encoding,
        m.ccsid,
        m.msg_type,
        m.report,
        m.reply_to_q,
        m.reply_to_qmgr,
        m.user_id or user_id,
        m.persistence if m.persistence != MQPER_PERSISTENCE_AS_Q_DEF else definition.def_persistence,
        m.expiry,
        m.put_appl_type,
        m.put_appl_name or appl_name,
        m.put_date or stamp[0],
        m.put_time or stamp[1],
        m.backout_count,
        now,
        m.body,
        correl_id if definition.indexed_by_correl_id else None,
    )


def dead_letter_message(
    queue: str, m: Message, reason: int, dest_qmgr: str, appl_name: str, stamp: tuple[str, str]
) -> Message:
    """``m`` as it goes on the dead-letter queue: its body behind an MQDLH saying why
    and where it was going; the rest of its descriptor kept, as MQ keeps it."""
    encoding = m.encoding if m.encoding & MQENC_INTEGER_MASK in (1, 2) else MQENC_NATIVE
    header = dlh.DeadLetterHeader(
        reason=reason,
        dest_q_name=queue,
        dest_q_mgr_name=dest_qmgr,
        encoding=m.encoding,
        ccsid=m.ccsid,
        format=m.format,
        put_appl_type=MQAT_UNIX,
        put_appl_name=appl_name,
        put_date=stamp[0],
        put_time=stamp[1],
    )
    return derive(
        m,
        body=dlh.encode(header, encoding) + m.body,
        format=MQFMT_DEAD_LETTER_HEADER,
        encoding=encoding,
        ccsid=1208,
    )


class UnitOfWork:
    """Puts and gets under syncpoint: all of them happen, or none."""

    def __init__(self, qm: QueueManager, connection: Connection) -> None:
        self._qm = qm
        self.connection = connection
        self._definitions: dict[str, QueueDefinition | None] = {}
        self._deltas: dict[str, int] = {}
        # Messages put and gotten per queue, for the queues' counters (the depth's statement).
        self._puts: dict[str, int] = {}
        self._gets: dict[str, int] = {}
        self._gotten: list[int] = []
        self._arrivals: set[str] = set()
        self._turn: int | None = None  # see get_batch(in_turn=True)
        self._progress_shown = time.monotonic()
        self._transaction = connection.begin()

    @property
    def open(self) -> bool:
        return self._transaction.is_active

    @property
    def gotten(self) -> tuple[int, ...]:
        """The ids of the messages this unit of work has gotten, in order: a getter names by
        them the messages its later gets should pass over (``skip``)."""
        return tuple(self._gotten)

    # -- definitions -----------------------------------------------------------------------

    def definitions(self, names: Iterable[str]) -> dict[str, QueueDefinition | None]:
        """Queue definitions as this unit of work sees them (one query for all unknown names)."""
        wanted = set(names)
        missing = wanted - self._definitions.keys()
        if missing:
            found = {
                row["name"]: QueueDefinition.from_mapping(row)
                for row in sql.select_definitions(self.connection, missing)
            }
            for name in missing:
                self._definitions[name] = found.get(name)
        return {name: self._definitions[name] for name in wanted}

    def ensure_queue(self, name: str, **attrs: Any) -> None:
        """DEFINE QLOCAL unless the queue exists, which is left as it is: a queue made on demand
        (an MQTT session's) committed with the work that needs it, not in a transaction of its
        own."""
        check_queue_name(name)
        sql.insert_queue_if_new(self.connection, _definition_values(name, check_attributes(attrs), now_ms()))
        self._definitions.pop(name, None)

    def ensure_queues(self, names: Sequence[str], **attrs: Any) -> None:
        """:meth:`ensure_queue` of many queues with the same attributes, in one statement (a
        wave of MQTT clients connecting opens many sessions in one batch)."""
        if not names:
            return
        checked, now = check_attributes(attrs), now_ms()
        for name in names:
            check_queue_name(name)
        sql.insert_queues_if_new(self.connection, [_definition_values(name, checked, now) for name in names])
        for name in names:
            self._definitions.pop(name, None)

    def delete_queues(self, names: Sequence[str]) -> None:
        """:meth:`delete_queue` of many queues, a statement per table for them all (a wave of
        MQTT clients leaving ends many sessions in one batch); those already gone are passed
        over, and a queue a live process holds open is refused (2042) before anything goes."""
        if not names:
            return
        now = now_ms()
        held = sql.select_opens_of(self.connection, names)
        for name in names:
            opens.check_delete(name, opens.live((row for row in held if row.queue == name), now))
        sql.purge_queues(self.connection, names)
        sql.delete_queues(self.connection, names)
        for name in names:
            for pending in (self._deltas, self._puts, self._gets):
                pending.pop(name, None)
            self._arrivals.discard(name)
            self._definitions[name] = None

    def delete_queue(self, name: str) -> int:
        """DELETE QLOCAL with PURGE, committed with the rest of this unit of work (a queue made
        on demand goes with the work that ends its use, not in a transaction of its own):
        refused (2042) while a process holds it open; returns the number purged. What this
        unit of work put on it or got from it goes with it."""
        opens.check_delete(name, opens.live(sql.select_opens(self.connection, name), now_ms()))
        purged = sql.purge_queue(self.connection, name)
        if not sql.delete_queue(self.connection, name):
            raise UnknownObject(name)
        for pending in (self._deltas, self._puts, self._gets):
            pending.pop(name, None)
        self._arrivals.discard(name)
        self._definitions[name] = None
        return purged

    def depth(self, queue: str) -> int:
        """Depth including this unit of work's uncommitted puts and gets."""
        definition = self.definitions([queue])[queue]
        if definition is None:
            raise UnknownObject(queue)
        return definition.depth + self._deltas.get(queue, 0)

    # -- put -------------------------------------------------------------------------------

    def put(self, queue: str, message: Message) -> bytes:
        """Put one message; returns its MsgId."""
        return self.put_many([(queue, message)]).msg_ids[0]

    def put_many(
        self, items: Iterable[tuple[str, Message]], *, dead_letter_failures: bool = False
    ) -> PutResult:
        """Put many messages with one bulk insert.

        A message that cannot be put (unknown queue, full, too big, put
        inhibited) raises before anything of this call is written; with
        ``dead_letter_failures`` it goes to the dead-letter queue with an MQDLH
        saying why, as MQ's channels and broker do, and the others go through.
        """
        items = list(items)
        definitions = self.definitions(queue for queue, _ in items)
        now = now_ms()
        stamp = mq_date_time(now)
        rows: list[tuple[Any, ...]] = []
        msg_ids: list[bytes] = []
        failed: list[tuple[int, int]] = []
        pending: dict[str, int] = {}
        for index, (queue, message) in enumerate(items):
            try:
                row = self._row(definitions.get(queue), queue, message, now, stamp, pending)
            except MQError as exc:
                if not dead_letter_failures or exc.reason == Reason.MQRC_MD_ERROR:
                    raise
                failed.append((index, exc.reason))
                msg_ids.append(message.msg_id)
                continue
            rows.append(row)
            msg_ids.append(row[_ROW_MSG_ID])
        if failed:
            dead = [
                self._dead_letter_row(items[i][0], items[i][1], reason, now, stamp, pending)
                for i, reason in failed
            ]
            rows.extend(dead)
            for (index, _), row in zip(failed, dead, strict=True):
                msg_ids[index] = row[_ROW_MSG_ID]
        with _translated():
            sql.insert_messages(self.connection, rows)
        for queue, count in pending.items():
            self._deltas[queue] = self._deltas.get(queue, 0) + count
            self._puts[queue] = self._puts.get(queue, 0) + count
        self._arrivals.update(pending)
        return PutResult(msg_ids, failed)

    def dead_letter(self, queue: str, message: Message, reason: int, dest_qmgr: str = "") -> bytes:
        """Put ``message`` on the dead-letter queue with an MQDLH: it was bound for ``queue``."""
        now = now_ms()
        pending: dict[str, int] = {}
        row = self._dead_letter_row(queue, message, reason, now, mq_date_time(now), pending, dest_qmgr)
        with _translated():
            sql.insert_messages(self.connection, [row])
        self._deltas[DEAD_LETTER_QUEUE] = self._deltas.get(DEAD_LETTER_QUEUE, 0) + 1
        self._puts[DEAD_LETTER_QUEUE] = self._puts.get(DEAD_LETTER_QUEUE, 0) + 1
        self._arrivals.add(DEAD_LETTER_QUEUE)
        msg_id: bytes = row[_ROW_MSG_ID]
        return msg_id

    def _row(
        self,
        definition: QueueDefinition | None,
        queue: str,
        m: Message,
        now: int,
        stamp: tuple[str, str],
        pending: dict[str, int],
    ) -> tuple[Any, ...]:
        row = message_row(
            definition, queue, m, now, stamp, self._qm.name, self._qm.user_id, self._qm.appl_name
        )
        assert definition is not None
        depth = definition.depth + self._deltas.get(queue, 0) + pending.get(queue, 0)
        if depth >= definition.max_depth:
            raise MQError(Reason.MQRC_Q_FULL, f"{queue} is full (MAXDEPTH {definition.max_depth})")
        pending[queue] = pending.get(queue, 0) + 1
        return row

    def _dead_letter_row(
        self,
        queue: str,
        m: Message,
        reason: int,
        now: int,
        stamp: tuple[str, str],
        pending: dict[str, int],
        dest_qmgr: str = "",
    ) -> tuple[Any, ...]:
        dead = dead_letter_message(queue, m, reason, dest_qmgr or self._qm.name, self._qm.appl_name, stamp)
        definition = self.definitions([DEAD_LETTER_QUEUE])[DEAD_LETTER_QUEUE]
        # The dead-letter queue must take the message; if it cannot, the caller's error stands.
        return self._row(definition, DEAD_LETTER_QUEUE, dead, now, stamp, pending)

    # -- get -------------------------------------------------------------------------------

    def get(self, queue: str, *, msg_id: bytes | None = None, correl_id: bytes | None = None) -> Message:
        """Destructively get the next message (or the one with this MsgId/CorrelId); 2033 if none."""
        found = self.get_batch(queue, 1, msg_id=msg_id, correl_id=correl_id)
        if not found:
            raise NoMessageAvailable(queue)
        return found[0]

    def get_batch(
        self,
        queue: str,
        limit: int,
        *,
        msg_id: bytes | None = None,
        correl_id: bytes | None = None,
        in_turn: bool = False,
        skip: Collection[int] = (),
    ) -> list[Message]:
        """Destructively get up to ``limit`` messages in priority-then-FIFO order, passing
        over those whose ids (:attr:`gotten`) are in ``skip``.

        ``in_turn``: units of work that claim this way commit in the order they claimed,
        however many processes claim concurrently (on PostgreSQL; SQLite's single writer
        orders them anyway). Call :meth:`await_turn` before the first write that another
        claimant may also need to lock; :meth:`commit` calls it in any case."""
        definition = self._gettable(queue)
        now = now_ms()
        claim = partial(
            sql.claim_messages,
            self.connection,
            queue,
            limit,
            now,
            msg_id=None if msg_id is None else _fixed_id(msg_id, "MsgId"),
            correl_id=None if correl_id is None else _fixed_id(correl_id, "CorrelId"),
            correl_indexed=definition.indexed_by_correl_id,
            skip=skip,
        )
        with _translated():
            self._sweep_expired(queue, now)
            rows = self._claim_in_turn(claim) if in_turn else claim()
        if rows:
            self._got(queue, len(rows))
            self._gotten.extend(row[sql.ID] for row in rows)
        return [row_to_message(row, now) for row in rows]

    def _gettable(self, queue: str) -> QueueDefinition:
        definition = self.definitions([queue])[queue]
        if definition is None:
            raise UnknownObject(queue)
        if not definition.get_enabled:
            raise MQError(Reason.MQRC_GET_INHIBITED, f"gets from {queue} are inhibited")
        return definition

    def claim_batch(self, queue: str, limit: int, *, skip: Collection[int] = ()) -> Claim:
        """Mark up to ``limit`` messages (none whose id is in ``skip``), in get order, as
        this queue manager's claim when this unit of work commits (``queues.claims``). They
        stay on the queue, invisible to other getters, until a later unit of work consumes
        the claim (:meth:`consume`)."""
        self._gettable(queue)
        now = now_ms()
        claimant = self._qm.claimant
        with _translated():
            self._sweep_expired(queue, now)
            turn, rows = claims.mark(self.connection, claimant, queue, limit, now, skip)
        ids = cast(tuple[int, ...], tuple(row[sql.ID] for row in rows))
        messages = tuple(row_to_message(row, now) for row in rows)
        return Claim(queue, claimant.token, turn, ids, messages)

    def consume(self, claim: Claim) -> None:
        """Get the claimed messages in this unit of work (:class:`queues.claims.ClaimLost`
        if any is gone); a backout puts them back with BackoutCount + 1, as a get's does."""
        with _translated():
            claims.consume(self.connection, claim)
        self._got(claim.queue, len(claim.ids))
        self._gotten.extend(claim.ids)

    def _got(self, queue: str, count: int) -> None:
        """``count`` messages gotten from ``queue``: its depth goes down, its get counter up."""
        self._deltas[queue] = self._deltas.get(queue, 0) - count
        self._gets[queue] = self._gets.get(queue, 0) + count

    def _claim_in_turn(self, claim: Callable[[], list[tuple[Any, ...]]]) -> list[tuple[Any, ...]]:
        """Claim while claims are serialised, and draw a turn if this is the unit of work's
        first claim that takes messages. The serialising lock belongs to the session, so a
        failure in between closes the connection rather than hand the lock to the pool."""
        conn = self.connection
        try:
            with _waiting():
                sql.lock_claims(conn, int(self._qm.turn_timeout * 1000))
            rows = claim()
            if rows and self._turn is None:
                self._turn = sql.take_turn(conn) or 0  # 0: nothing to wait for
            else:
                sql.unlock_claims(conn)
        except BaseException:
            conn.invalidate()
            raise
        return rows

    def await_turn(self) -> None:
        """Wait until the unit of work that claimed before this one has ended (see
        :meth:`get_batch`); at once when it has, or when this one took no turn. One that
        makes no progress is ended within the queue manager's turn timeout: by the server
        when it stalls between statements (``queues.sql``, claim turns), by this wait's watch
        when it stalls inside one (``queues.turn_watch``); a long wait is logged."""
        if self._turn:
            watch = turn_watch.watching(self._qm.engine, self._turn, self._qm.turn_timeout)
            with _translated(), _waiting(), watch:
                sql.await_turn(self.connection, self._turn)
            self._turn = 0

    def show_progress(self) -> None:
        """Tell the claims waiting for this unit of work's turn that it is still at work (a
        long batch, routed in memory): on PostgreSQL a statement, so that the server does not
        end it as idle; on SQLite a touch of the claimant's lock file (``queues.claims``).
        At most once a second (a quarter of the turn timeout, if that is shorter) whatever the
        calls: cheap to call for every message."""
        now = time.monotonic()
        if now - self._progress_shown < min(1.0, self._qm.turn_timeout / 4):
            return
        self._progress_shown = now
        if self._turn is not None:
            with _translated():
                sql.ping(self.connection)
        if "claimant" in self._qm.__dict__:
            self._qm.claimant.touch()

    def _sweep_expired(self, queue: str, now: int) -> None:
        """Remove expired messages, at most once a second per queue per process."""
        swept = self._qm._swept
        if now - swept.get(queue, 0) < EXPIRY_SWEEP_MS:
            return
        if len(swept) >= SWEPT_KEPT:  # a queue swept over a second ago counts as never swept
            swept = self._qm._swept = {q: at for q, at in swept.items() if now - at < EXPIRY_SWEEP_MS}
        swept[queue] = now
        removed = sql.delete_expired(self.connection, queue, now)
        if removed:
            self._deltas[queue] = self._deltas.get(queue, 0) - removed

    def remove(self, rows: Sequence[Any]) -> None:
        """Delete already-read message rows (backout processing moves them elsewhere)."""
        sql.delete_messages_by_id(self.connection, [row.id for row in rows])
        for row in rows:
            self._deltas[row.queue] = self._deltas.get(row.queue, 0) - 1

    def _requeue_backed_out(self, queue: str, message: Message, definition: QueueDefinition) -> str:
        """Put a message past its backout threshold on the queue's backout queue (BOQNAME),
        or on the dead-letter queue where there is none or it refuses the message; returns
        where it went. Raises, having written nothing, when neither takes it."""
        requeue = definition.backout_requeue_q
        if requeue and self.definitions([requeue])[requeue] is not None:
            result = self.put_many([(requeue, message)], dead_letter_failures=True)
            return DEAD_LETTER_QUEUE if result.dead_lettered else requeue
        self.dead_letter(queue, message, Reason.MQRC_BACKOUT_THRESHOLD_REACHED)
        return DEAD_LETTER_QUEUE

    # -- syncpoint -------------------------------------------------------------------------

    def commit(self) -> None:
        self.await_turn()
        with _translated():
            # The depth rows are locked last, for one statement and the commit only; the
            # arrival notification goes with them (a rollback withdraws it with the rest).
            index_types = {name: d.index_type for name, d in self._definitions.items() if d is not None}
            refused = sql.apply_depth(
                self.connection, self._deltas, index_types, self._arrivals, self._puts, self._gets
            )
            if refused:
                self._transaction.rollback()
                self._gotten.clear()
                raise MQError(
                    Reason.MQRC_Q_FULL,
                    f"queue full, deleted or re-indexed at commit: {', '.join(refused)}",
                )
            self._transaction.commit()
        if self._arrivals:
            self._qm.notifier.committed(self._arrivals)

    @contextmanager
    def pipelined(self) -> Iterator[None]:
        """Carry out the block's writes and commit: on PostgreSQL the block's statements and the
        COMMIT go to the server together (:func:`queues.sql.committed_together`), so they must
        be the driver-level writes that read nothing back, in a unit of work that has done
        nothing else (no puts, gets or claim turn, whose commit reads the queues' counters).
        Elsewhere, and for any other unit of work, an ordinary commit after the block."""
        if self._turn is not None or self._deltas or not sql.can_commit_together(self.connection):
            yield
            self.commit()
            return
        with _translated(), sql.committed_together(self.connection):
            yield
        self._transaction.commit()  # the driver's transaction has ended: nothing is sent

    def backout(self) -> None:
        """Undo everything; messages gotten here go back with BackoutCount + 1."""
        gotten = self._gotten
        self._gotten = []
        with _translated():
            self._transaction.rollback()
        if gotten:
            self._qm._backed_out(gotten)


class QueueManager:
    """A named queue manager whose queues and messages live in one SQL database."""

    def __init__(
        self,
        engine: Engine,
        *,
        appl_name: str | None = None,
        user_id: str | None = None,
        turn_timeout: float = claims.TURN_TIMEOUT_SECONDS,
    ) -> None:
        self.engine = engine
        # How long a claim turn may go without progress before it is taken from its owner
        # (``queues.claims``, and ``queues.sql``'s claim turns on PostgreSQL).
        self.turn_timeout = turn_timeout
        name = self.stored_name(engine)
        if name is None:
            raise MQError(
                Reason.MQRC_Q_MGR_NOT_AVAILABLE,
                "this database holds no queue manager: run 'broker db upgrade'",
            )
        self.name: str = name
        self.appl_name = (appl_name or os.path.basename(sys.argv[0]) or "python")[:PUT_APPL_NAME_LENGTH]
        self.user_id = (user_id or getpass.getuser())[:USER_ID_LENGTH]
        self.notifier = ArrivalNotifier(engine)
        self._swept: dict[str, int] = {}
        self._puts: GroupCommit[tuple[str, Message], bytes] = GroupCommit(self._put_each)
        self._writer = writer_lock(engine.url.database) if is_sqlite(engine) else None
        self._read_options: dict[str, Any] = (
            {READ_ONLY: True} if is_sqlite(engine) else {READ_ONLY: True, "isolation_level": "AUTOCOMMIT"}
        )

    @classmethod
    def connect(cls, url: str, **kwargs: Any) -> QueueManager:
        return cls(make_engine(url), **kwargs)

    @staticmethod
    def stored_name(engine: Engine) -> str | None:
        """The name of the queue manager whose database this is; None before :meth:`create`."""
        with _translated(), engine.connect().execution_options(**{READ_ONLY: True}) as conn:
            row = sql.select_qmgr(conn) if inspect(conn).has_table("mq_qmgr") else None
        return None if row is None else str(row.name)

    @staticmethod
    def create(engine: Engine, name: str, description: str = "") -> None:
        """Name the queue manager of a migrated database and define its dead-letter queue.

        Idempotent for the same name; a database already owned by another queue
        manager is refused, because every stored MsgId and route carries the name.
        """
        check_qmgr_name(name)
        now = now_ms()
        with _translated(), engine.begin() as conn:
            row = sql.select_qmgr(conn)
            if row is not None and row.name != name:
                raise MQError(
                    Reason.MQRC_Q_MGR_NAME_ERROR,
                    f"this database belongs to queue manager {row.name!r}, not {name!r}",
                )
            if row is None:
                sql.insert_qmgr(conn, name, now, description)
            if sql.select_queue(conn, DEAD_LETTER_QUEUE) is None:
                sql.insert_queue(
                    conn, _definition_values(DEAD_LETTER_QUEUE, {"max_depth": MAX_MAX_DEPTH}, now)
                )

    def close(self) -> None:
        self.notifier.close()
        if "claimant" in self.__dict__:
            self.claimant.close()
        self.engine.dispose()

    def __enter__(self) -> QueueManager:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- units of work ---------------------------------------------------------------------

    @cached_property
    def claimant(self) -> Claimant:
        """This queue manager as the owner of claims (made at its first claim). Liveness is
        a file lock beside a SQLite database; PostgreSQL routers claim with row locks."""
        return Claimant(self.engine.url.database if is_sqlite(self.engine) else None)

    def await_claim_turn(self, claim: Claim) -> None:
        """Wait until every batch of ``claim``'s queue claimed before it has been consumed
        or given back (``queues.claims``). An earlier owner that makes no progress within
        the turn timeout loses its claims, and :class:`ClaimLost` says to claim again."""
        try:
            claims.await_turn(self.claimant, claim, self.reading, self.turn_timeout)
        except claims.TurnStalled as stalled:
            self._take_claims(stalled.queue, stalled.owner, stalled.idle)
            raise

    def _take_claims(self, queue: str, owner: str, idle: float) -> None:
        """Give back the claims on ``queue`` of a live owner that has made no progress for
        ``idle`` seconds; should it carry on, its consume finds them gone and writes nothing."""
        with self.unit_of_work() as uow:
            released = sql.release_claims(uow.connection, queue, owner)
        log.warning(
            "claim turn taken over: its owner made no progress",
            extra={"queue": queue, "owner": owner, "idle_seconds": round(idle, 1), "messages": released},
        )

    def await_claims(self, queue: str, poll_seconds: float = 0.005) -> None:
        """Wait until no running router holds a claim on ``queue`` (a job taking a stream
        over from its routers); dead routers' claims are given back, and so are those of
        routers that make no progress within the turn timeout. SQLite only: a PostgreSQL
        router's claim is its transaction."""
        if not is_sqlite(self.engine):
            return
        while True:
            with self.unit_of_work() as uow:
                live = claims.live_claims(uow.connection, self.claimant, queue)
            if not live:
                return
            for owner, _low, _high in live:
                idle = self.claimant.idle_seconds(owner)
                if owner != self.claimant.token and idle > self.turn_timeout:
                    self._take_claims(queue, owner, idle)
            time.sleep(poll_seconds)

    def release_claim(self, claim: Claim) -> None:
        """Give a claim's messages back to the queue, where they are next again."""
        with self.unit_of_work() as uow:
            sql.release_claims(uow.connection, claim.queue, claim.owner, claim.turn)

    @contextmanager
    def unit_of_work(self, *, read_only: bool = False, on: Connection | None = None) -> Iterator[UnitOfWork]:
        """Commit when the block ends normally; back out if it raises. ``read_only``: a
        unit of work that only reads, and on SQLite never waits for (or blocks) a writer.
        ``on``: a connection the caller holds for many units of work (left open), rather than
        one from the pool; a caller that does is the only user of it."""
        options = {READ_ONLY: True} if read_only else {}
        with _translated(), self._connected(on, options) as connection:
            uow = UnitOfWork(self, connection)
            try:
                yield uow
            except BaseException:
                if uow.open:
                    uow.backout()
                raise
            if uow.open:
                uow.commit()

    @contextmanager
    def _connected(self, held: Connection | None, options: dict[str, Any]) -> Iterator[Connection]:
        if held is not None:
            yield held
            return
        with self.engine.connect().execution_options(**options) as connection:
            yield connection

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """A read-only transaction that never blocks writers (browse, inquire). On
        PostgreSQL it runs in autocommit: under READ COMMITTED every statement takes its
        own snapshot anyway, and BEGIN and COMMIT would be a round trip each."""
        with (
            _translated(),
            self.engine.connect().execution_options(**self._read_options) as conn,
            conn.begin(),
        ):
            yield conn

    def _backed_out(self, ids: Sequence[int]) -> None:
        """Count the backout; past a queue's threshold, move the message to its backout
        queue, or to the dead-letter queue when it has none. A message that neither takes
        (too big for both, the dead-letter queue deleted) stays where it is, with its count
        raised: a backout never fails for want of somewhere to put what it gave back."""
        with self.unit_of_work() as uow:
            conn = uow.connection
            sql.increment_backout(conn, ids)
            rows = sql.select_messages_by_id(conn, ids)
            definitions = uow.definitions({row.queue for row in rows})
            now = now_ms()
            moved = []
            for row in rows:
                definition = definitions[row.queue]
                if definition is None or not 0 < definition.backout_threshold <= row.backout_count:
                    continue
                try:
                    moved_to = uow._requeue_backed_out(row.queue, row_to_message(row, now), definition)
                except MQError as exc:
                    if exc.reason == Reason.MQRC_CONNECTION_BROKEN:
                        raise
                    log.error(
                        "backout threshold reached; message left on its queue",
                        extra={
                            "queue": row.queue,
                            "msg_id": row.msg_id.hex(),
                            "backout_count": row.backout_count,
                            "reason": exc.reason,
                            "error": exc.detail,
                        },
                    )
                    continue
                moved.append(row)
                log.warning(
                    "backout threshold reached",
                    extra={"queue": row.queue, "msg_id": row.msg_id.hex(), "moved_to": moved_to},
                )
            if moved:
                uow.remove(moved)

    # -- administration --------------------------------------------------------------------

    def define_queue(self, name: str, *, replace_existing: bool = False, **attrs: Any) -> QueueDefinition:
        """DEFINE QLOCAL: 4001 if it exists, unless ``replace_existing`` (MQ's REPLACE), which
        alters it, with the same refusals as :meth:`alter_queue`."""
        check_queue_name(name)
        values = check_attributes(attrs)
        now = now_ms()
        try:
            with _translated(), self.engine.begin() as conn:
                if replace_existing and sql.select_queue(conn, name) is not None:
                    opens.check_alter(name, values, opens.live(sql.select_opens(conn, name), now))
                    sql.update_queue(conn, name, {**values, "altered_at": now})
                else:
                    sql.insert_queue(conn, _definition_values(name, values, now))
        except IntegrityError:
            raise MQError(Reason.MQRCCF_OBJECT_ALREADY_EXISTS, f"queue {name} already exists") from None
        return self.inquire_queue(name)

    def alter_queue(self, name: str, **attrs: Any) -> QueueDefinition:
        """ALTER QLOCAL: refused (2042) where a process holding the queue open could no
        longer use it (``queues.opens``)."""
        values = check_attributes(attrs)
        with _translated(), self.engine.begin() as conn:
            now = now_ms()
            opens.check_alter(name, values, opens.live(sql.select_opens(conn, name), now))
            if not sql.update_queue(conn, name, {**values, "altered_at": now}):
                raise UnknownObject(name)
            if "index_type" in values:  # the messages already there follow the new INDXTYPE
                sql.reindex_correl(conn, name, values["index_type"] == CORRELID)
        return self.inquire_queue(name)

    def delete_queue(self, name: str, *, purge: bool = False) -> int:
        """DELETE QLOCAL: refused (2042) while a process holds the queue open
        (``queues.opens``), and (2055) while messages remain unless ``purge``; returns
        the number purged."""
        with _translated(), self.engine.begin() as conn:
            opens.check_delete(name, opens.live(sql.select_opens(conn, name), now_ms()))
            purged = 0
            if purge:
                purged = sql.purge_queue(conn, name)
                sql.update_queue(conn, name, {"depth": 0})
            if not sql.delete_empty_queue(conn, name):
                if sql.select_queue(conn, name) is None:
                    raise UnknownObject(name)
                raise MQError(Reason.MQRC_Q_NOT_EMPTY, f"queue {name} is not empty; purge it first")
        return purged

    def open_queues(
        self, owner: str, held: Sequence[opens.QueueOpen], lease_ms: int | None = opens.LEASE_MS
    ) -> None:
        """Record (or renew) that ``owner`` holds ``held`` open, replacing what it held
        before, for ``lease_ms`` (the caller renews it well within that), or until
        :meth:`close_queues` with None."""
        until = opens.UNTIL_CLOSED if lease_ms is None else now_ms() + lease_ms
        with _translated(), self.engine.begin() as conn:
            sql.replace_opens(conn, owner, [item.row(until) for item in held])

    def close_queues(self, owner: str) -> None:
        with _translated(), self.engine.begin() as conn:
            sql.delete_opens(conn, owner)

    def delete_abandoned_queues(self, grace_ms: int = ABANDONED_GRACE_MS) -> list[str]:
        """Delete, with their messages, the temporary dynamic queues nobody holds open any more
        (their creator ended without closing them), as MQ deletes them with their connection;
        ``grace_ms`` spares one just defined and not yet opened. Returns their names."""
        now = now_ms()
        deleted = []
        with self.reading() as conn:
            temporary = sql.select_temporary_queues(conn)
        for name in temporary:
            with _translated(), self.engine.begin() as conn:
                row = sql.select_queue(conn, name)
                if row is None or row.created_at > now - grace_ms:
                    continue
                if opens.live(sql.select_opens(conn, name), now):
                    continue
                sql.delete_opens_of(conn, name)
                sql.purge_queue(conn, name)
                sql.update_queue(conn, name, {"depth": 0})
                sql.delete_empty_queue(conn, name)
            deleted.append(name)
        return deleted

    def holders(self, name: str) -> list[opens.Holder]:
        """Who holds ``name`` open now (MQ's DISPLAY QSTATUS TYPE(HANDLE))."""
        return self.holders_of([name])[name]

    def holders_of(self, names: Sequence[str]) -> dict[str, list[opens.Holder]]:
        """Who holds each of ``names`` open now, by owner: one read for a page of queues."""
        rows: list[Any] = []
        if names:
            with self.reading() as conn:
                rows = sorted(sql.select_opens_of(conn, names), key=lambda row: row.owner)
        now = now_ms()
        return {name: opens.live((row for row in rows if row.queue == name), now) for name in names}

    def purge_queue(self, name: str) -> int:
        """CLEAR QLOCAL: remove every message, return how many."""
        with _translated(), self.engine.begin() as conn:
            if sql.select_queue(conn, name) is None:
                raise UnknownObject(name)
            purged = sql.purge_queue(conn, name)
            sql.update_queue(conn, name, {"depth": 0})
        return purged

    def inquire_queue(self, name: str) -> QueueDefinition:
        with self.reading() as conn:
            row = sql.select_queue(conn, name)
        if row is None:
            raise UnknownObject(name)
        return QueueDefinition.from_row(row)

    def list_queues(
        self, pattern: str = "*", *, offset: int = 0, limit: int | None = None
    ) -> list[QueueDefinition]:
        """Queues whose names match ``pattern`` (``*`` and ``?`` wildcards), by name, from the
        ``offset``-th on."""
        with self.reading() as conn:
            rows = sql.select_queues(conn, pattern, offset=offset, limit=limit)
        return [QueueDefinition.from_row(r) for r in rows]

    def count_queues(self, pattern: str = "*") -> int:
        with self.reading() as conn:
            return sql.count_queues(conn, pattern)

    def queue_page(
        self, pattern: str = "*", *, after: str = "", limit: int = 50, descending: bool = False
    ) -> list[QueueHead]:
        """Up to ``limit`` queues matching ``pattern``, by name after ``after`` (before it,
        ``descending``; keyset paging: a page costs the same at the 100,000th queue as at the
        first), each with the time its head message was put. The pattern's literal start
        narrows the rows in SQL; the rest is matched here, reading on until the page is full."""
        prefix = pattern[: min((i for i, c in enumerate(pattern) if c in "*?"), default=len(pattern))]
        found: list[QueueHead] = []
        cursor = after
        while len(found) < limit:
            with self.reading() as conn:
                rows = sql.select_queue_page(
                    conn, after=cursor, prefix=prefix, limit=limit, descending=descending
                )
            if not rows:
                break
            cursor = rows[-1].name
            matching = (r for r in rows if fnmatch.fnmatchcase(r.name, pattern))
            found += [QueueHead(QueueDefinition.from_row(r), r.head_put_at) for r in matching]
        return found[:limit]

    def deepest_queues(self, limit: int = 10) -> list[QueueDefinition]:
        with self.reading() as conn:
            return [QueueDefinition.from_row(r) for r in sql.select_deepest_queues(conn, limit)]

    def depth(self, name: str) -> int:
        return self.inquire_queue(name).depth

    def inquire_queues(self, names: Iterable[str]) -> dict[str, QueueDefinition | None]:
        """The definitions of ``names`` (None for those not defined), with their committed
        depths: one cheap read that never takes the write lock."""
        wanted = list(dict.fromkeys(names))
        with self.reading() as conn:
            found = {
                row["name"]: QueueDefinition.from_mapping(row) for row in sql.select_definitions(conn, wanted)
            }
        return {name: found.get(name) for name in wanted}

    def nonempty(self, names: Sequence[str]) -> list[str]:
        """Which of ``names`` hold committed messages, in the order given."""
        definitions = self.inquire_queues(names)
        return [name for name in names if (d := definitions[name]) is not None and d.depth > 0]

    def nonempty_under(self, prefix: str) -> list[str]:
        """The queues whose names begin with ``prefix`` that hold committed messages."""
        with self.reading() as conn:
            return sql.select_nonempty_names(conn, prefix)

    # -- messaging outside an explicit unit of work ----------------------------------------

    def put(self, queue: str, message: Message) -> bytes:
        """Put one message and commit it; puts made meanwhile by other threads share the
        commit (``queues.group_commit``)."""
        if self._writer is not None and self._writer.held_here():
            # This thread's own open unit of work holds SQLite's write lock: a group led by
            # another thread would wait for it forever, so this put goes alone (and fails
            # when SQLite's busy timeout runs out, as it always did).
            with self.unit_of_work() as uow:
                return uow.put(queue, message)
        return self._puts.submit((queue, message))

    def _put_each(self, items: list[tuple[str, Message]]) -> list[bytes | BaseException]:
        """One unit of work for a group of single puts: a put that fails fails alone."""
        outcomes: list[bytes | BaseException] = []
        with self.unit_of_work() as uow:
            for queue, message in items:
                try:
                    outcomes.append(uow.put(queue, message))
                except MQError as exc:
                    outcomes.append(exc)
        return outcomes

    def put_many(self, items: Iterable[tuple[str, Message]]) -> PutResult:
        with self.unit_of_work() as uow:
            return uow.put_many(items)

    def get(
        self,
        queue: str,
        *,
        wait: float = 0.0,
        msg_id: bytes | None = None,
        correl_id: bytes | None = None,
    ) -> Message:
        """Get and commit one message, waiting up to ``wait`` seconds for it (2033 after)."""
        with self.getting(queue, wait=wait, msg_id=msg_id, correl_id=correl_id) as message:
            return message

    @contextmanager
    def getting(
        self,
        queue: str,
        *,
        wait: float = 0.0,
        msg_id: bytes | None = None,
        correl_id: bytes | None = None,
    ) -> Iterator[Message]:
        """Get one message under syncpoint, waiting up to ``wait`` seconds for it (2033 after):
        it leaves the queue only when the block completes, and an exception in the block
        backs it out (MQGET, then MQCMIT or MQBACK). A program that must hand the message
        on before it is gone (the CLI writing it out) gets it this way."""
        deadline = time.monotonic() + wait
        while True:
            token = self.notifier.token([queue])
            with self.unit_of_work() as uow:
                found = uow.get_batch(queue, 1, msg_id=msg_id, correl_id=correl_id)
                if found:
                    yield found[0]
                    return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise NoMessageAvailable(queue)
            self.notifier.wait([queue], token, remaining)

    def browse(
        self,
        queue: str,
        *,
        after: tuple[int, int] | None = None,
        limit: int = 1,
        msg_id: bytes | None = None,
    ) -> list[Browsed]:
        """Look at messages without removing them; pass the last cursor as ``after`` for the next.
        ``msg_id``: only the messages with this MsgId (MQ's browse with MQMO_MATCH_MSG_ID)."""
        now = now_ms()
        with self.reading() as conn:
            if sql.select_queue(conn, queue) is None:
                raise UnknownObject(queue)
            rows = sql.browse_messages(
                conn, queue, after, limit, now, None if msg_id is None else _fixed_id(msg_id, "MsgId")
            )
        return [Browsed((row.priority, row.id), row_to_message(row, now), row.put_at) for row in rows]

    def wait_for_arrival(self, queues: Sequence[str], token: int, timeout: float) -> None:
        """Block until something may have arrived on ``queues`` since ``token``."""
        self.notifier.wait(queues, token, timeout)

    def arrival_token(self, queues: Sequence[str]) -> int:
        return self.notifier.token(queues)


def _definition_values(name: str, values: dict[str, Any], now: int) -> dict[str, Any]:
    defaults = QueueDefinition(name=name)
    row = {
        "name": name,
        "description": defaults.description,
        "max_depth": defaults.max_depth,
        "max_msg_length": defaults.max_msg_length,
        "backout_threshold": defaults.backout_threshold,
        "backout_requeue_q": defaults.backout_requeue_q,
        "def_priority": defaults.def_priority,
        "def_persistence": defaults.def_persistence,
        "put_enabled": 1,
        "get_enabled": 1,
        "usage": defaults.usage,
        "definition_type": defaults.definition_type,
        "depth": 0,
        "created_at": now,
        "altered_at": now,
    }
    row.update(values)
    return row
