"""The sending end of a channel: one agent per link, inside ``broker serve``.

An agent holds the link's sender lease (so that of several broker processes on
one database exactly one sends on each link), moves a batch from the
transmission queue into the outbox under the next batch number, POSTs it to the
neighbour's inbound endpoint, and forgets it once the neighbour confirms. While
the neighbour is down or refuses, the batch waits in the outbox and the rest on
the transmission queue (both visible in status and metrics), and the agent
retries with exponential backoff; everything flows when the link returns.

A stopped channel (``links.stop_channel``) takes nothing more off the transmission
queue and sends nothing until it is started: the agent reads the stop before
each batch, in the transaction that would take the batch. A batch taken before
the stop is finished, as MQ's STOP CHANNEL lets the batch in progress complete.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence

import httpx

from broker.network import links, wire
from queues import Message, QueueManager, UnitOfWork
from queues.errors import MQError
from queues.reasons import Reason

log = logging.getLogger("broker.channel")

CHANNEL_PATH = "/api/v1/channel/batches"
SENDER_HEADER = "X-Broker-QMgr"
LEASE_MS = 15_000
MIN_BACKOFF = 0.2
MAX_BACKOFF = 30.0
# Message data per request: base64 and JSON make 2 MiB about 2.7 MiB, under the 4 MiB
# request body the receiving admin API accepts.
MAX_BATCH_BYTES = 2 * 1024 * 1024


def _batches(messages: Sequence[Message]) -> Iterator[tuple[wire.Frame, ...]]:
    """Frames in groups the receiver takes: at most ``wire.MAX_BATCH_MESSAGES`` each and,
    unless one message alone is bigger, ``MAX_BATCH_BYTES`` of message data."""
    frames: list[wire.Frame] = []
    size = 0
    for message in messages:
        if frames and (len(frames) == wire.MAX_BATCH_MESSAGES or size + len(message.body) > MAX_BATCH_BYTES):
            yield tuple(frames)
            frames, size = [], 0
        frames.append(wire.Frame(message.body, message.expiry))
        size += len(message.body)
    if frames:
        yield tuple(frames)


class ChannelError(Exception):
    """The neighbour did not take the batch (down, refused, or answered nonsense)."""


class ChannelAgent:
    """Moves one link's transmission queue to the neighbour."""

    def __init__(
        self,
        qm: QueueManager,
        link: str,
        owner: str,
        *,
        http: httpx.Client,
        batch_size: int = wire.MAX_BATCH_MESSAGES,
        on_sent: Callable[[int], None] | None = None,
    ) -> None:
        self.qm = qm
        self.link = link
        self.owner = owner
        self.http = http
        self.batch_size = batch_size
        self.on_sent = on_sent
        self.sent = 0
        self.last_error: str | None = None
        self._next: links.InFlight | None = None  # the batch to send next (also in the outbox)
        self._link: links.Link | None = None

    def step(self) -> int:
        """Send one batch; returns the messages the neighbour confirmed.

        In steady state each batch costs one commit: the transaction that confirms a
        batch also renews the lease and moves the next one into the outbox, so that it
        can be sent at once. Everything the agent holds between steps is also in the
        outbox, so a new agent (after a crash) resends exactly the same batch."""
        if self._next is None:
            if not self._has_work():
                return 0
            with self.qm.unit_of_work() as uow:  # a lost database is MQRC_CONNECTION_BROKEN
                self._take(uow)
            if self._next is None:
                return 0
        batch, link = self._next, self._link
        assert link is not None
        self._post(link, batch.payload)
        with self.qm.unit_of_work() as uow:
            links.confirm_batch(uow.connection, self.link, batch.number)
            self._take(uow)
        self.sent += batch.messages
        if self.on_sent is not None:
            self.on_sent(batch.messages)
        return batch.messages

    def _take(self, uow: UnitOfWork) -> None:
        """Renew the lease and line up the batch to send next (the one in the outbox, else a new
        one off the transmission queue), with the link as it is now (an altered URL or token
        counts from here); none while another process holds the lease, or the link is gone or
        its channel stopped."""
        self._next = None
        if not links.acquire_sender(uow.connection, self.link, self.owner, LEASE_MS):
            return
        link = links.get_link(uow.connection, self.link)
        if link is None or link.stopped:
            return
        self._link = link
        self._next = links.in_flight(uow.connection, self.link) or self._store(uow, link)

    def _has_work(self) -> bool:
        """Whether anything waits for the neighbour on a channel that may send, found out
        read-only: an idle agent is woken by every commit in a SQLite database, and must not
        take its write lock then (nor, stopped, every second)."""
        with self.qm.reading() as conn:
            link = links.get_link(conn, self.link)
            if link is None or link.stopped:
                return False
            in_flight = bool(links.outbox_depth(conn).get(self.link))
        return in_flight or bool(self.qm.nonempty([self.link]))

    def _store(self, uow: UnitOfWork, link: links.Link) -> links.InFlight | None:
        """Move up to a batch of messages from the transmission queue into the outbox, as
        one numbered batch or, where the receiver would refuse that many or that much,
        several (sent in turn); returns the first."""
        stored: list[links.InFlight] = []
        for frames in _batches(uow.get_batch(self.link, self.batch_size)):
            number = links.next_batch_number(uow.connection, self.link)
            payload = wire.encode(wire.Batch(self.qm.name, link.epoch, number, frames))
            links.store_batch(uow.connection, self.link, number, payload, len(frames))
            stored.append(links.InFlight(number, payload, len(frames)))
        return stored[0] if stored else None

    def _post(self, link: links.Link, payload: bytes) -> None:
        try:
            response = self.http.post(
                link.url + CHANNEL_PATH,
                content=payload,
                headers={
                    "Authorization": f"Bearer {link.token}",
                    SENDER_HEADER: self.qm.name,
                    "Content-Type": "application/json",
                },
            )
        except httpx.HTTPError as exc:
            raise ChannelError(f"{link.name} unreachable: {exc}") from exc
        if response.status_code != 200:
            raise ChannelError(f"{link.name} answered {response.status_code}: {response.text[:300]}")

    def run(self, stop: threading.Event) -> None:
        """Send until ``stop``; idle waits for arrivals on the transmission queue."""
        backoff = MIN_BACKOFF
        while not stop.is_set():
            token = self.qm.arrival_token([self.link])
            try:
                sent = self.step()
            except (ChannelError, MQError) as exc:
                self._next = None  # re-read from the outbox once the failure has passed
                if isinstance(exc, MQError) and exc.reason not in (
                    Reason.MQRC_CONNECTION_BROKEN,
                    Reason.MQRC_UNKNOWN_OBJECT_NAME,
                ):
                    raise
                self._failed(str(exc), backoff)
                stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
                continue
            if self.last_error is not None:
                log.info("channel running again", extra={"link": self.link})
                self.last_error = None
            backoff = MIN_BACKOFF
            if not sent:
                self.qm.wait_for_arrival([self.link], token, 1.0)
        with self.qm.engine.begin() as conn:
            links.release_sender(conn, self.link, self.owner)

    def _failed(self, error: str, backoff: float) -> None:
        if error != self.last_error:
            log.warning("channel retrying", extra={"link": self.link, "error": error, "wait": backoff})
        self.last_error = error
        try:
            with self.qm.engine.begin() as conn:
                links.record_error(conn, self.link, error)
        except Exception:  # the database may be what failed; the log line says enough
            log.debug("could not record the channel error", exc_info=True)


class ChannelSupervisor:
    """Runs one agent thread per defined link, following links as they are added and removed."""

    def __init__(
        self,
        qm: QueueManager,
        owner: str,
        *,
        batch_size: int = wire.MAX_BATCH_MESSAGES,
        poll_seconds: float = 2.0,
    ) -> None:
        self.qm = qm
        self.owner = owner
        self.batch_size = batch_size
        self.poll_seconds = poll_seconds
        self.http = httpx.Client(timeout=httpx.Timeout(30.0, connect=5.0))
        self.agents: dict[str, tuple[ChannelAgent, threading.Thread, threading.Event]] = {}
        self.sent = 0
        self._lock = threading.Lock()

    def _count(self, messages: int) -> None:
        with self._lock:
            self.sent += messages

    def run(self, stop: threading.Event) -> None:
        unreadable = ""  # the error the links were last read with, logged once
        while not stop.is_set():
            try:
                with self.qm.reading() as conn:
                    wanted = {link.name for link in links.list_links(conn)}
            except MQError as exc:
                if exc.detail != unreadable:
                    log.warning("cannot read links", extra={"error": exc.detail})
                unreadable = exc.detail
                wanted = set(self.agents)
            else:
                if unreadable:
                    log.info("links readable again")
                unreadable = ""
            for name in wanted - self.agents.keys():
                self._start(name)
            for name in self.agents.keys() - wanted:
                self._stop(name)
            stop.wait(self.poll_seconds)
        for name in list(self.agents):
            self._stop(name)
        self.http.close()

    def _start(self, name: str) -> None:
        agent = ChannelAgent(
            self.qm, name, self.owner, http=self.http, batch_size=self.batch_size, on_sent=self._count
        )
        stop = threading.Event()
        thread = threading.Thread(target=self._guard, args=(agent, stop), name=f"channel-{name}", daemon=True)
        self.agents[name] = (agent, thread, stop)
        thread.start()
        log.info("channel started", extra={"link": name})

    def _guard(self, agent: ChannelAgent, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                agent.run(stop)
            except Exception:  # never let one link's defect end the channel for good
                log.exception("channel agent failed; restarting", extra={"link": agent.link})
                stop.wait(MAX_BACKOFF)

    def _stop(self, name: str) -> None:
        _, thread, stop = self.agents.pop(name)
        stop.set()
        thread.join(timeout=10)
        log.info("channel stopped", extra={"link": name})
