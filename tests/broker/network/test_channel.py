"""broker.network.channel.ChannelAgent against a real receiver: ``inbound.receive`` on a second
database behind an ``httpx.MockTransport``, with failures injected at every step of a batch.

Whatever fails (the request never arrives, the receiver commits but its answer is lost, the
sender dies between taking a batch off the transmission queue and sending it, the sender's
confirm fails), once the link recovers every message has arrived exactly once, in order, and
nothing is left on the transmission queue or in the outbox.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy.exc import OperationalError

from admin_api.models import MAX_BODY_BYTES
from broker.admin import neighbours
from broker.core.effects import Put
from broker.core.neighbours import transmission
from broker.network import channel, inbound, links, wire
from queues import DEAD_LETTER_QUEUE, QueueManager, make_engine, sql
from queues.definition import MAX_MAX_DEPTH
from queues.errors import MQError
from queues.ids import now_ms
from queues.message import MQFMT_STRING, Message
from queues.reasons import Reason
from tests.broker.network.test_links import (  # noqa: F401 (fixtures)
    TOKEN,
    Sites,
    add,
    link_of,
    shared_sites_fixture,
    sites_fixture,
)

SENDER, RECEIVER = "QMB", "QMA"
DESTINATION = "APP.IN"
RECEIVER_URL = "http://qma.test:8080"


class Neighbour:
    """QMA's inbound endpoint as the admin API serves it, with faults to inject."""

    def __init__(self, qm: QueueManager) -> None:
        self.qm = qm
        self.requests: list[httpx.Request] = []
        self.receipts: list[inbound.Receipt] = []
        self.unreachable = 0  # the next N requests never reach the receiver
        self.answers_lost = 0  # the receiver commits the next N batches; their answers are lost

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.unreachable:
            self.unreachable -= 1
            raise httpx.ConnectError("connection refused", request=request)
        if len(request.content) > MAX_BODY_BYTES:
            return httpx.Response(413, json={"detail": "request body too large"})
        token = request.headers["Authorization"].removeprefix("Bearer ")
        try:
            receipt = inbound.receive(self.qm, request.content, token, request.headers[channel.SENDER_HEADER])
        except MQError as exc:
            status = 403 if exc.reason == Reason.MQRCCF_UNKNOWN_BROKER else 400
            return httpx.Response(status, json={"detail": exc.detail})
        self.receipts.append(receipt)
        if self.answers_lost:
            self.answers_lost -= 1
            raise httpx.ReadError("connection reset by peer", request=request)
        return httpx.Response(200, json={"batch": receipt.batch, "duplicate": receipt.duplicate})

    def batches(self) -> list[int]:
        """The batch number of every request, in the order they came."""
        return [wire.decode(request.content).number for request in self.requests]


@dataclass
class Link:
    sender: QueueManager
    receiver: QueueManager
    neighbour: Neighbour
    http: httpx.Client
    sites: Sites

    def agent(
        self, owner: str = "one", *, qm: QueueManager | None = None, **options: Any
    ) -> channel.ChannelAgent:
        return channel.ChannelAgent(qm or self.sender, RECEIVER, owner, http=self.http, **options)

    def send(self, count: int, *, start: int = 0, size: int = 0) -> list[bytes]:
        """Put ``count`` messages for QMA's APP.IN on QMB's transmission queue, as the router does."""
        bodies = [f"m{n}".encode().ljust(size, b".") for n in range(start, start + count)]
        self.sender.put_many(
            transmission(Put(DESTINATION, Message(body, format=MQFMT_STRING), RECEIVER)) for body in bodies
        )
        return bodies

    def drained(self) -> bool:
        """Nothing waits at the sender: not on the transmission queue, not in the outbox."""
        with self.sender.reading() as conn:
            return not links.outbox_depth(conn) and self.sender.depth(RECEIVER) == 0

    def assert_arrived_once(self, bodies: list[bytes]) -> None:
        with self.receiver.unit_of_work() as uow:
            arrived = [m.body for m in uow.get_batch(DESTINATION, len(bodies) + 100)]
        assert arrived == bodies
        assert self.drained()
        assert (self.sender.depth(DEAD_LETTER_QUEUE), self.receiver.depth(DEAD_LETTER_QUEUE)) == (0, 0)


@pytest.fixture
def link(sites: Sites) -> Iterator[Link]:
    """QMB (sender) linked to QMA (receiver), each on its own database."""
    receiver = sites.qm(RECEIVER)
    add(receiver, SENDER, url="http://qmb.test:8080")
    receiver.define_queue(DESTINATION, max_depth=MAX_MAX_DEPTH)
    sender = sites.qm(SENDER)
    neighbours.add_neighbour(sender, RECEIVER, RECEIVER_URL, TOKEN, check_topology=False)
    neighbour = Neighbour(receiver)
    with httpx.Client(transport=httpx.MockTransport(neighbour.handle)) as http:
        yield Link(sender, receiver, neighbour, http, sites)


def pump(agent: channel.ChannelAgent) -> list[int]:
    """Step until there is nothing left to send; the messages each step confirmed."""
    confirmed = []
    while sent := agent.step():
        confirmed.append(sent)
    return confirmed


def test_batches_move_the_transmission_queue_in_order(link: Link) -> None:
    counted: list[int] = []
    agent = link.agent(batch_size=10, on_sent=counted.append)
    bodies = link.send(25)
    assert pump(agent) == [10, 10, 5]
    link.assert_arrived_once(bodies)
    assert (agent.sent, counted) == (25, [10, 10, 5])
    assert link.neighbour.batches() == [1, 2, 3]
    request = link.neighbour.requests[0]
    assert str(request.url) == RECEIVER_URL + "/api/v1/channel/batches"
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert request.headers[channel.SENDER_HEADER] == SENDER
    assert request.headers["Content-Type"] == "application/json"
    sender_side, receiver_side = link_of(link.sender, RECEIVER), link_of(link.receiver, SENDER)
    assert sender_side is not None and receiver_side is not None
    assert (sender_side.next_batch, receiver_side.received_batch) == (4, 3)
    assert sender_side.last_sent_at is not None and sender_side.last_error is None


def test_each_frame_carries_the_expiry_left_on_the_transmission_queue(link: Link) -> None:
    link.sender.put_many(
        [
            transmission(Put(DESTINATION, Message(b"soon", expiry=600), RECEIVER)),
            transmission(Put(DESTINATION, Message(b"never"), RECEIVER)),
        ]
    )
    pump(link.agent())
    frames = wire.decode(link.neighbour.requests[0].content).frames
    assert 590 <= frames[0].expiry <= 600
    assert frames[1].expiry == -1


def test_nothing_to_send_sends_nothing_and_writes_nothing(link: Link) -> None:
    before = link_of(link.sender, RECEIVER)
    assert link.agent().step() == 0
    assert link.neighbour.requests == []
    # An idle agent is woken by every commit in a SQLite database: it must not take the
    # write lock (renewing its lease) each time.
    assert link_of(link.sender, RECEIVER) == before
    assert before is not None and before.sender_owner is None


def test_a_request_that_never_arrives_is_resent_as_it_was(link: Link) -> None:
    agent = link.agent(batch_size=10)
    bodies = link.send(25)
    assert agent.step() == 10
    link.neighbour.unreachable = 2
    for _ in range(2):
        with pytest.raises(channel.ChannelError, match="QMA unreachable"):
            agent.step()
    assert pump(agent) == [10, 5]
    first, resent, delivered = link.neighbour.requests[1:4]
    assert first.content == resent.content == delivered.content
    assert link.neighbour.batches() == [1, 2, 2, 2, 3]
    link.assert_arrived_once(bodies)


def test_an_answer_lost_after_the_receiver_committed_leads_to_a_harmless_resend(link: Link) -> None:
    agent = link.agent(batch_size=10)
    bodies = link.send(25)
    link.neighbour.answers_lost = 1
    with pytest.raises(channel.ChannelError, match="QMA unreachable"):
        agent.step()
    assert link.receiver.depth(DESTINATION) == 10  # taken, though the sender does not know it
    assert pump(agent) == [10, 10, 5]
    assert [(r.batch, r.duplicate) for r in link.neighbour.receipts] == [
        (1, False),
        (1, True),
        (2, False),
        (3, False),
    ]
    link.assert_arrived_once(bodies)


class Died(BaseException):
    """The sending process is killed: nothing after this point of the agent runs."""


def test_a_batch_taken_by_a_sender_that_died_before_sending_is_sent_by_its_successor(
    link: Link, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = link.agent("dead", batch_size=10)
    bodies = link.send(25)
    assert dead.step() == 10

    def die(*_: object) -> None:
        raise Died

    monkeypatch.setattr(dead, "_post", die)
    with pytest.raises(Died):
        dead.step()
    assert link.sender.depth(RECEIVER) == 5  # batch 2 was taken off the queue into the outbox
    with link.sender.reading() as conn:
        assert links.outbox_depth(conn) == {RECEIVER: 10}
    restarted = QueueManager(make_engine(link.sites.urls[SENDER]), appl_name="broker")
    try:
        successor = link.agent("successor", qm=restarted, batch_size=10)
        assert successor.step() == 0  # the dead process's lease has not run out yet
        expired = now_ms() + channel.LEASE_MS + 1
        monkeypatch.setattr(links, "now_ms", lambda: expired)
        assert pump(successor) == [10, 5]
    finally:
        restarted.close()
    assert link.neighbour.batches() == [1, 2, 3]
    link.assert_arrived_once(bodies)


def test_a_confirm_that_fails_leads_to_a_harmless_resend(link: Link, monkeypatch: pytest.MonkeyPatch) -> None:
    agent = link.agent(batch_size=10)
    bodies = link.send(25)
    assert agent.step() == 10
    real = links.confirm_batch

    def lost(*_: object) -> None:
        raise MQError(Reason.MQRC_CONNECTION_BROKEN, "database unavailable: server closed the connection")

    monkeypatch.setattr(links, "confirm_batch", lost)
    with pytest.raises(MQError):
        agent.step()
    monkeypatch.setattr(links, "confirm_batch", real)
    with link.sender.reading() as conn:
        assert links.in_flight(conn, RECEIVER) is not None
    assert pump(agent) == [10, 5]
    assert [(r.batch, r.duplicate) for r in link.neighbour.receipts] == [
        (1, False),
        (2, False),
        (2, True),
        (3, False),
    ]
    link.assert_arrived_once(bodies)


def test_the_lease_keeps_a_second_agent_from_sending(link: Link) -> None:
    other = QueueManager(make_engine(link.sites.urls[SENDER]), appl_name="broker")
    try:
        one, two = link.agent("one"), link.agent("two", qm=other)
        first = link.send(3)
        assert one.step() == 3
        second = link.send(3, start=3)
        assert two.step() == 0
        assert len(link.neighbour.requests) == 1
        assert link.sender.depth(RECEIVER) == 3
        assert one.step() == 3
    finally:
        other.close()
    link.assert_arrived_once(first + second)
    assert link_of(link.sender, RECEIVER).sender_owner == "one"  # type: ignore[union-attr]


def test_no_batch_is_more_than_the_receiver_takes(link: Link) -> None:
    # 1,200 messages with a batch size above the wire limit, then 60 of 100 KB: the receiver
    # refuses more than 1,000 messages or 4 MiB a request, so no batch may be bigger.
    agent = link.agent(batch_size=1500)
    bodies = link.send(1200)
    assert pump(agent) == [wire.MAX_BATCH_MESSAGES, 200]
    large = link.send(60, start=1200, size=100_000)
    assert pump(agent) == [20, 20, 20]  # 2,000,000 bytes of data each
    assert all(len(request.content) <= MAX_BODY_BYTES for request in link.neighbour.requests)
    link.assert_arrived_once(bodies + large)


# -- run(): retrying with backoff ----------------------------------------------------------------


class Stop:
    """Stands in for the stop event: records every backoff wait without sleeping, and is
    set once ``done`` says so."""

    def __init__(self, done: Callable[[], bool], watch: Callable[[], object]) -> None:
        self.done = done
        self.watch = watch
        self.waits: list[float] = []
        self.seen: list[object] = []

    def is_set(self) -> bool:
        return self.done()

    def wait(self, timeout: float) -> bool:
        self.waits.append(timeout)
        self.seen.append(self.watch())
        return False


def test_run_backs_off_while_the_neighbour_is_down_and_resets_when_it_answers(
    link: Link, caplog: pytest.LogCaptureFixture
) -> None:
    agent = link.agent("runner", batch_size=10)
    bodies = link.send(20)
    link.neighbour.unreachable = 10
    stop = Stop(
        done=lambda: link.receiver.depth(DESTINATION) == 20 and link.drained(),
        watch=lambda: (agent.last_error, link_of(link.sender, RECEIVER).last_error),  # type: ignore[union-attr]
    )

    def lose_the_second_answer(sent: int) -> None:
        link.neighbour.answers_lost = 1 if agent.sent == sent else 0

    agent.on_sent = lose_the_second_answer
    with caplog.at_level(logging.INFO, logger="broker.channel"):
        agent.run(stop)  # type: ignore[arg-type]
    assert stop.waits == pytest.approx([0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0, 0.2])
    unreachable = stop.seen[0][0]  # type: ignore[index]
    assert unreachable.startswith("QMA unreachable: connection refused")
    assert stop.seen[:10] == [(unreachable, unreachable)] * 10
    assert stop.seen[10][0].startswith("QMA unreachable: connection reset by peer")  # type: ignore[index]
    assert [r.getMessage() for r in caplog.records] == [
        "channel retrying",
        "channel running again",
        "channel retrying",
        "channel running again",
    ]
    assert agent.last_error is None
    final = link_of(link.sender, RECEIVER)
    assert final is not None and final.last_error is None
    assert final.sender_owner is None  # released on the way out
    link.assert_arrived_once(bodies)


def test_run_backs_off_while_its_own_database_is_unavailable(
    link: Link, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = link.agent("runner")
    bodies = link.send(5)
    real = links.acquire_sender
    outages = iter(range(2))

    def unavailable(*args: Any) -> bool:
        if next(outages, None) is not None:
            raise OperationalError(
                "UPDATE psb_neighbours ...", {}, sqlite3.OperationalError("disk I/O error")
            )
        return real(*args)

    monkeypatch.setattr(links, "acquire_sender", unavailable)
    stop = Stop(done=lambda: link.receiver.depth(DESTINATION) == 5, watch=lambda: agent.last_error)
    agent.run(stop)  # type: ignore[arg-type]
    assert stop.waits == pytest.approx([0.2, 0.4])
    assert [error.startswith("MQRC_CONNECTION_BROKEN") for error in stop.seen] == [True, True]  # type: ignore[union-attr]
    link.assert_arrived_once(bodies)


def test_run_stops_on_an_error_that_retrying_cannot_cure(link: Link) -> None:
    link.send(1)
    # The link holds its transmission queue open, so no operator can inhibit it (queues.opens);
    # a database edited behind the queue manager's back still can.
    with link.sender.engine.begin() as conn:
        sql.update_queue(conn, RECEIVER, {"get_enabled": 0})
    stop = Stop(done=lambda: False, watch=lambda: None)
    with pytest.raises(MQError) as failed:
        link.agent().run(stop)  # type: ignore[arg-type]
    assert failed.value.reason == Reason.MQRC_GET_INHIBITED
    assert stop.waits == []


def wait_until(condition: Callable[[], bool], seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_the_supervisor_runs_an_agent_per_link_and_follows_links_as_they_come_and_go(link: Link) -> None:
    supervisor = channel.ChannelSupervisor(link.sender, "supervisor", poll_seconds=0.05)
    supervisor.http.close()
    supervisor.http = link.http  # the neighbour behind the mock transport
    bodies = link.send(7)
    stop = threading.Event()
    thread = threading.Thread(target=supervisor.run, args=(stop,))
    thread.start()
    try:
        assert wait_until(link.drained)
        assert set(supervisor.agents) == {RECEIVER}
        # The agent counts a batch after the commit that confirms it: drained comes first.
        assert wait_until(lambda: supervisor.sent == 7)
        neighbours.remove_neighbour(link.sender, RECEIVER)
        assert wait_until(lambda: not supervisor.agents)
    finally:
        stop.set()
        thread.join(timeout=15)
    assert not thread.is_alive()
    with link.receiver.unit_of_work() as uow:  # the link (and its transmission queue) is gone
        assert [m.body for m in uow.get_batch(DESTINATION, 100)] == bodies


# -- stopped channels ----------------------------------------------------------------------------


def test_a_stopped_channel_keeps_its_messages_and_sends_them_once_started(link: Link) -> None:
    agent = link.agent(batch_size=10)
    assert neighbours.stop_channel(link.sender, RECEIVER)
    before = link_of(link.sender, RECEIVER)
    bodies = link.send(25)
    assert agent.step() == 0
    assert link.neighbour.requests == []
    assert link.sender.depth(RECEIVER) == 25
    # Stopped, it takes nothing off the queue and no lease: not even the write lock.
    assert link_of(link.sender, RECEIVER) == before
    assert neighbours.start_channel(link.sender, RECEIVER)
    assert pump(agent) == [10, 10, 5]
    link.assert_arrived_once(bodies)


def test_a_batch_waiting_in_the_outbox_waits_while_the_channel_is_stopped(link: Link) -> None:
    agent = link.agent(batch_size=10)
    bodies = link.send(15)
    link.neighbour.unreachable = 1
    with pytest.raises(channel.ChannelError):
        agent.step()
    neighbours.stop_channel(link.sender, RECEIVER)
    agent = link.agent(batch_size=10)  # as after a restart: it finds the batch in the outbox
    assert agent.step() == 0
    assert link.neighbour.batches() == [1]  # the attempt that never arrived, not resent
    with link.sender.reading() as conn:
        assert links.outbox_depth(conn) == {RECEIVER: 10}
    assert link.sender.depth(RECEIVER) == 5
    neighbours.start_channel(link.sender, RECEIVER)
    assert pump(agent) == [10, 5]
    assert link.neighbour.batches() == [1, 1, 2]
    link.assert_arrived_once(bodies)


def test_a_stop_lets_the_batch_already_taken_finish_and_takes_no_more(link: Link) -> None:
    """As MQ's STOP CHANNEL completes the batch in progress: the one confirmed with the
    previous batch was taken off the transmission queue before the stop."""
    agent = link.agent(batch_size=10)
    bodies = link.send(25)
    assert agent.step() == 10  # its confirmation took the second batch into the outbox
    neighbours.stop_channel(link.sender, RECEIVER)
    assert agent.step() == 10
    assert agent.step() == 0
    assert (link.sender.depth(RECEIVER), len(link.neighbour.requests)) == (5, 2)
    neighbours.start_channel(link.sender, RECEIVER)
    assert pump(agent) == [5]
    link.assert_arrived_once(bodies)


def test_an_altered_url_and_token_count_from_the_next_batch(link: Link) -> None:
    agent = link.agent(batch_size=10)
    first = link.send(10)
    assert pump(agent) == [10]
    token = "another-link-token-0123456789"
    neighbours.alter_neighbour(link.receiver, SENDER, token=token)  # the far side first
    neighbours.alter_neighbour(link.sender, RECEIVER, url="http://qma.moved:9090", token=token)
    second = link.send(15, start=10)
    assert pump(agent) == [10, 5]
    sent = [(r.url.host, r.headers["Authorization"]) for r in link.neighbour.requests]
    assert sent == [("qma.test", f"Bearer {TOKEN}")] + [("qma.moved", f"Bearer {token}")] * 2
    link.assert_arrived_once(first + second)


def test_a_running_agent_follows_a_stop_and_a_start_made_by_another_process(link: Link) -> None:
    agent = link.agent(batch_size=10)
    other = QueueManager(make_engine(link.sites.urls[SENDER]), appl_name="admin")
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop,))
    try:
        neighbours.stop_channel(other, RECEIVER)
        thread.start()
        bodies = link.send(12)
        time.sleep(1.5)  # the agent is woken by the arrivals and polls every second
        assert (link.neighbour.requests, link.sender.depth(RECEIVER)) == ([], 12)
        neighbours.start_channel(other, RECEIVER)
        assert wait_until(link.drained)
    finally:
        stop.set()
        thread.join(timeout=15)
        other.close()
    assert not thread.is_alive()
    link.assert_arrived_once(bodies)
