"""The routing service: the imperative shell around the pure engine.

One loop per process. Each batch is one unit of work: take up to N messages
from an input queue, bring the in-memory state up to date (one version check),
route each message with :func:`broker.core.engine.route`, then write every effect:
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
import threading
import time
from dataclasses import dataclass
from typing import Any

from broker import store
from broker.core import engine
from broker.core.effects import (
    Effect,
    Outcome,
)
from broker.core.engine import failed_outcome
from broker.core.state import BrokerState
from broker.core.system import (
    COMMAND_MSG_LENGTH,
    DEAD_LETTER_MSG_LENGTH,
    QueueProblem,
    input_queues,
    queue_problems,
)
from broker.network.channel import ChannelSupervisor
from broker.service.collector import tune_collector
from broker.service.config import Settings
from broker.service.effect_writer import EffectWriter, UnitOfWorkQueues
from broker.service.health import database_unavailable
from broker.service.held import HOLD_SECONDS, HeldMessages
from broker.service.metrics import BrokerMetrics
from broker.service.provision import ensure_system_queues
from broker.service.signals import on_stop_signals
from broker.service.supervision import Backoff, SupervisedThread
from broker.store import leases
from queues import Claim, ClaimLost, Message, QueueManager, UnitOfWork
from queues.database import is_sqlite, maintenance_warnings
from queues.definition import QueueDefinition
from queues.errors import MQError, UnknownObject
from queues.ids import mq_timestamp_ms, now_ms
from queues.names import DEAD_LETTER_QUEUE
from queues.opens import QueueOpen
from queues.owners import owner_name
from queues.reasons import Reason, reason_name

log = logging.getLogger("broker.service")

ROUTER_TASK = "router"
HOUSEKEEPING_SECONDS = 5.0
IDLE_WAIT_SECONDS = 1.0


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
        self.writer = EffectWriter(qm, settings)
        self.config = self.writer.config
        self.metrics = metrics if metrics is not None else BrokerMetrics()
        self.inputs = input_queues(self.config.streams)
        self.instance = owner_name("router")
        self.started_at = now_ms()
        self._stop = threading.Event()
        self._last_housekeeping = 0.0
        self.channels: ChannelSupervisor | None = None
        # SQLite: an optional pause to gather larger batches; off by default since routing
        # holds no lock (docs/performance.md, latency); PostgreSQL never pauses.
        self._linger = settings.sqlite_linger_ms / 1000 if is_sqlite(qm.engine) else 0.0
        # SQLite routes outside its one write lock through claims; a PostgreSQL batch's
        # claim is its transaction's row locks (``queues.claims``).
        self._claims = is_sqlite(qm.engine)
        self._ahead: dict[str, Claim] = {}  # the next batch of a backlog, claimed with the last
        self._held = HeldMessages()  # messages nothing would take, passed over for a while
        self._problems: dict[tuple[str, int], QueueProblem] = {}  # as last logged
        self._altered: dict[str, tuple[int, int] | None] = {}  # when the queues read were last changed

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
        on_stop_signals(self.stop)

    def prepare(self) -> None:
        with self.qm.unit_of_work() as uow:
            for queue in self.config.streams:
                leases.ensure(uow.connection, leases.stream_resource(queue))
        created = ensure_system_queues(self.qm, self.config.streams)
        if created:
            log.info("system queues defined", extra={"queues": ",".join(created)})
        for warning in maintenance_warnings(self.qm.engine):
            log.warning("database settings", extra={"advice": warning})

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
            thread = SupervisedThread("channels", self.channels.run, self.metrics.health)
            thread.start()
        try:
            self.hold_queues()
            self._loop()
        finally:
            self._stop.set()
            if thread is not None:
                thread.join(15)
            for claim in self._ahead.values():
                self._give_back(claim)
            self.heartbeat()
            self.qm.close_queues(self.instance)
            log.info("broker stopped", extra={"qmgr": self.qm.name})

    def held_queues(self) -> list[QueueOpen]:
        """The queues this router cannot work without, for as long as it runs: what it
        routes from and the dead-letter queue (``queues.opens``: deleting them, or
        inhibiting what it does with them, is refused meanwhile). A neighbour's
        transmission queue is held by the link itself (``broker.admin.neighbours``)."""
        qmgr = self.config.qmgr
        held = [
            QueueOpen(queue, f"broker {qmgr} routes from it", reads=True, min_msg_length=COMMAND_MSG_LENGTH)
            for queue in self.inputs
        ]
        held.append(
            QueueOpen(
                DEAD_LETTER_QUEUE,
                f"broker {qmgr} puts what it cannot route or deliver on it",
                writes=True,
                min_msg_length=DEAD_LETTER_MSG_LENGTH,
            )
        )
        return held

    def hold_queues(self) -> None:
        self.qm.open_queues(self.instance, self.held_queues())

    def _loop(self) -> None:
        log.info(
            "broker started",
            extra={
                "qmgr": self.qm.name,
                "inputs": ",".join(self.inputs),
                "batch_size": self.settings.batch_size,
            },
        )
        health = self.metrics.health
        health.watch(ROUTER_TASK, threading.current_thread().is_alive)
        backoff = Backoff()
        while not self.stopping:
            try:
                token = self.qm.arrival_token(self.inputs)
                routed = self.run_once()
                health.succeeded(ROUTER_TASK)
                backoff.reset()
                if not routed:
                    if not self.stopping:
                        self.qm.wait_for_arrival(self.inputs, token, IDLE_WAIT_SECONDS)
                elif routed < self.settings.batch_size and self._linger:
                    self._stop.wait(self._linger)
            except MQError as exc:
                if exc.reason != Reason.MQRC_CONNECTION_BROKEN:
                    raise
                if health.failed(ROUTER_TASK, exc):
                    self.metrics.record_error("database", exc.detail)
                self.writer.forget()
                self._stop.wait(backoff.next())

    def run_once(self) -> int:
        """One round over every input queue; returns how many messages were routed."""
        routed = 0
        for queue in self._routable():
            if self.stopping:
                break
            routed += self.route_queue(queue).messages
        if time.monotonic() - self._last_housekeeping >= HOUSEKEEPING_SECONDS:
            self.housekeeping()
        return routed

    def _routable(self) -> list[str]:
        """The inputs that hold messages and may be got from, read with the dead-letter queue
        in one look at the queue definitions. A missing or inhibited queue is an operator's
        business, not a reason to stop: it is logged when it goes wrong and when it is right
        again (``/ready`` and ``/status`` report it meanwhile), and the rest is routed."""
        definitions = self.qm.inquire_queues([*self.inputs, DEAD_LETTER_QUEUE])
        self._note_problems(queue_problems(definitions, self.inputs))
        self._note_alterations(definitions)
        return [
            name
            for name in self.inputs
            if (d := definitions[name]) is not None and d.get_enabled and d.depth > 0
        ]

    def _note_problems(self, problems: list[QueueProblem]) -> None:
        found = {(p.queue, p.reason): p for p in problems}
        for key, problem in found.items():
            if key not in self._problems:
                log.error("broker queue unusable", extra=problem.fields())
                self.metrics.record_error(f"queue {problem.queue}", problem.describe())
        for key, problem in self._problems.items():
            if key not in found:
                log.info("broker queue usable again", extra=problem.fields())
        self._problems = found

    def _note_alterations(self, definitions: dict[str, QueueDefinition | None]) -> None:
        """Held messages are tried again as soon as a queue they depend on is defined or
        altered (``broker.service.held``): an operator who makes room sees them go at once."""
        altered = {
            name: None if d is None else (d.created_at, d.altered_at) for name, d in definitions.items()
        }
        if altered != self._altered and self._altered:
            released = self._held.release_all()
            if released:
                log.info("queues altered; trying held messages again", extra={"messages": released})
        self._altered = altered

    # -- batches ---------------------------------------------------------------------------

    def route_queue(self, queue: str, limit: int | None = None) -> BatchResult:
        """Route one batch from ``queue``; a batch that fails is retried message by message.
        A queue that cannot be got from (deleted or inhibited meanwhile) routes nothing."""
        try:
            return self._route_queue(queue, limit or self.settings.batch_size)
        except MQError as exc:
            if not _input_unusable(exc, queue):
                raise
            log.warning("input queue unusable; passing over it", extra={"queue": queue, "error": exc.detail})
            return BatchResult(0, [])

    def _route_queue(self, queue: str, size: int) -> BatchResult:
        try:
            return self._batch(queue, size)
        except ClaimLost as exc:
            # Not the batch's fault: its messages were purged, or a router that claimed
            # before it died. Its routing changed the in-memory state: reload, claim again.
            self.writer.forget()
            log.info("claim lost; claiming again", extra={"queue": queue, "error": exc.detail})
            return BatchResult(0, [])
        except MQError as exc:
            if exc.reason == Reason.MQRC_CONNECTION_BROKEN:
                # The batch changed the in-memory state and took a state version before its
                # commit failed: reload, or the next batch would miss other processes' changes.
                self.writer.forget()
                raise
            if _input_unusable(exc, queue):
                raise
            failure: BaseException = exc
        except Exception as exc:  # a defect or a constraint: isolate the message that causes it
            if database_unavailable(exc):  # the driver's own error, from a hot path
                self.writer.forget()
                raise MQError(Reason.MQRC_CONNECTION_BROKEN, f"database unavailable: {exc}") from exc
            failure = exc
        self.writer.forget()
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
        self._ensure_state()
        if self._claims:
            return self._claimed_batch(queue, size)
        started = time.perf_counter()
        with self.qm.unit_of_work() as uow:
            if queue in self.config.streams and self._leased(uow, queue):
                return BatchResult(0, [])
            # Batches of a stream commit in the order they were claimed, so that routers
            # sharing it keep its publications in order (docs/operations.md, scaling out).
            messages = uow.get_batch(
                queue, size, in_turn=queue in self.config.streams, skip=self._held.ids(queue)
            )
            if not messages:
                return BatchResult(0, [])
            outcomes, effects = self._route_all(messages, self.writer.state_in(uow), queue, uow)
            uow.await_turn()  # before the writes that lock what the previous batch also locks
            dead = self.writer.write(uow, effects)
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
        if claim is None or self.writer.state is None:
            with self.qm.unit_of_work() as uow:
                if claim is None:
                    claim = self._claim(uow, queue, size)
                    if claim is None:
                        return BatchResult(0, [])
                self.writer.state_in(uow)
        state = self.writer.state
        assert state is not None
        messages = list(claim.messages)
        try:
            with self.qm.unit_of_work(read_only=True) as reader:
                state.queues = UnitOfWorkQueues(reader)
                outcomes, effects = self._route_all(messages, state, queue, reader)
            self.qm.await_claim_turn(claim)
            with self.qm.unit_of_work() as uow:
                uow.consume(claim)
                dead = self.writer.write(uow, effects)
                full = len(messages) == size and not self.stopping
                ahead = self._claim(uow, queue, size) if full else None
                if ahead is not None:
                    self.writer.state_in(uow)
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
        claim = uow.claim_batch(queue, size, skip=self._held.ids(queue))
        return claim if claim.messages else None

    def _give_back(self, claim: Claim) -> None:
        """Put a failed batch's messages back at the head of their queue. If even that
        fails, this router's next claim (or, should it die, another's) gives them back."""
        try:
            self.qm.release_claim(claim)
        except Exception as exc:
            log.warning("claim not given back yet", extra={"queue": claim.queue, "error": repr(exc)})

    def _route_all(
        self, messages: list[Message], state: BrokerState, queue: str, uow: UnitOfWork
    ) -> tuple[list[Outcome], list[Effect]]:
        """Route a batch in order, each message seeing the state the ones before it left;
        ``uow`` shows the batch's progress meanwhile, so that a long batch does not look
        like a stopped router to the ones waiting for its claim turn."""
        source = engine.source_of(state, queue)
        now = now_ms()
        outcomes: list[Outcome] = []
        effects: list[Effect] = []
        for message in messages:
            uow.show_progress()
            outcome = self._route(message, source, state, now, queue)
            state.apply_all(outcome.effects)
            outcomes.append(outcome)
            effects.extend(outcome.effects)
        return outcomes, effects

    def _ensure_state(self) -> None:
        """Load the whole state, when there is none, before a batch claims anything: a long
        load must not happen while this router holds a claim turn, which the routers behind
        it would wait for, and take from it after the turn timeout."""
        if self.writer.state is None:
            with self.qm.unit_of_work() as uow:
                self.writer.state_in(uow)

    def _leased(self, uow: UnitOfWork, queue: str) -> bool:
        """Whether a Spark job holds the stream's lease (``broker.store.leases``): the shared
        row lock taken here makes the job wait until this batch has committed (on SQLite,
        until the claim it precedes has been consumed)."""
        holder = leases.holder(uow.connection, leases.stream_resource(queue), now_ms())
        if holder is not None:
            log.debug("stream leased; not routing it", extra={"queue": queue, "holder": holder})
        return holder is not None

    def _route(self, message: Message, source: Any, state: BrokerState, now: int, queue: str) -> Outcome:
        try:
            return engine.route(message, source, state, now)
        except Exception as exc:  # the engine must never stop the loop, whatever the input
            log.exception("routing failed", extra={"queue": queue, "msg_id": message.msg_id.hex()})
            self.metrics.record_error("route", repr(exc))
            return failed_outcome(message, queue, self.config.qmgr, now, f"internal error: {exc!r}")

    def _dead_letter_first(self, queue: str, failure: BaseException) -> BatchResult:
        """Move the first message of ``queue`` to the DLQ: it fails even alone. One that the
        DLQ refuses too is set aside (:meth:`_set_aside`); either way the loop moves on."""
        taken: tuple[int, Message] | None = None
        try:
            with self.qm.unit_of_work() as uow:
                messages = uow.get_batch(queue, 1, skip=self._held.ids(queue))
                if not messages:
                    return BatchResult(0, [])
                taken = (uow.gotten[-1], messages[0])
                outcome = failed_outcome(messages[0], queue, self.config.qmgr, now_ms(), repr(failure))
                self.writer.write(uow, outcome.effects)
        except MQError as exc:
            if taken is None or exc.reason == Reason.MQRC_CONNECTION_BROKEN:
                raise
            self._set_aside(queue, *taken, exc)
            return BatchResult(1, [])
        log.error(
            "message dead-lettered: it cannot be routed",
            extra={"queue": queue, "msg_id": taken[1].msg_id.hex(), "error": repr(failure)},
        )
        self.metrics.record_dead_letters(1)
        return BatchResult(1, [])

    def _set_aside(self, queue: str, message_id: int, message: Message, refusal: MQError) -> None:
        """A message that cannot be routed and that the DLQ refused (its unit of work was
        backed out, so it is back in its place with its backout count raised) goes to its
        queue's backout queue, as a backout past BOTHRESH would move it; without one, or if
        that refuses it too, it stays where it is and this router passes over it
        (``broker.service.held``). Nothing is discarded, and nothing waits behind it."""
        context = {
            "queue": queue,
            "msg_id": message.msg_id.hex(),
            "dead_letter_reason": refusal.reason,
            "dead_letter_error": refusal.detail,
        }
        self.metrics.record_error(f"dead letter {queue}", str(refusal))
        backout_queue = self.qm.inquire_queue(queue).backout_requeue_q
        if backout_queue:
            try:
                with self.qm.unit_of_work() as uow:
                    moving = uow.get_batch(queue, 1, msg_id=message.msg_id, skip=self._held.ids(queue))
                    if moving:
                        uow.put(backout_queue, moving[0])
                log.error(
                    "message moved to its queue's backout queue: the dead-letter queue refused it",
                    extra={**context, "backout_queue": backout_queue},
                )
                return
            except MQError as exc:
                if exc.reason == Reason.MQRC_CONNECTION_BROKEN:
                    raise
                context |= {"backout_queue": backout_queue, "backout_queue_error": str(exc)}
        self._held.hold(queue, message_id)
        log.error(
            "message left on its queue: the dead-letter queue refused it",
            extra={**context, "retry_seconds": HOLD_SECONDS},
        )

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
                self.writer.forget()
                raise
            self._housekeeping_failed(exc)
        except Exception as exc:  # a defect in one round must not end the service
            self._housekeeping_failed(exc)

    def _housekeeping_failed(self, exc: BaseException) -> None:
        self.writer.forget()
        log.exception("housekeeping failed; retrying next round", exc_info=exc)
        self.metrics.record_error("housekeeping", repr(exc))

    def _housekeeping(self) -> None:
        abandoned = self.qm.delete_abandoned_queues()
        if abandoned:
            log.info("abandoned temporary queues deleted", extra={"queues": ",".join(abandoned)})
        with self.qm.unit_of_work() as uow:
            state = self.writer.state_in(uow)
            effects = engine.housekeeping(state, now_ms())
            if effects:
                state.apply_all(effects)
                self.writer.write(uow, effects)
                log.info("subscriptions expired or orphaned", extra={"removed": len(effects)})
            store.prune_changes(uow.connection, now_ms())
        self.hold_queues()
        self.heartbeat()

    def heartbeat(self) -> None:
        with self.qm.unit_of_work() as uow:
            store.write_instance(
                uow.connection, self.instance, "router", self.started_at, self.metrics.as_dict()
            )


def _input_unusable(exc: MQError, queue: str) -> bool:
    """Whether ``exc`` says that ``queue`` itself cannot be got from now (deleted, or its
    gets inhibited, since the round began): an operational state, not a failed message."""
    if isinstance(exc, UnknownObject):
        return exc.name == queue
    return exc.reason == Reason.MQRC_GET_INHIBITED
