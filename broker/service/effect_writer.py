"""The routing state a thread routes against, and the one writer of what routing decides.

The routing loop and the MQTT gateway each hold an :class:`EffectWriter` (a state per
thread: the engine changes it as it routes). It loads the state once, brings it up to date
in each unit of work from the change log, acts on a change of neighbours there, and writes a
batch's effects in that unit of work: messages where :func:`broker.core.writes.write_of`
sends them (the Spark job stages its rows by the same decision), state changes through the
state store, whose change log tells every other writer."""

from __future__ import annotations

from collections.abc import Sequence

from broker import store
from broker.core import neighbours
from broker.core.effects import DeadLetter, Effect, Put
from broker.core.state import BrokerState, QueueInfo
from broker.core.writes import STATE_EFFECTS, write_of
from broker.network import links
from broker.service.config import Settings, broker_config
from queues import Message, QueueManager, UnitOfWork
from queues.ids import now_ms


class UnitOfWorkQueues:
    """The engine's view of local queues, read through the batch's unit of work."""

    def __init__(self, uow: UnitOfWork) -> None:
        self._uow = uow

    def get(self, name: str, /) -> QueueInfo | None:
        definition = self._uow.definitions([name])[name]
        if definition is None:
            return None
        return QueueInfo(name, temporary=definition.definition_type == "tempdyn")


class EffectWriter:
    """A thread's routing state and its writes (see the module)."""

    def __init__(self, qm: QueueManager, settings: Settings) -> None:
        self.config = broker_config(qm.name, settings)
        self.store = store.StateStore(
            self.config, default_allow=settings.default_policy == "allow", admin_group=settings.admin_group
        )
        self.state: BrokerState | None = None
        self._linked: set[str] = set()

    def forget(self) -> None:
        """Drop the state (it saw changes that were not committed): the next unit of work
        loads it again."""
        self.state = None

    def state_in(self, uow: UnitOfWork) -> BrokerState:
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
            self.write(uow, effects)
            self._linked = linked
        return state

    def write(self, uow: UnitOfWork, effects: Sequence[Effect]) -> int:
        """Write a batch's effects in its unit of work: the dead letters as they come, the
        puts in one bulk put, then the state changes; how many went to the DLQ."""
        known = self.state.neighbours if self.state is not None else ()
        puts: list[tuple[str, Message]] = []
        dead = 0
        for effect in effects:
            if not isinstance(effect, Put | DeadLetter):
                continue
            write = write_of(effect, known)
            if write.reason:
                uow.dead_letter(write.queue, write.message, write.reason, write.dest_qmgr)
                dead += 1
            else:
                puts.append((write.queue, write.message))
        if puts:
            dead += len(uow.put_many(puts, dead_letter_failures=True).dead_lettered)
        self.store.write(uow.connection, [e for e in effects if isinstance(e, STATE_EFFECTS)])
        return dead
