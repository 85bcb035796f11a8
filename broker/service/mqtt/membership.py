"""This listener process as a member of the MQTT cluster: its heartbeat, the others' failure
detection, the release of a dead member's sessions, and its own return once it finds itself
declared dead (``docs/decisions.md``, "MQTT nodes"; the decisions are ``broker.core.cluster``'s).

Every :attr:`Membership.period` seconds (a fifth of ``node_timeout``) the member counts up its
beat, reads the others' rows and declares dead those whose beat it has seen unchanged for
``node_timeout`` (at once: a process of its own node that no longer exists); then it releases
the sessions of every dead member nobody has released yet. A member whose beat finds its row
declared dead (it was stopped, or cut off from the database, for longer than the timeout)
closes every connection without touching their sessions, which are others' by now, and joins
again under a new owner name.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from broker.core.cluster import Member, Sighting, overdue, predecessors, sighted, unreleased, watching
from broker.service.mqtt import systopics
from broker.service.mqtt.gateway import Released
from broker.service.mqtt.host import Host
from broker.service.supervision import Backoff
from broker.store import nodes
from queues.ids import now_ms
from queues.owners import dead_here, owner_name

log = logging.getLogger("broker.mqtt")

BEATS_PER_TIMEOUT = 5
MIN_PERIOD = 0.1
SILENT_PERIODS = 2  # beat periods without a beat after which a member is taken for silent
LOOKUP_SECONDS = 0.2  # a fleet waiting on one holder reads its row this often, not each client
LOST = "this node was declared dead by another; its sessions are others' now"


class Membership:
    """The member a listener's gateway is (``gateway.owner``), kept alive and watching."""

    def __init__(self, listener: Host) -> None:
        self.listener = listener
        self.timeout = listener.settings.node_timeout
        self.period = max(MIN_PERIOD, self.timeout / BEATS_PER_TIMEOUT)
        self._sightings: dict[str, Sighting] = {}
        self._looked: float | None = None  # time.monotonic() of the last read of the members
        self._rejoining: asyncio.Task[None] | None = None
        self._looked_up: dict[str, tuple[float, asyncio.Future[Member | None]]] = {}
        self._releases = asyncio.Event()  # set (and replaced) when a member's sessions are released
        self._seen_released: set[str] = set()

    @property
    def takeover_seconds(self) -> float:
        """How long a takeover waits for the holder: longer than a dead one takes to be
        declared dead (``timeout`` and two periods) and released."""
        return 2 * self.timeout + 1.0

    async def start(self) -> None:
        """Before the listener serves: the earlier run of this node (when this is its serving
        process) and the gone processes of this node are dead, and their sessions released."""
        gateway = self.listener.gateway
        found = await asyncio.to_thread(self._members)
        earlier = predecessors(found, gateway.node, gateway.owner) if self.listener.primary else []
        gone = self._gone(found)
        for member in [*earlier, *(m for m in gone if m not in earlier)]:
            await self._declare(member, None)
        await self._release_all(await asyncio.to_thread(self._members))

    async def step(self) -> None:
        """One period: the heartbeat, then a look at the others."""
        if self._rejoining is not None:
            return
        gateway = self.listener.gateway
        counted = systopics.counters(self.listener.metrics)
        alive = await asyncio.to_thread(self._beat, gateway.owner, len(self.listener.clients), counted)
        if not alive:
            self.lost()
            return
        now = time.monotonic()  # before the read: a beat read after it is not older than it
        found = await asyncio.to_thread(self._members)
        if not watching(self._looked, now, self.timeout / 2):
            self._sightings = {}
        self._looked = now
        self._sightings = sighted(found, self._sightings, now)
        released = {member.owner for member in found if member.released}
        if released - self._seen_released:  # by another node: its takeovers waiting here look again
            self._released()
        self._seen_released = released
        gone = {member.owner for member in self._gone(found)}
        declared = []
        for member in overdue(found, self._sightings, now, self.timeout, me=gateway.owner, gone=gone):
            if await self._declare(member, None if member.owner in gone else member.beat):
                declared.append(member)
        await self._release_all([*unreleased(found), *declared])

    async def release_if_gone(self, owner: str) -> bool:
        """A takeover waits on ``owner``: if it is dead (declared, or a process of this node
        that no longer exists), release its sessions now rather than at the next period.
        False while it lives (it is to answer)."""
        member = await self._lookup(owner)
        if member is None or member.released:
            return True
        if self._is_gone(member):
            await self._declare(member, None)
        elif member.alive:
            return False
        await self._release(owner)
        return True

    def silent(self, owner: str) -> bool:
        """Whether ``owner``'s beat has not changed for two periods as this member watches it.
        A live member beats every period, so a silent one is likely dead and will not answer a
        takeover: the clients it held wait for its release, asking it nothing (a fleet
        reconnecting after a node's death costs no statement per client). One that beats again
        is asked as any holder is."""
        sighting = self._sightings.get(owner)
        return sighting is not None and time.monotonic() - sighting.since > SILENT_PERIODS * self.period

    async def released(self, timeout: float) -> None:
        """Wait ``timeout`` seconds, or less if a member's sessions are released meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._releases.wait(), timeout)

    def _released(self) -> None:
        """Wake the takeovers waiting here; what they read of members is read again."""
        self._releases.set()
        self._releases = asyncio.Event()
        self._looked_up.clear()

    def _lookup(self, owner: str) -> asyncio.Future[Member | None]:
        """``owner``'s row, read at most every ``LOOKUP_SECONDS`` whoever asks (the lookups of
        members no longer asked about are forgotten)."""
        now = time.monotonic()
        found = self._looked_up.get(owner)
        if found is None or now - found[0] > LOOKUP_SECONDS:
            self._looked_up = {o: f for o, f in self._looked_up.items() if now - f[0] <= LOOKUP_SECONDS}
            reading = asyncio.ensure_future(asyncio.to_thread(self._member, owner))
            found = self._looked_up[owner] = (now, reading)
        return found[1]

    def lost(self) -> None:
        """This member was declared dead (its heartbeat, or a batch's guard, found out)."""
        if self._rejoining is None and not self.listener.stopping:
            self._rejoining = asyncio.get_running_loop().create_task(self._rejoin(), name="mqtt-rejoin")

    # -- steps -----------------------------------------------------------------------------

    def _gone(self, found: list[Member]) -> list[Member]:
        return [member for member in found if self._is_gone(member)]

    def _is_gone(self, member: Member) -> bool:
        """Whether ``member`` is a live member of this node whose process no longer exists
        (processes of one node share a machine; another node's are judged by their beat)."""
        gateway = self.listener.gateway
        return member.alive and member.node == gateway.node and dead_here(member.owner)

    async def _declare(self, member: Member, seen: int | None) -> bool:
        """Declare ``member`` dead (if its beat is still ``seen``); True if this member did."""
        declared = await asyncio.to_thread(self._declare_dead, member.owner, seen)
        if declared:
            log.warning(
                "mqtt node declared dead",
                extra={
                    "node": member.node,
                    "owner": member.owner,
                    "beat": member.beat,
                    "silent_seconds": round((now_ms() - member.heartbeat_at) / 1000, 1),
                },
            )
        return declared

    async def _release_all(self, members: list[Member]) -> None:
        for owner in dict.fromkeys(member.owner for member in members):
            await self._release(owner)

    async def _release(self, owner: str) -> None:
        gateway = self.listener.gateway
        released: Released | None = await gateway.submit(gateway.release(owner))
        if released is None:
            return
        self._released()
        log.warning(
            "mqtt sessions of a dead node released",
            extra={
                "node": released.member.node,
                "owner": owner,
                "offline": released.persistent,
                "ended": released.clean,
                "wills": released.wills,
            },
        )

    async def _rejoin(self) -> None:
        """Close every connection (their sessions left as they are: others hold or release
        them), forget what the gateway knew of them, and join again under a new name."""
        listener, gateway = self.listener, self.listener.gateway
        log.warning(LOST, extra={"node": gateway.node, "owner": gateway.owner})
        await listener.orphan_all(LOST)
        # Failed in a batch of the old member's by its guard, perhaps: forgotten all the same.
        with contextlib.suppress(Exception):
            await gateway.submit(gateway.forget())
        owner = owner_name("mqtt")
        backoff = Backoff()
        while not listener.stopping:
            try:
                await asyncio.to_thread(self._join, owner)
                break
            except Exception as exc:
                log.warning("mqtt node could not join the cluster again", extra={"error": repr(exc)})
                await asyncio.sleep(backoff.next())
        gateway.owner = owner
        self._looked = None
        self._rejoining = None
        log.info("mqtt node joined the cluster again", extra={"node": gateway.node, "owner": owner})

    # -- on a thread -------------------------------------------------------------------------

    def _members(self) -> list[Member]:
        with self.listener.qm.reading() as conn:
            return nodes.members(conn)

    def _member(self, owner: str) -> Member | None:
        with self.listener.qm.reading() as conn:
            return nodes.member(conn, owner)

    def _beat(self, owner: str, clients: int, counted: dict[str, int]) -> bool:
        with self.listener.qm.unit_of_work() as uow:
            return nodes.beat(uow.connection, owner, clients, now_ms(), counted)

    def _declare_dead(self, owner: str, seen: int | None) -> bool:
        with self.listener.qm.unit_of_work() as uow:
            return nodes.declare_dead(uow.connection, owner, seen, now_ms())

    def _join(self, owner: str) -> None:
        gateway = self.listener.gateway
        with self.listener.qm.unit_of_work() as uow:
            gateway.join(uow.connection, gateway.address, owner)
