"""Where each outbound message in flight of one session is stored, as the gateway keeps it.

The outbound QoS 1/2 messages are stored as runs (``broker.store.mqtt.OutboundRun``: what one
routing batch sent one session, in one row). An acknowledgement names a packet id; this
index says which run holds it and where, so that the batch marks that run's bitmap and
writes it (or deletes the run with its last message) rather than a row per message.
"""

from __future__ import annotations

from collections.abc import Iterable

from broker.store.mqtt import OutboundRun


class Inflight:
    """One session's packet ids in flight, each with its run and its place in the run."""

    __slots__ = ("_where",)

    def __init__(self, runs: Iterable[OutboundRun] = ()) -> None:
        self._where: dict[int, tuple[OutboundRun, int]] = {}
        for run in runs:
            self.add(run)

    def add(self, run: OutboundRun) -> None:
        where = self._where
        fresh = run.pending == len(run.messages)  # a new run: none acknowledged yet
        for index, message in enumerate(run.messages):
            if fresh or not run.is_acked(index):
                where[message[0]] = (run, index)

    def acknowledge(self, packet_id: int) -> OutboundRun | None:
        """The message is acknowledged for good: its run, changed (None: nothing in flight has
        that id); the id may number a new message from now on."""
        found = self._where.pop(packet_id, None)
        if found is None:
            return None
        run, index = found
        return run if run.acknowledge(index) else None

    def release(self, packet_id: int) -> OutboundRun | None:
        """PUBREC came for the message: its run, changed (None: unknown, or PUBREC'd before)."""
        found = self._where.get(packet_id)
        if found is None:
            return None
        run, index = found
        return run if run.release(index) else None
