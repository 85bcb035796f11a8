"""Queues in the console: the paged list, one queue's attributes and messages, and the
changes (define, alter, purge, delete), each made by the admin API's own handler, so the
rules, the errors and the audit entries are the API's.

Purge and delete ask first: the GET of ``.../purge`` or ``.../delete`` is a page that says
what will go, and only its form's POST does it.

Put and get rates and the depth history come from the queues' counters, sampled each time a
queue is shown (``admin_api.console.rates.QueueRates``); the list's rows refresh themselves
every few seconds (``?live=1``: the rows alone), so an open list shows the last minute.

The list sorts by name across every queue (keyset pages, either way); by depth or a rate it
sorts the page shown, whose queues follow the names: no index orders 100,000 queues by their
depth, which changes with every put and get, and the rates exist only for queues shown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import HTMLResponse

from admin_api.console.handles import OpenHandles, open_handles
from admin_api.console.pages import PREFIX, outcome, render, segment
from admin_api.console.params import MessageCursor, NameCursor, QueueName, QueuePattern
from admin_api.console.rates import QueueRate, QueueRates
from admin_api.console.sessions import Form, FormValues, Operating, Operator, Viewing, field
from admin_api.console.sparklines import Sparkline, sparkline
from admin_api.models import QueueAttributes, QueueCreate
from admin_api.routers import queues as api
from admin_api.services import Svc
from broker.protocol.decoded import decode_message
from queues import Browsed, QueueDefinition, QueueHead, dlh
from queues.definition import DEFINITION_TYPES, INDEX_TYPES, MAX_MAX_DEPTH, MAX_MAX_MSG_LENGTH, USAGES
from queues.errors import MQError
from queues.formatting import body_text, hexdump, message_json, mqmd_fields
from queues.ids import now_ms
from queues.message import MQFMT_DEAD_LETTER_HEADER, Message
from queues.reasons import reason_name

router = APIRouter(prefix=f"{PREFIX}/queues", include_in_schema=False)

PAGE = 50
BROWSE_PAGE = 20
Sort = Literal["name", "-name", "depth", "-depth", "put", "-put", "get", "-get"]
QueueSort = Annotated[Sort, Query()]


def _back(name: str) -> str:
    return f"{PREFIX}/queues/{segment(name)}"


def _choices(values: tuple[str, ...], words: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple((value, words[value]) for value in values)


@dataclass(frozen=True, slots=True)
class Attribute:
    """A queue attribute as the define and alter forms show it: the API's name, words, MQ's
    name, its type, and the values a list offers (as sent, as shown)."""

    name: str
    words: str
    mq: str
    kind: type
    choices: tuple[tuple[str, str], ...] = ()
    high: int | None = None  # the largest number allowed, for the browser to check
    pattern: str | None = None  # what the browser checks a text against
    max_length: int | None = None

    @property
    def label(self) -> str:
        return f"{self.words} ({self.mq})"

    @property
    def number(self) -> bool:
        return self.kind is int and not self.choices

    def shown(self, queue: QueueDefinition) -> str:
        """The queue's value as the form sends it."""
        value = getattr(queue, self.name)
        return str(int(value)) if self.kind is bool else str(value)

    def typed(self, text: str) -> Any:
        if self.kind is str:
            return text
        if not text.isdigit():
            raise ValueError(f"{self.name}: {text!r} is not a whole number of 0 or more")
        return bool(int(text)) if self.kind is bool else int(text)


ENABLED = (("1", "enabled"), ("0", "inhibited"))
NAME_FORM = r"[A-Za-z0-9._\/%]{1,48}"  # a queue name, as the browser's pattern checks it
DEFAULTS = QueueDefinition("")  # what a define leaves out
ATTRIBUTES = (
    Attribute("description", "Description", "DESCR", str, max_length=64),
    Attribute("max_depth", "Maximum depth", "MAXDEPTH", int, high=MAX_MAX_DEPTH),
    Attribute("max_msg_length", "Maximum message length, bytes", "MAXMSGL", int, high=MAX_MAX_MSG_LENGTH),
    Attribute("backout_threshold", "Backout threshold", "BOTHRESH", int, high=MAX_MAX_DEPTH),
    Attribute("backout_requeue_q", "Backout requeue queue", "BOQNAME", str, pattern=NAME_FORM),
    Attribute("def_priority", "Default priority", "DEFPRTY", int, high=9),
    Attribute(
        "def_persistence",
        "Default persistence",
        "DEFPSIST",
        int,
        (("0", "not persistent"), ("1", "persistent")),
    ),
    Attribute("put_enabled", "Puts", "PUT", bool, ENABLED),
    Attribute("get_enabled", "Gets", "GET", bool, ENABLED),
    Attribute(
        "usage", "Usage", "USAGE", str, _choices(USAGES, {"normal": "normal", "xmitq": "transmission"})
    ),
    Attribute(
        "definition_type",
        "Definition type",
        "DEFTYPE",
        str,
        _choices(
            DEFINITION_TYPES,
            {"predefined": "predefined", "permdyn": "permanent dynamic", "tempdyn": "temporary dynamic"},
        ),
    ),
    Attribute(
        "index_type",
        "Index type",
        "INDXTYPE",
        str,
        _choices(INDEX_TYPES, {"none": "none", "correlid": "CorrelId"}),
    ),
)


def attributes(values: Form, current: QueueDefinition | None = None) -> dict[str, Any]:
    """The attributes filled in on a define or alter form, typed as the API's bodies want them;
    an empty field keeps the default. Given the ``current`` definition (an alter), only those
    that differ from it: an alter changes, and its audit entry names, what the operator changed
    (re-sending the index type would re-key every message)."""
    changes: dict[str, Any] = {}
    for attribute in ATTRIBUTES:
        if attribute.name not in values:
            continue
        text = field(values, attribute.name)
        if not text and (current is None or attribute.kind is not str):
            continue
        value = attribute.typed(text)
        if current is None or value != getattr(current, attribute.name):
            changes[attribute.name] = value
    return changes


@dataclass(frozen=True, slots=True)
class QueueRow:
    """A row of the queue list: the queue, when its next message was put, its rates and depth
    history, and who holds it open."""

    head: QueueHead
    rate: QueueRate
    handles: OpenHandles
    depths: Sparkline | None

    @property
    def queue(self) -> QueueDefinition:
        return self.head.definition


# What a sort by a column orders a page's rows by; "name" pages in SQL instead.
ORDERS: dict[str, Callable[[QueueRow], float | None]] = {
    "depth": lambda row: row.queue.depth,
    "put": lambda row: row.rate.put,
    "get": lambda row: row.rate.get,
}


def in_order(rows: list[QueueRow], sort: str) -> list[QueueRow]:
    """``rows`` (a page, by name) as ``sort`` orders them: by depth or a rate, ascending or
    (``-``) descending, rows without a rate yet last, ties by name."""
    key = ORDERS.get(sort.lstrip("-"))
    if key is None:
        return rows
    known = [row for row in rows if key(row) is not None]
    ordered = sorted(known, key=lambda row: key(row) or 0.0, reverse=sort.startswith("-"))
    return ordered + [row for row in rows if key(row) is None]


# The MQMD as MQ Explorer names its fields, beside the words the console uses.
MQMD_NAMES = {
    "msg_id": "MsgId",
    "correl_id": "CorrelId",
    "format": "Format",
    "encoding": "Encoding",
    "ccsid": "CodedCharSetId",
    "msg_type": "MsgType",
    "report": "Report",
    "reply_to_q": "ReplyToQ",
    "reply_to_qmgr": "ReplyToQMgr",
    "user_id": "UserIdentifier",
    "persistence": "Persistence",
    "priority": "Priority",
    "expiry": "Expiry",
    "put_appl_type": "PutApplType",
    "put_appl_name": "PutApplName",
    "put_date": "PutDate",
    "put_time": "PutTime",
    "backout_count": "BackoutCount",
}
DUMP_BYTES = 4096  # of a body shown as a hex dump; the rest is counted


def shown(found: Browsed) -> dict[str, Any]:
    """A browsed message as the console shows it: every MQMD field, a dead letter's MQDLH
    decoded, the MQRFH2 folders and the ``<psc>`` command decoded
    (``broker.protocol.decoded``), the body as text and as a hex dump with offsets."""
    message = found.message
    dead_letter, message = _dead_letter(message)
    decoded = decode_message(message)
    text = body_text(message.body)
    return {
        "mqmd": message_json(found.message),
        "fields": [(MQMD_NAMES[name], value) for name, value in mqmd_fields(found.message).items()],
        "put_at": found.put_at,
        "dead_letter": dead_letter,
        "rfh2": decoded.as_json() if decoded is not None else None,
        "body_text": text,
        "dump": hexdump(message.body[:DUMP_BYTES]),
        "dump_more": max(0, len(message.body) - DUMP_BYTES),
    }


def _dead_letter(message: Message) -> tuple[dict[str, Any] | None, Message]:
    """A dead letter's MQDLH as the console shows it, and the original message it carries
    (described by the header, so that its MQRFH2 is decoded too); (None, the message) for
    any other message, or one whose header cannot be read."""
    if message.format != MQFMT_DEAD_LETTER_HEADER:
        return None, message
    try:
        header, original = dlh.unwrap(message)
    except MQError:
        return None, message
    return {
        "reason": f"{reason_name(header.reason)} ({header.reason})",
        "destination": f"{header.dest_q_name} on {header.dest_q_mgr_name or '(this queue manager)'}",
        "put_by": f"{header.put_appl_name} (type {header.put_appl_type})",
        "put_at": f"{header.put_date} {header.put_time}",
        "format": header.format.rstrip() or "(none)",
    }, original


def rates(request: Request, shown: list[QueueDefinition]) -> dict[str, QueueRate]:
    sampler: QueueRates = request.app.state.console_queue_rates
    return sampler.observe(now_ms(), shown)


def depth_history(request: Request, rate: QueueRate) -> Sparkline | None:
    sampler: QueueRates = request.app.state.console_queue_rates
    return sparkline(rate.depths, sampler.window_ms)


def queue_rows(request: Request, svc: Svc, page: list[QueueHead]) -> list[QueueRow]:
    found = rates(request, [head.definition for head in page])
    handles = open_handles(svc, [head.definition.name for head in page])
    rows = []
    for head in page:
        rate = found[head.definition.name]
        rows.append(QueueRow(head, rate, handles[head.definition.name], depth_history(request, rate)))
    return rows


@router.get("")
def list_queues(
    request: Request,
    session: Viewing,
    svc: Svc,
    pattern: QueuePattern = "*",
    after: NameCursor = "",
    sort: QueueSort = "name",
    live: bool = False,
) -> HTMLResponse:
    page = svc.qm.queue_page(pattern or "*", after=after, limit=PAGE, descending=sort == "-name")
    last = page[-1].definition.name if len(page) == PAGE else None
    return render(
        request,
        "_queue_rows.html" if live else "queues.html",
        session,
        rows=in_order(queue_rows(request, svc, page), sort),
        pattern=pattern,
        after=after,
        sort=sort,
        next_after=last,
        attributes=ATTRIBUTES,
        defaults=DEFAULTS,
    )


@router.post("")
def define_queue(request: Request, session: Operating, svc: Svc, values: FormValues) -> Response:
    name = field(values, "name")

    def define() -> str:
        body = QueueCreate.model_validate(
            {"name": name, "replace": "replace" in values, **attributes(values)}
        )
        api.define_queue(session.token, svc, body, request, Response())
        return f"Queue {name} defined"

    return outcome(request, f"{PREFIX}/queues?pattern={segment(name)}", define)


@router.get("/{name:name}")
def show_queue(
    request: Request, session: Viewing, svc: Svc, name: QueueName, after: MessageCursor = ""
) -> HTMLResponse:
    definition = svc.qm.inquire_queue(name)
    rate = rates(request, [definition])[name]
    page = svc.qm.browse(name, after=api.cursor(after or None), limit=BROWSE_PAGE)
    return render(
        request,
        "queue.html",
        session,
        queue=definition,
        rate=rate,
        depths=depth_history(request, rate),
        handles=open_handles(svc, [name])[name],
        attributes=ATTRIBUTES,
        messages=[shown(found) for found in page],
        next_after=api.next_cursor(page, BROWSE_PAGE),
    )


@router.post("/{name:name}/alter")
def alter_queue(
    request: Request, session: Operating, svc: Svc, values: FormValues, name: QueueName
) -> Response:
    def alter() -> str:
        changes = attributes(values, svc.qm.inquire_queue(name))
        if not changes:
            return f"Queue {name} unchanged: no attribute differs from its value"
        api.alter_queue(session.token, svc, QueueAttributes.model_validate(changes), request, name)
        return f"Queue {name} altered: {', '.join(sorted(changes))}"

    return outcome(request, _back(name), alter)


@router.get("/{name:name}/purge")
def confirm_purge(request: Request, session: Operator, svc: Svc, name: QueueName) -> HTMLResponse:
    return render(request, "confirm.html", session, action="purge", queue=svc.qm.inquire_queue(name))


@router.post("/{name:name}/purge")
def purge(request: Request, session: Operating, svc: Svc, name: QueueName) -> Response:
    def purge_it() -> str:
        purged = api.purge(session.token, svc, request, name)
        return f"Purged {purged.purged} messages from {name}"

    return outcome(request, _back(name), purge_it)


@router.get("/{name:name}/delete")
def confirm_delete(request: Request, session: Operator, svc: Svc, name: QueueName) -> HTMLResponse:
    return render(request, "confirm.html", session, action="delete", queue=svc.qm.inquire_queue(name))


@router.post("/{name:name}/delete")
def delete_queue(
    request: Request, session: Operating, svc: Svc, values: FormValues, name: QueueName
) -> Response:
    def delete() -> str:
        api.delete_queue(session.token, svc, request, name, purge="purge" in values, force="force" in values)
        return f"Queue {name} deleted"

    return outcome(request, f"{PREFIX}/queues", delete)
