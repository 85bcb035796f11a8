"""Open handles: who has a queue open, as far as this product can know it (MQ Explorer's open
input and output counts; DISPLAY QSTATUS TYPE(HANDLE)).

Two things keep a queue open here. A process records the queues it uses for its whole life
(``queues.opens``): a router its input queues and the dead-letter queue it writes to, a
neighbour link the transmission queue its channel sends from, a broker client (the admin
API's command sender, a CLI command) its reply queue. And an MQTT session's queue is read by
the listener of the node its client is connected to, while it is connected. An application
that puts or gets through the admin API or the ``queues`` library holds nothing open between
its calls, so it has no handle to show.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from admin_api.services import Services
from broker import store
from broker.store import mqtt
from queues.errors import MQError
from queues.opens import Holder, check_delete


@dataclass(frozen=True, slots=True)
class Handle:
    who: str  # for people: what holds it and why
    reads: bool  # MQ's input
    writes: bool  # MQ's output

    @property
    def mode(self) -> str:
        return " and ".join(mode for mode, used in (("input", self.reads), ("output", self.writes)) if used)


@dataclass(frozen=True, slots=True)
class OpenHandles:
    queue: str
    holders: list[Holder]  # the processes that hold it open (``queues.opens``)
    client: Handle | None = None  # the connected MQTT client whose session queue it is

    @property
    def handles(self) -> list[Handle]:
        held = [Handle(holder.describe(), holder.reads, holder.writes) for holder in self.holders]
        return held + ([self.client] if self.client is not None else [])

    @property
    def delete_refused(self) -> str | None:
        """Why deleting the queue is refused now, by the rule the API's delete applies
        (``queues.opens.check_delete``); None when that rule allows it."""
        try:
            check_delete(self.queue, self.holders)
        except MQError as exc:
            return str(exc)
        return None


def open_handles(svc: Services, names: Sequence[str]) -> dict[str, OpenHandles]:
    """The open handles of ``names``: one read of the opens, and where there are MQTT session
    queues among them one of their sessions."""
    holders = svc.qm.holders_of(names)
    found = {name: OpenHandles(name, holders[name]) for name in names}
    if not any(name.startswith(mqtt.QUEUE_PREFIX) for name in names):
        return found
    with svc.qm.reading() as conn:
        clients = store.mqtt_clients(conn, names)
        sessions = mqtt.find_sessions(conn, list(clients.values()))
    for queue, client_id in clients.items():
        session = sessions.get(client_id)
        if session is not None and session.online:
            node = f" to node {session.node}" if session.node else ""
            client = Handle(f"MQTT client {client_id}, connected{node}", reads=True, writes=False)
            found[queue] = OpenHandles(queue, holders[queue], client)
    return found
