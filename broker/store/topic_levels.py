"""The topic tree as operators open it: the names one level below a topic, each with the
subscriptions on it and below it and whether retained publications lie below it.

A level is one aggregate statement: the subscription topics below the node, at most ``limit``
of them (the first in topic order: a range of the topic-head index), grouped in SQL by the
name one level down and whether the topic goes deeper, beside the retained publications'
topics grouped the same way. So a level costs the same under a million subscriptions as under
a thousand, and returns a row per name, not per subscription. Where the subscriptions did not
all fit, the names after the last one counted are found by skipping through the index from
one name to the next (one probe per name, in one recursive statement) and come back uncounted.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Connection,
    Integer,
    Text,
    and_,
    case,
    cast,
    func,
    literal,
    literal_column,
    null,
    select,
    true,
    union_all,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from broker.core.retained import RetainedPublication
from broker.core.topics import SEPARATOR
from broker.store.rows import retained_from_row
from broker.store.schema import TOPIC_HEAD, retained, subscriptions

NAMES = 1_000  # names of one level found past the counted subscriptions, at most
AFTER_SEPARATOR = chr(ord(SEPARATOR) + 1)  # "0": every topic below ``t/`` sorts before ``t0``


class Position(FunctionElement[int]):
    """Where ``needle`` first occurs in ``text`` (1-based; 0: nowhere): SQLite's ``instr``,
    PostgreSQL's ``strpos``, the same arguments in the same order."""

    type = Integer()
    inherit_cache = True


@compiles(Position)
def _instr(element: Position, compiler: SQLCompiler, **kw: Any) -> str:
    return f"instr({compiler.process(element.clauses, **kw)})"


@compiles(Position, "postgresql")
def _strpos(element: Position, compiler: SQLCompiler, **kw: Any) -> str:
    return f"strpos({compiler.process(element.clauses, **kw)})"


@dataclass(frozen=True, slots=True)
class LevelName:
    """A name one level below the node: subscriptions on exactly its topic (``here``) and on
    topics below it (``below``), whether retained publications lie below it, and whether its
    subscriptions were all counted (False: the level had more than were read; the counts are
    those read, none for a name found past them)."""

    name: str
    here: int = 0
    below: int = 0
    retained_below: bool = False
    counted: bool = True

    @property
    def deeper(self) -> bool:
        return self.below > 0 or self.retained_below or not self.counted


@dataclass(frozen=True, slots=True)
class TopicLevel:
    names: list[LevelName]  # in name order
    complete: bool  # every subscription and retained publication below the node was read


def _prefix(under: str) -> str:
    return under + SEPARATOR if under else ""


def _separator(topic: Any, prefix: str) -> Any:
    """Where the first separator past ``prefix`` lies in ``topic``, counted from past it; 0: none."""
    return Position(func.substr(topic, len(prefix) + 1), SEPARATOR)


def _split(topic: Any, prefix: str, at: Any = None) -> tuple[Any, Any]:
    """The name one level below ``prefix`` that ``topic`` lies in, and 1 if it goes deeper;
    ``at``: the topic's ``_separator``, when a statement has it already."""
    at = _separator(topic, prefix) if at is None else at
    start = len(prefix) + 1
    name = case((at > 0, func.substr(topic, start, at - 1)), else_=func.substr(topic, start))
    return name, case((at > 0, 1), else_=0)


def _below(column: Any, prefix: str) -> Any:
    """Topic heads (collated bytewise) starting with ``prefix``: one range of the index."""
    return and_(column >= prefix, column < prefix[:-1] + chr(ord(prefix[-1]) + 1)) if prefix else true()


def _starts(column: Any, prefix: str) -> Any:
    """``column`` starts with ``prefix``, whatever its collation."""
    return func.substr(column, 1, len(prefix)) == prefix if prefix else true()


def _head_below(prefix: str) -> Any:
    """Subscriptions whose topics start with ``prefix``, on the indexed head: exact for a prefix
    shorter than the head, narrowing only for a longer one (the topic itself says)."""
    head = subscriptions.c.topic_head
    if len(prefix) < TOPIC_HEAD:
        return _below(head, prefix)
    return and_(_below(head, prefix[:TOPIC_HEAD]), _starts(subscriptions.c.topic, prefix))


def _grouped(prefix: str, limit: int) -> Any:
    """(kind, name, deeper, count, last head): kind 0 the first ``limit`` subscriptions below
    ``prefix`` in topic order, 1 up to ``limit`` retained publications below it."""
    head = subscriptions.c.topic_head
    # Topics read from the index alone (a head is the topic, or its start); below a prefix as
    # long as a head, from the rows. The separator is computed once, below the LIMIT, which
    # keeps the database from folding it into every use.
    topic = head if len(prefix) < TOPIC_HEAD else subscriptions.c.topic
    scanned = (
        select(topic.label("topic"), _separator(topic, prefix).label("at"), head)
        .where(_head_below(prefix))
        .order_by(head, subscriptions.c.id)
        .limit(limit)
        .subquery()
    )
    kept = (
        select(retained.c.topic, _separator(retained.c.topic, prefix).label("at"), null().label("topic_head"))
        .where(_starts(retained.c.topic, prefix))
        .limit(limit)
        .subquery()
    )
    parts = []
    for kind, part in (("0", scanned), ("1", kept)):
        name, deeper = _split(part.c.topic, prefix, part.c.at)
        parts.append(
            select(
                literal_column(kind, Integer).label("kind"), name.label("name"), deeper.label("deeper")
            ).add_columns(part.c.topic_head)
        )
    rows = union_all(*parts).subquery()
    columns = (rows.c.kind, rows.c.name, rows.c.deeper)
    return select(*columns, func.count(), func.max(rows.c.topic_head)).group_by(*columns)


def topic_level(conn: Connection, under: str = "", *, limit: int = 10_000) -> TopicLevel:
    """The names one level below the topic ``under`` ("" for the top level) that subscriptions
    or retained publications lie in, each with its counts, from at most ``limit`` of each."""
    prefix = _prefix(under)
    counts: Counter[tuple[int, str, int]] = Counter()
    heads = []
    for kind, name, deeper, count, head in conn.execute(_grouped(prefix, limit)):
        if kind == 0 and not deeper and len(prefix + name) == TOPIC_HEAD:
            _count_whole(conn, prefix + name, prefix, counts, limit)  # a name the head cut short
        else:
            counts[kind, name, deeper] += count
        if kind == 0:
            heads.append(head)
    names = {name for _, name, _ in counts}
    last = None  # the head of the last subscription read, when they did not all fit
    if sum(n for (kind, _, _), n in counts.items() if kind == 0) >= limit:
        last = max(heads)
        names.update(names_after(conn, under, last))
    found = [
        LevelName(
            name,
            here=counts.get((0, name, 0), 0),
            below=counts.get((0, name, 1), 0),
            retained_below=(1, name, 1) in counts,
            # every topic of the name sorts before prefix + name + "0": read, if that is not past the last
            counted=last is None or (prefix + name + AFTER_SEPARATOR)[:TOPIC_HEAD] <= last,
        )
        for name in sorted(names)
    ]
    retained_read = sum(n for (kind, _, _), n in counts.items() if kind == 1)
    return TopicLevel(found, complete=last is None and retained_read < limit)


def _count_whole(
    conn: Connection, head: str, prefix: str, counts: Counter[tuple[int, str, int]], limit: int
) -> None:
    """Count the subscriptions of the topic head ``head``, which ends inside a level, by their
    whole topics."""
    statement = select(subscriptions.c.topic).where(subscriptions.c.topic_head == head).limit(limit)
    for topic in conn.execute(statement).scalars():
        name, separator, _ = topic[len(prefix) :].partition(SEPARATOR)
        counts[0, name, int(bool(separator))] += 1


def names_after(conn: Connection, under: str, after: str, *, limit: int = NAMES) -> list[str]:
    """The names one level below ``under`` that subscriptions lie in past the topic (head)
    ``after``, in topic order: each found from the topic before by a probe of the topic-head
    index past every topic of that topic's name, in one recursive statement. Names whose topics
    outgrow the head end the walk."""
    prefix = _prefix(under)
    head = subscriptions.c.topic_head
    seed = select(cast(literal(after), Text).label("topic"), literal_column("0").label("n")).cte(
        "names", recursive=True
    )
    name, _ = _split(seed.c.topic, prefix)
    at = literal(prefix) + name

    def first(*conditions: Any) -> Any:
        found = select(subscriptions.c.topic).where(*conditions, _below(head, prefix))
        return found.order_by(head, subscriptions.c.id).limit(1).scalar_subquery()

    past = head > func.substr(seed.c.topic, 1, TOPIC_HEAD)
    following = func.coalesce(first(past, head < at + SEPARATOR), first(past, head >= at + AFTER_SEPARATOR))
    walk = seed.union_all(
        select(following, seed.c.n + 1).where(
            seed.c.topic.isnot(None), seed.c.n < limit, func.length(at) < TOPIC_HEAD - 1
        )
    )
    found, _ = _split(walk.c.topic, prefix)
    statement = select(found).where(walk.c.n > 0, walk.c.topic.isnot(None)).order_by(walk.c.n)
    return list(conn.execute(statement).scalars())


def retained_at(conn: Connection, under: str, *, limit: int = NAMES) -> list[tuple[int, RetainedPublication]]:
    """The retained publications on the topics exactly one level below ``under``, by topic and
    subscription point: those the level's names show."""
    prefix = _prefix(under)
    _, deeper = _split(retained.c.topic, prefix)
    statement = (
        select(retained)
        .where(_starts(retained.c.topic, prefix), deeper == 0)
        .order_by(retained.c.topic, retained.c.sub_point)
        .limit(limit)
    )
    return [(row.id, retained_from_row(row)) for row in conn.execute(statement)]
