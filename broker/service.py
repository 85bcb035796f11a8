"""The routing service: the imperative shell around the pure engine.

One loop per process. Each batch is one unit of work: take up to N messages
from an input queue, bring the in-memory state up to date (one version check),
route each message with :func:`broker.engine.route`, then write every effect:
deliveries, replies and forwards with one bulk put, dead letters, subscription
and retained changes; the claimed messages leave the input queue in the same
commit. A crash anywhere before the commit leaves the batch on the queue and
writes nothing; after it, everything is there: exactly once.

A message that breaks the batch (a bug, a database constraint) is isolated:
the batch is retried one message per unit of work and the one that still fails
goes to the dead-letter queue with MQRCCF_COMMAND_FAILED, so the loop never
stalls. A lost database connection is not a poison message: the loop waits,
reconnects and carries on with the batch still on the queue.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from broker import engine, neighbours, pscr, store
from broker.collector import tune_collector
from broker.config import Settings
from broker.effects import (
    REPLY,
    AddSubscription,
    DeadLetter,
    DeleteRetained,
    Effect,
    Outcome,
    Put,
    RemoveSubscription,
    SetRetained,
)
from broker.metrics import BrokerMetrics
from broker.network import links
from broker.network.channel import ChannelSupervisor
from broker.owners import owner_name
from broker.provision import ensure_system_queues
from broker.replies import reply
from broker.spark import lease
from broker.state import BrokerConfig, BrokerState, QueueInfo
from broker.subscription import DEFAULT_SUB_POINT
from broker.system import CONTROL_QUEUE, INTER_BROKER_QUEUE
from queues import Claim, ClaimLost, Message, QueueManager, UnitOfWork, xqh
from queues.database import is_sqlite
from queues.errors import MQError
from queues.ids import mq_timestamp_ms, now_ms
from queues.message import CCSID_UTF8, MQENC_NORMAL, MQFMT_XMIT_Q_HEADER, derive
from queues.reasons import Reason, reason_name

log = logging.getLogger("broker.service")

STATE_EFFECTS = (AddSubscription, RemoveSubscription, SetRetained, DeleteRetained)
HOUSEKEEPING_SECONDS = 5.0
IDLE_WAIT_SECONDS = 1.0


def transmission(put: Put) -> tuple[str, Message]:
    """A put for a neighbour's queue, as MQ does it: onto the transmission queue named
    after that queue manager, wrapped in an MQXQH that says where it is going."""
    m = put.message
    wrapped = derive(
        m,
        body=xqh.encode(put.queue, put.q_mgr, m),
        format=MQFMT_XMIT_Q_HEADER,
        encoding=MQENC_NORMAL,  # the MQXQH's integers are big-endian
        ccsid=CCSID_UTF8,
    )
    return put.q_mgr, wrapped


def failed_outcome(message: Message, queue: str, qmgr: str, now: int, detail: str) -> Outcome:
    """A message the broker cannot route goes to the DLQ with 3008 and, like any other
    refused command, is answered with an error where it asks for an answer (the Spark
    job's tasks treat such a message the same way)."""
    reason = Reason.MQRCCF_COMMAND_FAILED
    effects: list[Effect] = [DeadLetter(message, queue, reason)]
    answer = reply(message, pscr.error(pscr.ResponseItem(reason), None), qmgr, now)
    if answer is not None:
        effects.append(answer)
    return Outcome(
        effects=tuple(effects),
        command=None,
        completion=pscr.ERROR,
        reason=reason,
        detail=detail,
        counts={REPLY: 1} if answer is not None else {},
    )


def broker_config(qmgr: str, settings: Settings) -> BrokerConfig:
    """Stream queues are ``NAME`` (default subscription point) or ``NAME=SubPoint``."""
    streams: dict[str, str] = {}
    for entry in settings.stream_queues:
        name, _, sub_point = entry.partition("=")
        streams[name.strip()] = sub_point.strip() or DEFAULT_SUB_POINT
    return BrokerConfig(qmgr, streams=streams, user_id=settings.admin_group)


class UnitOfWorkQueues:
    """The engine's view of local queues, read through the batch's unit of work."""

    def __init__(self, uow: UnitOfWork) -> None:
        self._uow = uow

    def get(self, name: str, /) -> QueueInfo | None:
        definition = self._uow.definitions([name])[name]
        if definition is None:
            return None
        return QueueInfo(name, temporary=definition.definition_type == "tempdyn")


@dataclass
class BatchResult:
    messages: int
    outcomes: list[Outcome]


class RoutingService:
    """Routes command messages from the broker's input queues until stopped."""

    def __init__(
        self,
        qm: QueueManager,
        settings: Settings,
        *,
        metrics: BrokerMetrics | None = None,
    ) -> None:
        self.qm = qm
        self.settings = settings
        self.config = broker_config(qm.name, settings)
        self.store = store.StateStore(
            self.config, default_allow=settings.default_policy == "allow", admin_group=settings.admin_group
        )
        self.metrics = metrics if metrics is not None else BrokerMetrics()
        self.state: BrokerState | None = None
        self.inputs = [CONTROL_QUEUE, INTER_BROKER_QUEUE, *self.config.streams]
        self.instance = owner_name("router")
        self.started_at = now_ms()
        self._stop = threading.Event()
        self._last_housekeeping = 0.0
        self._linked: set[str] = set()
        self.channels: ChannelSupervisor | None = None
        # SQLite: an optional pause to gather larger batches; off by default since routing
        # holds no lock (docs/performance.md, latency); PostgreSQL never pauses.
        self._linger = settings.sqlite_linger_ms / 1000 if is_sqlite(qm.engine) else 0.0
        # SQLite routes outside its one write lock through claims; a PostgreSQL batch's
        # claim is its transaction's row locks (``queues.claims``).
        self._claims = is_sqlite(qm.engine)
        self._ahead: dict[str, Claim] = {}  # the next batch of a backlog, claimed with the last

    # -- lifecycle -------------------------------------------------------------------------

    def stop(self) -> None:
        """Finish the batch in hand, then return from :meth:`run` (safe from a signal handler)."""
        self._stop.set()
        self.qm.notifier.announce_everything()  # wake an idle wait at once

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT finish the batch in hand, then the loop returns."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop())

    def prepare(self) -> None:
        with self.qm.unit_of_work() as uow:
            for queue in self.config.streams:
                lease.ensure(uow.connection, lease.stream_resource(queue))
        created = ensure_system_queues(self.qm, self.config.streams)
        if created:
            log.info("system queues defined", extra={"queues": ",".join(created)})

    def run(self, *, channels: bool = True) -> None:
        """Route until :meth:`stop`; wakes on arrivals, never busy-polls. With
        ``channels``, a channel agent per neighbour runs beside the loop."""
        self.prepare()
        tune_collector()
        thread = None
        if channels:
            # Channels move full batches whatever the routing batch size: a link's throughput
            # is its batch size per round trip.
            self.channels = ChannelSupervisor(self.qm, self.instance)
            thread = threading.Thread(
                target=self.channels.run, args=(self._stop,), name="channels", daemon=True
            )
            thread.start()
        try:
            self._loop()
        finally:
            self._stop.set()
            if thread is not None:
                thread.join(timeout=15)
            for claim in self._ahead.values():
                self._give_back(claim)
            self.heartbeat()
            log.info("broker stopped", extra={"qmgr": self.qm.name})

    def _loop(self) -> None:
        log.info(
            "broker started",
            extra={
                "qmgr": self.qm.name,
                "inputs": ",".join(self.inputs),
                "batch_size": self.settings.batch_size,
            },
        )
        backoff = 0.1
        while not self.stopping:
            try:
                token = self.qm.arrival_token(self.inputs)
                routed = self.run_once()
                backoff = 0.1
                if not routed:
                    if not self.stopping:
                        self.qm.wait_for_arrival(self.inputs, token, IDLE_WAIT_SECONDS)
                elif routed < self.settings.batch_size and self._linger:
                    self._stop.wait(self._linger)
            except MQError as exc:
                if exc.reason != Reason.MQRC_CONNECTION_BROKEN:
                    raise
                log.warning("database unavailable; retrying", extra={"error": exc.detail, "wait": backoff})
                self.metrics.record_error("database", exc.detail)
                self.state = None
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    def run_once(self) -> int:
        """One round over every input queue; returns how many messages were routed."""
        routed = 0
        for queue in self.qm.nonempty(self.inputs):
            if self.stopping:
                break
            routed += self.route_queue(queue).messages
        if time.monotonic() - self._last_housekeeping >= HOUSEKEEPING_SECONDS:
            self.housekeeping()
        return routed

    # -- batches ---------------------------------------------------------------------------

    def route_queue(self, queue: str, limit: int | None = None) -> BatchResult:
        """Route one batch from ``queue``; a batch that fails is retried message by message."""
        size = limit or self.settings.batch_size
        try:
            return self._batch(queue, size)
        except ClaimLost as exc:
            # Not the batch's fault: its messages were purged, or a router that claimed
            # before it died. Its routing changed the in-memory state: reload, claim again.
            self.state = None
            log.info("claim lost; claiming again", extra={"queue": queue, "error": exc.detail})
            return BatchResult(0, [])
        except MQError as exc:
            if exc.reason == Reason.MQRC_CONNECTION_BROKEN:
                # The batch changed the in-memory state and took a state version before its
                # commit failed: reload, or the next batch would miss other processes' changes.
                self.state = None
                raise
            failure: BaseException = exc
        except Exception as exc:  # a defect or a constraint: isolate the message that causes it
            failure = exc
        self.state = None
        log.warning("batch failed; isolating its messages", extra={"queue": queue, "error": repr(failure)})
        self.metrics.record_error(f"batch {queue}", repr(failure))
        if size == 1:
            return self._dead_letter_first(queue, failure)
        results: list[BatchResult] = []
        for _ in range(size):
            result = self.route_queue(queue, 1)
            if not result.messages:
                break  # the queue ran dry before the failed batch's size was reached
            results.append(result)
        return BatchResult(sum(r.messages for r in results), [o for r in results for o in r.outcomes])

    def _batch(self, queue: str, size: int) -> BatchResult:
        if self._claims:
            return self._claimed_batch(queue, size)
        started = time.perf_counter()
        with self.qm.unit_of_work() as uow:
            if queue in self.config.streams and self._leased(uow, queue):
                return BatchResult(0, [])
            # Batches of a stream commit in the order they were claimed, so that routers
            # sharing it keep its publications in order (docs/operations.md, scaling out).
            messages = uow.get_batch(queue, size, in_turn=queue in self.config.streams)
            if not messages:
                return BatchResult(0, [])
            outcomes, effects = self._route_all(messages, self._state(uow), queue)
            uow.await_turn()  # before the writes that lock what the previous batch also locks
            dead = self._apply(uow, effects)
        self._account(queue, outcomes, dead, time.perf_counter() - started, now_ms(), messages)
        return BatchResult(len(messages), outcomes)

    def _claimed_batch(self, queue: str, size: int) -> BatchResult:
        """SQLite: claim the batch in a short unit of work, route it holding no lock, then
        consume it and write its effects in a second one (``queues.claims``), so that
        publishers and other routers write while this one routes.

        While a backlog lasts (the batch was full), the write also claims the next batch,
        which saves a transaction and, with several routers, keeps each one's writing in
        step with the others' routing instead of queueing every claim behind their writes."""
        started = time.perf_counter()
        claim = self._ahead.pop(queue, None)
        if claim is None or self.state is None:
            with self.qm.unit_of_work() as uow:
                if claim is None:
                    claim = self._claim(uow, queue, size)
                    if claim is None:
                        return BatchResult(0, [])
                self._state(uow)
        assert self.state is not None
        messages = list(claim.messages)
        try:
            with self.qm.unit_of_work(read_only=True) as reader:
                self.state.queues = UnitOfWorkQueues(reader)
                outcomes, effects = self._route_all(messages, self.state, queue)
            self.qm.await_claim_turn(claim)
            with self.qm.unit_of_work() as uow:
                uow.consume(claim)
                dead = self._apply(uow, effects)
                full = len(messages) == size and not self.stopping
                ahead = self._claim(uow, queue, size) if full else None
                if ahead is not None:
                    self._state(uow)
        except BaseException:
            self._give_back(claim)
            raise
        if ahead is not None:
            self._ahead[queue] = ahead
        self._account(queue, outcomes, dead, time.perf_counter() - started, now_ms(), messages)
        return BatchResult(len(messages), outcomes)

    def _claim(self, uow: UnitOfWork, queue: str, size: int) -> Claim | None:
        """The next batch of ``queue`` claimed in ``uow``; None if there is none, or the
        stream is leased to a Spark job."""
        if queue in self.config.streams and self._leased(uow, queue):
            return None
        claim = uow.claim_batch(queue, size)
        return claim if claim.messages else None

    def _give_back(self, claim: Claim) -> None:
        """Put a failed batch's messages back at the head of their queue. If even that
        fails, this router's next claim (or, should it die, another's) gives them back."""
        try:
            self.qm.release_claim(claim)
        except Exception as exc:
            log.warning("claim not given back yet", extra={"queue": claim.queue, "error": repr(exc)})

    def _route_all(
        self, messages: list[Message], state: BrokerState, queue: str
    ) -> tuple[list[Outcome], list[Effect]]:
        """Route a batch in order, each message seeing the state the ones before it left."""
        source = engine.source_of(state, queue)
        now = now_ms()
        outcomes: list[Outcome] = []
        effects: list[Effect] = []
        for message in messages:
            outcome = self._route(message, source, state, now, queue)
            state.apply_all(outcome.effects)
            outcomes.append(outcome)
            effects.extend(outcome.effects)
        return outcomes, effects

    def _leased(self, uow: UnitOfWork, queue: str) -> bool:
        """Whether a Spark job holds the stream's lease (``broker.spark.lease``): the shared
        row lock taken here makes the job wait until this batch has committed (on SQLite,
        until the claim it precedes has been consumed)."""
        holder = lease.holder(uow.connection, lease.stream_resource(queue), now_ms())
        if holder is not None:
            log.debug("stream leased; not routing it", extra={"queue": queue, "holder": holder})
        return holder is not None

    def _state(self, uow: UnitOfWork) -> BrokerState:
        """The state as of this unit of work; a change of neighbours is acted on here:
        a new neighbour learns this broker's proxy subscriptions, a removed one's
        proxies are dropped (and, where they were the last, deregistered onwards)."""
        queues = UnitOfWorkQueues(uow)
        if self.state is None:
            self.state = self.store.load(uow.connection, queues)
        else:
            self.state.queues = queues
            self.state = self.store.refresh(uow.connection, self.state)
        state = self.state
        linked = set(state.neighbours)
        if linked != self._linked:
            effects: list[Effect] = []
            now = now_ms()
            for name in sorted(linked - self._linked):
                if links.mark_synced(uow.connection, name):
                    effects.extend(neighbours.proxies_for(state, name, now))
            for name in sorted(self._linked - linked):
                effects.extend(neighbours.forget(state, name, now))
            state.apply_all(effects)
            uow.await_turn()
            self._apply(uow, effects)
            self._linked = linked
        return state

    def _route(self, message: Message, source: Any, state: BrokerState, now: int, queue: str) -> Outcome:
        try:
            return engine.route(message, source, state, now)
        except Exception as exc:  # the engine must never stop the loop, whatever the input
            log.exception("routing failed", extra={"queue": queue, "msg_id": message.msg_id.hex()})
            self.metrics.record_error("route", repr(exc))
            return failed_outcome(message, queue, self.config.qmgr, now, f"internal error: {exc!r}")

    def _apply(self, uow: UnitOfWork, effects: Sequence[Effect]) -> int:
        """Write a batch's effects in its unit of work; returns how many went to the DLQ."""
        puts: list[tuple[str, Message]] = []
        dead = 0
        for effect in effects:
            if isinstance(effect, Put):
                if not effect.q_mgr:
                    puts.append((effect.queue, effect.message))
                    continue
                if self.state is not None and effect.q_mgr in self.state.neighbours:
                    puts.append(transmission(effect))
                else:
                    uow.dead_letter(
                        effect.queue, effect.message, Reason.MQRC_UNKNOWN_REMOTE_Q_MGR, effect.q_mgr
                    )
                    dead += 1
            elif isinstance(effect, DeadLetter):
                uow.dead_letter(effect.queue, effect.message, effect.reason)
                dead += 1
        if puts:
            dead += len(uow.put_many(puts, dead_letter_failures=True).dead_lettered)
        self.store.write(uow.connection, [e for e in effects if isinstance(e, STATE_EFFECTS)])
        return dead

    def _dead_letter_first(self, queue: str, failure: BaseException) -> BatchResult:
        """Move the first message of ``queue`` to the DLQ: it fails even alone."""
        with self.qm.unit_of_work() as uow:
            messages = uow.get_batch(queue, 1)
            for message in messages:
                outcome = failed_outcome(message, queue, self.config.qmgr, now_ms(), repr(failure))
                self._apply(uow, outcome.effects)
                log.error(
                    "message dead-lettered: it cannot be routed",
                    extra={"queue": queue, "msg_id": message.msg_id.hex(), "error": repr(failure)},
                )
        self.metrics.record_dead_letters(len(messages))
        return BatchResult(len(messages), [])

    def _account(
        self,
        queue: str,
        outcomes: list[Outcome],
        dead: int,
        elapsed: float,
        now: int,
        messages: list[Message],
    ) -> None:
        self.metrics.record(outcomes)
        for outcome in outcomes:
            if outcome.completion != "ok":
                log.warning(
                    "command refused" if outcome.completion == "error" else "command partly refused",
                    extra={
                        "queue": queue,
                        "command": outcome.command,
                        "completion": outcome.completion,
                        "reason": outcome.reason,
                        "reason_name": reason_name(outcome.reason),
                        "refused_topics": ",".join(outcome.refused_topics),
                        "detail": outcome.detail,
                    },
                )
        latencies = [
            max(0.0, (now - put) / 1000)
            for m in messages
            if (put := mq_timestamp_ms(m.put_date, m.put_time)) is not None
        ]
        self.metrics.record_dead_letters(dead)
        self.metrics.record_batch(elapsed, latencies)
        log.info(
            "batch routed",
            extra={
                "queue": queue,
                "messages": len(outcomes),
                "deliveries": sum(o.counts.get("delivery", 0) for o in outcomes),
                "replies": sum(o.counts.get("reply", 0) for o in outcomes),
                "forwards": sum(o.counts.get("forward", 0) for o in outcomes),
                "dead_lettered": dead,
                "ms": round(elapsed * 1000, 2),
            },
        )

    # -- housekeeping ----------------------------------------------------------------------

    def housekeeping(self) -> None:
        """Drop expired and orphaned-temporary subscriptions, prune the change log,
        and publish this instance's statistics. A failure here is logged and retried
        at the next round; it never stops the routing loop."""
        self._last_housekeeping = time.monotonic()
        try:
            self._housekeeping()
        except MQError as exc:
            if exc.reason == Reason.MQRC_CONNECTION_BROKEN:
                self.state = None
                raise
            self._housekeeping_failed(exc)
        except Exception as exc:  # a defect in one round must not end the service
            self._housekeeping_failed(exc)

    def _housekeeping_failed(self, exc: BaseException) -> None:
        self.state = None
        log.exception("housekeeping failed; retrying next round", exc_info=exc)
        self.metrics.record_error("housekeeping", repr(exc))

    def _housekeeping(self) -> None:
        with self.qm.unit_of_work() as uow:
            state = self._state(uow)
            effects = engine.housekeeping(state, now_ms())
            if effects:
                state.apply_all(effects)
                self._apply(uow, effects)
                log.info("subscriptions expired or orphaned", extra={"removed": len(effects)})
            store.prune_changes(uow.connection, now_ms())
        self.heartbeat()

    def heartbeat(self) -> None:
        with self.qm.unit_of_work() as uow:
            store.write_instance(
                uow.connection, self.instance, "router", self.started_at, self.metrics.as_dict()
            )
