"""Shared subscriptions, ``$share/{ShareName}/{filter}`` (MQTT 5.0 section 4.8.2, and at 3.1.1
as Mosquitto accepts them), as MQ's shared subscriptions.

A shared subscription is one ``<psc>`` subscription of the filter whose destination is the
share's own queue (``broker.store.mqtt.share_queue_for``), its identity set the client ids of
its members (RegSub JoinShared with SubIdentity; DeregSub with SubIdentity to leave, the last
member's leaving ends it). The engine delivers each matching publication once, to that queue or
straight to a member connected to this gateway; the members connected to any node take what the
queue holds in turn. An MQRFH2 application joins the same group with JoinShared and a
SubIdentity of its own, and takes its share by getting from the queue.

The gateway keeps a :class:`Share` per shared subscription with members connected here: which
they are, whose turn is next, and whether its queue may hold messages (then no publication goes
straight to a member before those queued).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from functools import lru_cache

from broker.protocol.mqtt.errors import MqttProtocolError
from broker.protocol.mqtt.names import shared_subscription
from broker.store import mqtt as sessions

SHARE_DESCRIPTION = "MQTT shared subscription"  # the description of a share's queue


class Hand(enum.Enum):
    """What became of a publication offered to a share's members connected here."""

    HANDED = enum.auto()  # a member took it
    WAIT = enum.auto()  # none has room in its in-flight window: it waits on the share's queue
    DROPPED = enum.auto()  # over every member's Maximum Packet Size: dropped, as for one subscriber


@dataclass(eq=False)
class Share:
    """A shared subscription with members connected to this gateway: ``text`` is the filter
    they subscribed with (``$share/{ShareName}/{filter}``), ``members`` their session queues in
    joining order; ``behind``: its queue may hold messages."""

    queue: str
    text: str
    members: dict[str, None] = field(default_factory=dict)
    turn: int = 0
    behind: bool = True

    def in_turn(self) -> list[str]:
        """The members' session queues, the one whose turn it is first (round robin)."""
        names = list(self.members)
        if len(names) < 2:
            return names
        start = self.turn % len(names)
        return names[start:] + names[:start]

    def advance(self, skipped: int) -> None:
        """The member ``skipped`` places after the one whose turn it was took a publication:
        the next goes to the member after it."""
        self.turn += skipped + 1


@lru_cache(maxsize=4096)
def share_of(text: str) -> tuple[str, str, str] | None:
    """(queue, share name, topic filter) of a shared subscription's filter ``text``; None for
    any other filter. A malformed ``$share/`` filter raises (Topic Filter invalid)."""
    found = shared_subscription(text)
    if found is None:
        return None
    share, topic_filter = found
    return sessions.share_queue_for(share, topic_filter), share, topic_filter


def share_queue(text: str) -> str | None:
    """The queue of the shared subscription ``text`` names, or None (a malformed one too)."""
    try:
        found = share_of(text)
    except MqttProtocolError:
        return None
    return None if found is None else found[0]
