"""What importing a configuration changes: the broker's configuration against the file's, as
a list of changes, one line of the report each (``create queue APP.IN``, ``alter queue APP.OUT:
max_depth 5000 -> 10000``).

An object the file names and the broker lacks is created; one both have with different values
is altered; one the broker has and the file leaves out is deleted only when pruning, and left
as it is otherwise (a ``leave`` line says so). System queues are never deleted. A neighbour's
token the file leaves out is left as it is. Secrets (link tokens, password hashes) are reported
as changed, never shown.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any, Literal

from broker.admin.config_file import KINDS, Configuration, Kind, Problem

Action = Literal["create", "alter", "delete", "leave"]
CHANGING: tuple[Action, ...] = ("create", "alter", "delete")


@dataclass(frozen=True, slots=True)
class Difference:
    """One attribute that changes, from ``old`` to ``new``."""

    attribute: str
    old: Any
    new: Any
    hidden: bool = False

    def describe(self) -> str:
        if self.hidden:
            return f"{self.attribute} (changed)"
        return f"{self.attribute} {_shown(self.old)} -> {_shown(self.new)}"


@dataclass(frozen=True, slots=True)
class Change:
    """What the import does to one object (``leave``: nothing, though the file leaves it out)."""

    action: Action
    kind: Kind
    current: Any  # the broker's definition; None for a create
    wanted: Any  # the file's; None for a delete or a leave
    differences: tuple[Difference, ...] = ()

    @property
    def name(self) -> str:
        return self.kind.describe(self.wanted if self.wanted is not None else self.current)

    @property
    def changing(self) -> bool:
        return self.action in CHANGING

    def line(self) -> str:
        text = f"{self.action} {self.kind.noun} {self.name}"
        if self.differences:
            return f"{text}: {', '.join(d.describe() for d in self.differences)}"
        return f"{text}: not in the file" if self.action == "leave" else text


def changes(current: Configuration, wanted: Configuration, *, prune: bool) -> list[Change]:
    """The changes that make ``current`` what ``wanted`` says, kind by kind in the file's
    order, each kind's by key; a kind the file leaves out altogether (retained publications
    exported without them) is left as it is."""
    found: list[Change] = []
    for kind in KINDS:
        if getattr(wanted, kind.attribute) is None:
            continue
        have = {kind.key_of(item): item for item in current.items(kind)}
        want = {kind.key_of(item): item for item in wanted.items(kind)}
        for key, item in want.items():
            old = have.get(key)
            if old is None:
                found.append(Change("create", kind, None, item))
            elif differences := _differences(kind, old, item):
                found.append(Change("alter", kind, old, item, differences))
        for key, item in have.items():
            if key not in want and kind.prunable:
                found.append(Change("delete" if prune else "leave", kind, item, None))
    return found


def problems(changes: list[Change], wanted: Configuration, qmgr: str) -> list[Problem]:
    """What keeps the changes from being made, whatever the broker's queues hold: a new
    neighbour without its link's token, and a queue deleted while a subscription the file
    keeps delivers to it."""
    found = []
    for change in changes:
        if change.action == "create" and change.kind.table == "neighbour" and change.wanted.token is None:
            message = "this broker has no such neighbour, and the file has no token for it (export secrets)"
            found.append(wanted.place(change.kind, change.wanted, message))
        elif change.action == "delete" and change.kind.table == "queue":
            users = [s.topic for s in wanted.subscriptions if s.queue == change.name and not s.queue_manager]
            if users:
                message = f"not in the file, but subscription {users[0]} in the file delivers to it"
                found.append(Problem(message, table=change.kind.table, name=change.name))
    return found


def _differences(kind: Kind, old: Any, new: Any) -> tuple[Difference, ...]:
    found = []
    for f in fields(new):
        before, after = getattr(old, f.name), getattr(new, f.name)
        if before == after or (after is None and f.name in kind.kept_if_absent):
            continue
        found.append(Difference(f.name, before, after, f.name in kind.hidden))
    return tuple(found)


def _shown(value: Any) -> str:
    """A value as the report shows it: numbers and names bare, text quoted, lists in brackets."""
    if value is None:
        return "(none)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "[" + ", ".join(_shown(item) for item in value) + "]"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return str(value)
