"""The listener's durable work, committed in shared batches (group commit).

Every connection hands its durable work (route a PUBLISH, register a SUBSCRIBE, open a
session, take messages for delivery, record acknowledgements) to the one gateway thread as
a job. The thread takes every job waiting, carries them all out in ONE unit of work and
commits, then answers each job's future: many connections' QoS 1/2 publications cost one
transaction, and a PUBACK or PUBREC is only ever sent for a publication whose routing has
committed.

Publications are routed here, in the listener's process, by the one engine against a
:class:`~broker.service.router.RoutingService`'s in-memory state (kept in step with the
other processes through the change log) and its effects are written by the same code the
routing loop uses. Routing in the listener rather than putting on the stream saves a
second transaction and a wake-up per publication, and is what lets the PUBACK say "routed"
rather than "queued".

A batch that fails is carried out again one job at a time, so one bad job fails alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from broker.core import engine
from broker.core.effects import Effect, Outcome
from broker.core.state import BrokerState
from broker.core.topics import matches
from broker.protocol import pscr
from broker.protocol.mqtt.packets import SUBACK_FAILURE, Connect, Publish
from broker.protocol.mqtt.session import Outbound
from broker.protocol.options import RegOpt
from broker.service.config import Settings
from broker.service.metrics import BrokerMetrics
from broker.service.mqtt import bridge
from broker.service.router import RoutingService
from broker.store import mqtt as sessions
from queues import QueueManager, UnitOfWork
from queues.errors import MQError
from queues.ids import now_ms
from queues.message import Message

log = logging.getLogger("broker.mqtt")

MAX_JOBS_PER_BATCH = 2000
LAZY_SECONDS = 0.05
FETCH_LIMIT = 500  # messages taken from one session queue in one statement


@dataclass
class Batch:
    """One unit of work shared by the jobs of a batch: the state they route against and
    the effects they leave, written together before the commit."""

    uow: UnitOfWork
    state: BrokerState
    now: int
    effects: list[Effect] = field(default_factory=list)
    acknowledged: list[tuple[str, int]] = field(default_factory=list)  # outbound messages to forget

    def flush(self) -> None:
        """Forget the acknowledged outbound messages: one statement for the whole batch, and
        before any of their packet ids is stored again for a new message."""
        sessions.forget_outbound(self.uow.connection, self.acknowledged)
        self.acknowledged.clear()

    def route(self, message: Message, source_queue: str) -> Outcome:
        """Route ``message`` as if taken from ``source_queue``; later jobs see its changes."""
        outcome = engine.route(message, engine.source_of(self.state, source_queue), self.state, self.now)
        self.state.apply_all(outcome.effects)
        self.effects.extend(outcome.effects)
        return outcome


Job = Callable[[Batch], Any]


@dataclass(frozen=True, slots=True)
class Opened:
    present: bool
    awaiting_release: list[int]
    outbound: list[Outbound]
    granted: dict[str, int]


class Gateway:
    """Runs jobs in batches, one transaction each, on its own thread."""

    def __init__(self, qm: QueueManager, settings: Settings, metrics: BrokerMetrics) -> None:
        self.qm = qm
        self.settings = settings
        self.metrics = metrics
        self.router = RoutingService(qm, settings, metrics=metrics)
        self.stream = next(iter(self.router.config.streams))
        self.control = self.router.config.control_queue
        self._jobs: queue.SimpleQueue[tuple[Job, asyncio.Future[Any], bool] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="mqtt-gateway", daemon=True)

    def start(self) -> None:
        """Start the thread; no client of this listener is connected yet (one listener per
        database: a session marked online was cut by a stop or a crash)."""
        with self.qm.unit_of_work() as uow:
            sessions.set_offline(uow.connection)
        self._thread.start()

    def stop(self) -> None:
        """Finish the jobs already handed in, then end the thread."""
        self._jobs.put(None)
        self._thread.join(timeout=30)

    def submit(self, job: Job, *, lazy: bool = False) -> asyncio.Future[Any]:
        """Run ``job`` in the next batch; the future (of the calling loop) gets its result.
        A ``lazy`` job (forgetting acknowledged messages: losing it costs a duplicate QoS 1
        delivery at most, never a loss) does not call for a commit of its own: it waits up
        to ``LAZY_SECONDS`` for a batch that commits anyway."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._jobs.put((job, future, lazy))
        return future

    # -- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        stopping = False
        while not stopping:
            first = self._jobs.get()
            if first is None:
                break
            pending = [first]
            urgent = not first[2]
            deadline = time.monotonic() + LAZY_SECONDS
            while len(pending) < MAX_JOBS_PER_BATCH:
                wait = 0.0 if urgent else deadline - time.monotonic()
                try:
                    item = self._jobs.get(timeout=wait) if wait > 0 else self._jobs.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
                pending.append(item)
                urgent = urgent or not item[2]
            self._batch([(job, future) for job, future, _ in pending])

    def _batch(self, jobs: list[tuple[Job, asyncio.Future[Any]]]) -> None:
        try:
            results = self._commit([job for job, _ in jobs])
        except Exception as exc:
            self.router.state = None  # the in-memory state saw effects that were not committed
            if len(jobs) > 1:
                log.warning("mqtt batch failed; running its jobs one by one", extra={"error": repr(exc)})
                for one in jobs:
                    self._batch([one])
                return
            log.exception("mqtt job failed")
            self.metrics.record_error("mqtt", repr(exc))
            _answer(jobs[0][1], exc, failed=True)
            return
        for (_, future), result in zip(jobs, results, strict=True):
            _answer(future, result)

    def _commit(self, jobs: list[Job]) -> list[Any]:
        with self.qm.unit_of_work() as uow:
            batch = Batch(uow, self.router.state_in(uow), now_ms())
            results = [job(batch) for job in jobs]
            batch.flush()
            self.router.apply_effects(uow, batch.effects)
        return results

    # -- jobs ------------------------------------------------------------------------------

    def open(self, connect: Connect, client_id: str, user_id: str, address: str) -> Job:
        """Open the stored session of ``client_id`` for this connection: a clean session
        starts empty; a persistent one resumes what it had (its queue outlives it)."""

        def job(batch: Batch) -> Opened:
            conn = batch.uow.connection
            stored = sessions.find_session(conn, client_id)
            present = stored is not None and not stored.clean and not connect.clean_session
            if stored is not None and not present:
                self._discard(batch, stored.client_id, stored.queue)
            queue_name = sessions.queue_for(client_id)
            sessions.save_session(
                conn,
                sessions.StoredSession(
                    client_id,
                    queue_name,
                    user_id,
                    connect.clean_session,
                    connect.protocol_level,
                    address,
                    batch.now if stored is None or not present else stored.created_at,
                    batch.now,
                ),
            )
            if not present:
                return Opened(False, [], [], {})
            outbound = [
                Outbound(
                    Publish(row.topic, row.payload, row.qos, row.retain, packet_id=row.packet_id),
                    row.released,
                )
                for row in sessions.unacknowledged(conn, client_id)
            ]
            return Opened(
                True,
                sessions.awaiting_release(conn, client_id),
                outbound,
                sessions.granted(conn, client_id),
            )

        return job

    def offline(self, client_id: str) -> Job:
        """A persistent session's client has gone: it stays, marked offline."""
        return lambda batch: sessions.set_offline(batch.uow.connection, [client_id])

    def close(self, client_id: str, queue_name: str) -> Job:
        """A clean session ends with its connection: subscriptions, rows and messages go."""

        def job(batch: Batch) -> None:
            self._discard(batch, client_id, queue_name)

        return job

    def _discard(self, batch: Batch, client_id: str, queue_name: str) -> None:
        """Deregister the session's subscriptions, drop its rows and the messages queued."""
        batch.route(bridge.discard(queue_name, self.settings.admin_group), self.control)
        sessions.delete_session(batch.uow.connection, client_id)
        if batch.uow.definitions([queue_name])[queue_name] is not None:
            while batch.uow.get_batch(queue_name, FETCH_LIMIT):
                pass

    def publish(self, client_id: str, publish: Publish, user_id: str) -> Job:
        """Route one PUBLISH; a QoS 2 id is recorded in the same commit. Returns whether it
        was routed (False: the principal may not publish there)."""

        def job(batch: Batch) -> bool:
            outcome = batch.route(bridge.publication(publish, user_id), self.stream)
            if publish.retain and not publish.payload:
                batch.route(bridge.retained_deletion(publish.topic, user_id), self.stream)
            if publish.qos == 2 and publish.packet_id is not None:
                sessions.record_received(batch.uow.connection, [(client_id, publish.packet_id)])
            return outcome.completion != pscr.ERROR

        return job

    def subscribe(
        self, client_id: str, queue_name: str, user_id: str, topics: tuple[tuple[str, int], ...]
    ) -> Job:
        """Register each filter; the return code is the QoS granted or 0x80 if refused."""

        def job(batch: Batch) -> list[int]:
            codes: list[int] = []
            granted: list[tuple[str, int]] = []
            for text, qos in topics:
                outcome = batch.route(bridge.registration((text,), queue_name, user_id), self.control)
                if outcome.completion == pscr.ERROR or outcome.refused_topics:
                    codes.append(SUBACK_FAILURE)
                else:
                    codes.append(qos)
                    granted.append((text, qos))
            sessions.grant(batch.uow.connection, client_id, granted)
            return codes

        return job

    def unsubscribe(self, client_id: str, queue_name: str, user_id: str, filters: tuple[str, ...]) -> Job:
        def job(batch: Batch) -> None:
            for text in filters:
                deregistration = bridge.registration(
                    (text,), queue_name, user_id, remove=True, options=RegOpt(0)
                )
                batch.route(deregistration, self.control)
            sessions.revoke(batch.uow.connection, client_id, filters)

        return job

    def released(self, client_id: str, packet_id: int) -> Job:
        """PUBREL: the QoS 2 id is forgotten (a new PUBLISH with it is a new message)."""
        return lambda batch: sessions.forget_received(batch.uow.connection, [(client_id, packet_id)])

    def acknowledged(self, client_id: str, packet_id: int, *, received: bool) -> Job:
        """PUBREC (``received``) marks an outbound QoS 2 message; PUBACK/PUBCOMP forgets one."""
        pairs = [(client_id, packet_id)]
        if received:
            return lambda batch: sessions.release_outbound(batch.uow.connection, pairs)
        return lambda batch: batch.acknowledged.extend(pairs)

    def fetch(self, client_id: str, queue_name: str, ids: list[int], granted: dict[str, int]) -> Job:
        """Take up to ``len(ids)`` publications from the session queue for sending: each at
        the lower of its QoS and the highest granted by a matching filter, QoS 1/2 ones
        numbered with ``ids`` and stored until acknowledged, in the same commit."""

        def job(batch: Batch) -> list[Publish]:
            taken = batch.uow.get_batch(queue_name, len(ids))
            out: list[Publish] = []
            stored: list[sessions.OutboundRow] = []
            free = iter(ids)
            for message in taken:
                try:
                    publish = bridge.delivery(message)
                except MQError as exc:
                    log.warning(
                        "not a publication; dropped", extra={"queue": queue_name, "error": exc.detail}
                    )
                    continue
                qos = min(publish.qos, _granted_qos(granted, publish.topic))
                packet_id = next(free) if qos else None
                publish = Publish(publish.topic, publish.payload, qos, publish.retain, packet_id=packet_id)
                if packet_id is not None:
                    stored.append(
                        sessions.OutboundRow(
                            packet_id, publish.topic, publish.payload, qos, publish.retain, False
                        )
                    )
                out.append(publish)
            if stored:
                batch.flush()
                sessions.store_outbound(batch.uow.connection, client_id, stored)
            return out

        return job


def _granted_qos(granted: dict[str, int], topic: str) -> int:
    """The highest QoS granted by the session's filters that match ``topic`` (one copy is
    delivered however many of them match)."""
    return max((qos for text, qos in granted.items() if matches(text, topic)), default=0)


def _answer(future: asyncio.Future[Any], value: Any, *, failed: bool = False) -> None:
    """Hand a result to the future's loop (the gateway runs on its own thread)."""

    def settle() -> None:
        if future.done():
            return
        if failed:
            future.set_exception(value)
        else:
            future.set_result(value)

    with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits for the answer any more
        future.get_loop().call_soon_threadsafe(settle)
