"""The gateway's delivery path, in process: deliveries to a connected client that is caught up
go straight from the routing batch (QoS 0 ones without SQL, QoS 1/2 ones stored as outbound
messages in the routing commit), never through its session queue, and never ahead of what
that queue holds."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from broker.core.system import CONTROL_QUEUE
from broker.protocol import rfh2
from broker.protocol.mqtt.packets import MQTT_311, Connect, Publish
from broker.service.config import Settings
from broker.service.metrics import BrokerMetrics
from broker.service.mqtt.gateway import Batch, Deferred, Gateway
from broker.service.provision import ensure_system_queues
from broker.service.router import RoutingService
from broker.store import mqtt as sessions
from queues import MQError, QueueManager, Reason
from tests.broker.core.builders import message, msg_id, psc_text
from tests.statements import exchanges, recorded

USER = "alice"
# A batch's writes: the QoS 2 id recorded, the acknowledged run deleted, the new run stored.
WRITES = ["INSERT INTO", "DELETE FROM", "INSERT INTO"]


class Client:
    """A connected client as the gateway sees it: what it has been sent, in order."""

    def __init__(self, gateway: Gateway, client_id: str) -> None:
        self.gateway = gateway
        self.client_id = client_id
        self.queue = sessions.queue_for(client_id)
        self.received: list[Publish] = []

    async def open(self, *, clean: bool = True) -> None:
        connect = Connect("MQTT", MQTT_311, self.client_id, clean, 0)
        job = self.gateway.open(connect, self.client_id, USER, "test", self.received.extend)
        await self.gateway.submit(job)

    async def subscribe(self, text: str, qos: int) -> None:
        await self.gateway.submit(self.gateway.subscribe(self.client_id, self.queue, USER, ((text, qos),)))

    async def drain(self) -> None:
        """Until the queue is empty or the window full."""
        while True:
            drained = await self.gateway.submit(self.gateway.drain(self.queue))
            if drained.blocked or not drained.more:
                await asyncio.sleep(0)  # its deliveries follow the answer
                return


@asynccontextmanager
async def running(qm: QueueManager, settings: Settings | None = None) -> AsyncIterator[Gateway]:
    settings = settings or Settings()
    gateway = Gateway(qm, settings, BrokerMetrics())
    ensure_system_queues(qm, gateway.writer.config.streams)
    gateway.start()
    try:
        yield gateway
    finally:
        await asyncio.to_thread(gateway.stop)


async def publish(gateway: Gateway, *publications: Publish) -> None:
    """Route ``publications`` and let their deliveries out (they follow the answers)."""
    await asyncio.gather(*(gateway.submit(gateway.publish("pub", [p], USER)) for p in publications))
    await asyncio.sleep(0)


def test_deliveries_to_a_caught_up_client_skip_its_queue(qm: QueueManager) -> None:
    async def scenario() -> None:
        async with running(qm) as gateway:
            sub = Client(gateway, "sub")
            await sub.open(clean=False)
            await sub.subscribe("t/#", 1)
            await sub.drain()
            await publish(gateway, Publish("t/a", b"warm-up"))  # a fresh state for what follows
            with recorded(qm.engine) as statements:
                await publish(gateway, *(Publish("t/a", str(n).encode()) for n in range(5)))
            assert statements == []  # QoS 0 between connected clients: no SQL at all
            await publish(gateway, Publish("t/b", b"one", qos=1, packet_id=1))
            sent = sub.received[-1]
            assert (sent.topic, sent.payload, sent.qos, sent.retain) == ("t/b", b"one", 1, False)
            assert [p.payload for p in sub.received[:-1]] == [b"warm-up", b"0", b"1", b"2", b"3", b"4"]
            with qm.unit_of_work() as uow:
                stored = sessions.unacknowledged(uow.connection, "sub")
                assert [(r.packet_id, r.payload) for r in stored] == [(sent.packet_id, b"one")]
            assert qm.depth(sub.queue) == 0
            await gateway.submit(gateway.acknowledged("sub", [sent.packet_id or 0], received=False))
            with qm.unit_of_work() as uow:
                assert sessions.unacknowledged(uow.connection, "sub") == []

    asyncio.run(scenario())


def test_a_batch_answers_its_jobs_before_it_sends_its_deliveries(qm: QueueManager) -> None:
    """A publisher's PUBACK does not wait for the fan-out of its batch to be written: with a
    window of unacknowledged PUBLISHes, it sends its next ones meanwhile."""

    async def scenario() -> None:
        async with running(qm) as gateway:
            subs = [Client(gateway, f"sub{n}") for n in range(3)]
            for sub in subs:
                await sub.open()
                await sub.subscribe("t/#", 1)
            seen_at_answer: list[int] = []
            answer = gateway.submit(gateway.publish("pub", [Publish("t/a", b"x", qos=1, packet_id=1)], USER))
            answer.add_done_callback(lambda _: seen_at_answer.append(sum(len(s.received) for s in subs)))
            assert await answer == [0]
            assert seen_at_answer == [0]
            await asyncio.sleep(0)
            assert [[p.payload for p in sub.received] for sub in subs] == [[b"x"]] * 3

    asyncio.run(scenario())


def test_a_session_ending_with_its_connection_keeps_its_deliveries_in_flight_in_memory(
    qm: QueueManager,
) -> None:
    """Nothing could ever send a clean session's QoS 1/2 deliveries again: they are not
    stored, their acknowledgements write nothing, and the QoS 2 ids its client publishes with
    are not recorded; the window still bounds what is in flight."""

    async def scenario() -> None:
        settings = Settings(mqtt_max_inflight=2)
        async with running(qm, settings) as gateway:
            sub = Client(gateway, "sub")
            await sub.open(clean=True)
            await sub.subscribe("t/#", 2)
            await sub.drain()
            pub = Client(gateway, "pub")
            await pub.open(clean=True)
            await publish(gateway, Publish("t/a", b"warm-up"))
            with recorded(qm.engine) as statements:
                await publish(
                    gateway, *(Publish("t/b", str(n).encode(), qos=2, packet_id=n + 1) for n in range(3))
                )
            # The third's put on the session queue is the batch's only write.
            assert not [s for s in statements if "psb_mqtt" in s], statements
            assert [(p.payload, p.qos) for p in sub.received[1:]] == [(b"0", 2), (b"1", 2)]  # the window's 2
            assert qm.depth(sub.queue) == 1  # the third waits on the queue
            with qm.unit_of_work() as uow:
                assert sessions.unacknowledged(uow.connection, "sub") == []
            first = sub.received[1].packet_id or 0
            with recorded(qm.engine) as statements:
                await gateway.submit(gateway.acknowledged("sub", [first], received=True))
                await gateway.submit(gateway.acknowledged("sub", [first], received=False))
                await gateway.submit(gateway.released("pub", [1, 2, 3]))
            assert statements == []
            await sub.drain()  # room again for the third
            assert [p.payload for p in sub.received[1:]] == [b"0", b"1", b"2"]

    asyncio.run(scenario())


def test_a_new_session_is_caught_up_from_its_first_delivery(qm: QueueManager) -> None:
    """A new session's queue is empty: nothing to drain before deliveries go straight."""

    async def scenario() -> None:
        async with running(qm) as gateway:
            sub = Client(gateway, "sub")
            await sub.open()
            await sub.subscribe("t", 1)
            await publish(gateway, Publish("t", b"one", qos=1, packet_id=1))
            assert [p.payload for p in sub.received] == [b"one"]
            assert qm.depth(sub.queue) == 0

    asyncio.run(scenario())


def test_a_client_behind_gets_its_queue_first_and_the_window_bounds_what_goes_straight(
    qm: QueueManager,
) -> None:
    async def scenario() -> None:
        async with running(qm, Settings(mqtt_max_inflight=3)) as gateway:
            sub = Client(gateway, "sub")
            await sub.open(clean=False)
            await sub.subscribe("t", 1)
            await gateway.submit(gateway.offline("sub"))
            await publish(gateway, Publish("t", b"queued", qos=1, packet_id=1))
            await sub.open(clean=False)  # resumed: its queue holds a message, sent before any other
            await publish(gateway, Publish("t", b"held", qos=1, packet_id=2))
            assert sub.received == [] and qm.depth(sub.queue) == 2
            await sub.drain()
            await publish(
                gateway, *(Publish("t", f"live{n}".encode(), qos=1, packet_id=3 + n) for n in range(3))
            )
            # The window holds 3: "queued", "held" and "live0" are in flight, the rest waits.
            assert [p.payload for p in sub.received] == [b"queued", b"held", b"live0"]
            assert qm.depth(sub.queue) == 2
            for sent in sub.received:
                await gateway.submit(gateway.acknowledged("sub", [sent.packet_id or 0], received=False))
            await publish(gateway, Publish("t", b"after", qos=1, packet_id=9))  # behind: queued
            await sub.drain()
            assert [p.payload for p in sub.received][3:] == [b"live1", b"live2", b"after"]
            assert len({p.packet_id for p in sub.received[3:]}) == 3
            assert qm.depth(sub.queue) == 0

    asyncio.run(scenario())


def test_a_publication_is_routed_against_what_another_process_registered_before_it_came(
    qm: QueueManager,
) -> None:
    """A batch of publications routes against the in-memory state without a transaction first,
    once a version check made after they came shows it current: a subscription that another
    process (here the routing loop) has committed, and answered, before the publication was
    put is in it."""
    routing = RoutingService(qm, Settings())
    routing.prepare()
    qm.define_queue("SUB")

    async def scenario() -> None:
        async with running(qm) as gateway:
            await publish(gateway, Publish("t/a", b"before", qos=1, packet_id=1))  # the state loaded
            qm.put(
                CONTROL_QUEUE,
                message(psc_text("RegSub", "t/#", QName="SUB"), msg_id=msg_id(1), reply_to_q=""),
            )
            routing.run_once()
            for packet_id, qos in ((2, 1), (3, 2)):
                after = Publish("t/a", f"after at {qos}".encode(), qos=qos, packet_id=packet_id)
                await publish(gateway, after)

    asyncio.run(scenario())
    taken = [qm.get("SUB") for _ in range(qm.depth("SUB"))]
    payloads = [rfh2.decode(m.body, m.encoding, m.format).payload for m in taken]
    assert payloads == [b"after at 1", b"after at 2"]


def test_a_refresh_brings_an_idle_gateway_up_to_what_another_process_registered(qm: QueueManager) -> None:
    """An idle member's gateway runs no batch of its own; the refresh its housekeeping submits
    reads what another process registered meanwhile (here the routing loop), and only that:
    its first batch after a failover does not read a fleet's subscriptions with the fleet
    waiting."""
    routing = RoutingService(qm, Settings())
    routing.prepare()
    for n in range(3):
        qm.define_queue(f"SUB{n}")

    async def scenario() -> None:
        async with running(qm) as gateway:
            await gateway.submit(gateway.refresh())  # the state loaded
            state = gateway.writer.state
            assert state is not None and len(state) == 0
            for n in range(3):
                command = psc_text("RegSub", f"t/{n}", QName=f"SUB{n}")
                qm.put(CONTROL_QUEUE, message(command, msg_id=msg_id(n + 1), reply_to_q=""))
            routing.run_once()
            assert len(state) == 0  # nothing has run on the gateway since
            with recorded(qm.engine) as statements:
                await gateway.submit(gateway.refresh())
            assert gateway.writer.state is state and len(state) == 3
            assert any("FROM psb_changes" in s for s in statements)
            with recorded(qm.engine) as statements:
                await gateway.submit(gateway.refresh())
            assert not any("psb_changes" in s or "psb_subscriptions" in s for s in statements)

    asyncio.run(scenario())


def test_a_batch_of_publications_and_acknowledgements_opens_no_transaction_before_its_writes(
    qm: QueueManager,
) -> None:
    """Its only reads are the version check, made outside any transaction (on SQLite, only if
    another connection has committed since the last one); its writes (the outbound run stored,
    the acknowledged one deleted, the QoS 2 id recorded) follow in one unit of work: on
    PostgreSQL, one exchange with the server for them and the COMMIT."""

    async def scenario() -> None:
        async with running(qm) as gateway:
            sub = Client(gateway, "sub")
            await sub.open(clean=False)
            await sub.subscribe("t", 1)
            await publish(gateway, Publish("t", b"warm-up", qos=1, packet_id=1))
            acknowledgement = gateway.acknowledged("sub", [sub.received[0].packet_id or 0], received=False)
            failures: list[BaseException] = []
            held = await gateway.submit(lambda _: gateway.connection())  # the batches' own connection
            with recorded(qm.engine) as statements, exchanges(qm.engine, held) as sent:
                gateway.post(acknowledgement, failures.append)  # waits for the publication's batch
                await publish(gateway, Publish("t", b"one", qos=2, packet_id=2))
            assert failures == []
            if qm.engine.dialect.name == "postgresql":
                assert [s.split()[0] for s in statements] == ["SELECT"]  # the version (in psb_meta)
                # two exchanges (listed by connection): the check (prepared by now, or not yet) on
                # a connection of its own, and the writes
                writes = [exchange for exchange in sent if "COMMIT" in exchange]
                # the first INSERT asserts the member's lease (it inserts nothing while alive)
                assert writes == [["BEGIN", "INSERT", "INSERT", "DELETE", "INSERT", "COMMIT"]]
                assert [exchange for exchange in sent if exchange not in writes] in ([[]], [["SELECT"]])
            else:  # no read at all: nobody else has committed since the state was last read
                words = [" ".join(s.split()[:2]) for s in statements]
                assert words == ["BEGIN IMMEDIATE", *WRITES]
            assert [p.payload for p in sub.received] == [b"warm-up", b"one"]
            with qm.reading() as conn:
                assert [r.payload for r in sessions.unacknowledged(conn, "sub")] == [b"one"]
                assert sessions.awaiting_release(conn, "pub") == [2]

    asyncio.run(scenario())


def test_a_batch_the_database_fails_fails_every_job_at_once_and_tells_those_nobody_awaits(
    qm: QueueManager, caplog: pytest.LogCaptureFixture
) -> None:
    """Not carried out again one by one (each would fail the same way): every job's client is
    told, nothing of the batch is committed, and the process's health says the database is
    away until a batch commits again."""

    async def scenario() -> None:
        async with running(qm) as gateway:
            sub = Client(gateway, "sub")
            await sub.open(clean=False)
            await sub.subscribe("t", 1)
            await publish(gateway, Publish("t", b"one", qos=1, packet_id=1))
            sent = sub.received[0]
            holding, release = threading.Event(), threading.Event()

            def hold(_: object) -> None:  # holds the thread: the jobs handed in meanwhile are one batch
                holding.set()
                release.wait(10)

            blocker = gateway.submit(hold)
            assert await asyncio.to_thread(holding.wait, 10)
            failures: list[BaseException] = []
            gateway.post(gateway.acknowledged("sub", [sent.packet_id or 0], received=False), failures.append)
            routed = gateway.submit(gateway.publish("pub", [Publish("t", b"two", qos=1, packet_id=2)], USER))
            broken = gateway.submit(Deferred(lambda _: _raise(GONE)))
            release.set()
            await blocker
            for future in (routed, broken):
                with pytest.raises(MQError) as raised:
                    await future
                assert raised.value.reason == Reason.MQRC_CONNECTION_BROKEN
            await asyncio.sleep(0.1)  # the posted job's failure is told on this loop, after the futures
            assert failures == [GONE]
            assert [p.payload for p in sub.received] == [b"one"]  # "two" was never routed
            with qm.reading() as conn:  # nor the acknowledgement recorded
                assert [r.payload for r in sessions.unacknowledged(conn, "sub")] == [b"one"]
            assert gateway.health.report().outage is not None

            await publish(gateway, Publish("t", b"three", qos=1, packet_id=3))
            await sub.drain()  # the failed batch left it behind: its queue first (the watcher's wake-up)
            assert [p.payload for p in sub.received] == [b"one", b"three"]
            assert gateway.health.report().outage is None

    asyncio.run(scenario())
    assert "mqtt batch failed; running its jobs one by one" not in caplog.text


GONE = MQError(Reason.MQRC_CONNECTION_BROKEN, "database unavailable: the server is restarting")


def _raise(exc: BaseException) -> None:
    raise exc


def test_urgent_jobs_go_first_and_a_batch_takes_about_its_weight_of_publications(qm: QueueManager) -> None:
    """A client flooding the broker (its jobs not urgent) delays another client's first job
    by one batch at most; its own jobs keep their order, a batch at a time."""

    async def scenario() -> list[tuple[str, int]]:
        async with running(qm) as gateway:
            holding, release = threading.Event(), threading.Event()

            def hold(_: object) -> None:
                holding.set()
                release.wait(10)

            blocker = gateway.submit(hold)
            assert await asyncio.to_thread(holding.wait, 10)
            ran: list[tuple[str, int]] = []
            seen: list[Batch] = []  # the batches, in the order they ran (kept: ids are reused)

            def job(name: str, weight: int) -> Deferred:
                def run(batch: Batch) -> None:
                    if not seen or seen[-1] is not batch:
                        seen.append(batch)
                    ran.append((name, len(seen) - 1))

                return Deferred(run, weight=weight)

            flood = [gateway.submit(job(f"flood {n}", 400), urgent=False) for n in range(5)]
            first = gateway.submit(job("other", 1))
            release.set()
            await asyncio.gather(blocker, *flood, first)
            return ran

    ran = asyncio.run(scenario())
    assert [name for name, _ in ran] == ["other", *(f"flood {n}" for n in range(5))]
    # the urgent job with some company, then about MAX_WEIGHT_PER_BATCH of publications each
    assert [batch for _, batch in ran] == [0, 0, 1, 1, 1, 2]


def test_subscriptions_are_written_once_a_batch_and_go_with_their_session(qm: QueueManager) -> None:
    """A batch's SUBSCRIBEs and UNSUBSCRIBEs are written together, in their order; a clean
    session that subscribes and ends in the same batch leaves no subscription row behind; a
    SUBSCRIBE says whether retained publications were queued for it (then only, a drain)."""

    async def scenario() -> None:
        async with running(qm) as gateway:
            clients = [Client(gateway, f"c{n}") for n in range(3)]
            for client in clients:
                await client.open()
            jobs = [gateway.subscribe(c.client_id, c.queue, USER, (("a/#", 1), ("b", 0))) for c in clients]
            jobs.append(gateway.unsubscribe("c1", clients[1].queue, USER, ("b",)))
            answers = await asyncio.gather(*(gateway.submit(job) for job in jobs))
            assert [a.answers for a in answers[:3]] == [[(1, 0), (0, 0)]] * 3
            assert not any(a.queued for a in answers[:3])  # nothing retained: no drain
            with qm.reading() as conn:
                assert sessions.granted(conn, "c0") == {"a/#": 1, "b": 0}
                assert sessions.granted(conn, "c1") == {"a/#": 1}
            leaving = clients[2]
            await asyncio.gather(
                gateway.submit(gateway.subscribe(leaving.client_id, leaving.queue, USER, (("c", 1),))),
                gateway.submit(gateway.close(leaving.client_id, leaving.queue)),
            )
            with qm.reading() as conn:
                assert sessions.granted(conn, "c2") == {}

    asyncio.run(scenario())


def test_a_subscribe_that_queues_retained_publications_says_so(qm: QueueManager) -> None:
    async def scenario() -> None:
        async with running(qm) as gateway:
            await publish(gateway, Publish("kept/x", b"retained", qos=1, retain=True, packet_id=1))
            sub = Client(gateway, "late")
            await sub.open()
            found = await gateway.submit(gateway.subscribe("late", sub.queue, USER, (("kept/#", 1),)))
            assert found.queued
            await sub.drain()
            assert [(p.topic, p.payload, p.retain) for p in sub.received] == [("kept/x", b"retained", True)]

    asyncio.run(scenario())


def test_a_drain_in_the_batch_of_a_subscribe_leaves_its_retained_publications_until_after_the_suback(
    qm: QueueManager,
) -> None:
    """A drain that comes with a SUBSCRIBE (the depth watcher woke the connection meanwhile)
    takes nothing that SUBSCRIBE queued: what a batch takes is sent before its answers, and the
    retained publications would reach the client before its SUBACK."""

    async def scenario() -> None:
        async with running(qm) as gateway:
            await publish(gateway, Publish("kept/x", b"retained", qos=1, retain=True, packet_id=1))
            sub = Client(gateway, "late")
            await sub.open()
            busy = gateway.submit(lambda _: time.sleep(0.3))  # the next two then go in one batch
            subscribe = gateway.submit(gateway.subscribe("late", sub.queue, USER, (("kept/#", 1),)))
            drain = gateway.submit(gateway.drain(sub.queue))
            _, found, drained = await asyncio.gather(busy, subscribe, drain)
            assert found.queued and not drained.more
            assert sub.received == [] and qm.depth(sub.queue) == 1
            await sub.drain()  # as the SUBSCRIBE's answer has it, once the SUBACK is written
            assert [(p.topic, p.payload, p.retain) for p in sub.received] == [("kept/x", b"retained", True)]

    asyncio.run(scenario())
