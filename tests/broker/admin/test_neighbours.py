"""broker.admin.neighbours: defining and removing neighbours as the CLI and the admin API do."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from broker.admin import neighbours
from broker.core.effects import Put
from broker.core.neighbours import transmission
from broker.network import links
from queues import QueueManager
from queues.definition import MAX_MAX_DEPTH
from queues.errors import MQError, UnknownObject
from queues.message import Message
from queues.reasons import Reason
from tests.broker.network.test_links import (  # noqa: F401 (fixtures)
    TOKEN,
    Sites,
    add,
    link_of,
    shared_sites_fixture,
    sites_fixture,
)

URL = "http://qmb.test:8080"


@pytest.fixture
def qm(sites: Sites) -> QueueManager:
    return sites.qm("QMA")


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    """A neighbour QMB that knows QMA and reaches nothing else."""

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"reachable": ["QMB"], "routes": {"QMB": ["QMB"]}})

    with httpx.Client(transport=httpx.MockTransport(answer)) as client:
        yield client


def add_neighbour(qm: QueueManager, name: str = "QMB", **options: object) -> links.Link:
    options.setdefault("check_topology", False)
    link, _ = neighbours.add_neighbour(qm, name, URL, TOKEN, **options)  # type: ignore[arg-type]
    return link


def wait_for(qm: QueueManager, neighbour: str, count: int) -> None:
    """Put ``count`` messages on the transmission queue for ``neighbour``, as the router does."""
    qm.put_many(transmission(Put("APP.IN", Message(b"x"), neighbour)) for _ in range(count))


def test_adding_a_neighbour_defines_its_transmission_queue(qm: QueueManager, http: httpx.Client) -> None:
    link, warning = neighbours.add_neighbour(qm, "QMB", URL, TOKEN, http=http)
    assert warning is None
    assert (link.name, link.url, link.token) == ("QMB", URL, TOKEN)
    xmitq = qm.inquire_queue("QMB")
    assert (xmitq.usage, xmitq.max_depth, xmitq.description) == ("xmitq", MAX_MAX_DEPTH, "to neighbour QMB")


def test_a_transmission_queue_defined_beforehand_is_kept(qm: QueueManager) -> None:
    qm.define_queue("QMB", usage="xmitq", max_depth=10)
    wait_for(qm, "QMB", 2)
    add_neighbour(qm)
    assert (qm.inquire_queue("QMB").max_depth, qm.depth("QMB")) == (10, 2)


def test_a_local_queue_with_the_neighbours_name_is_4001(qm: QueueManager, http: httpx.Client) -> None:
    qm.define_queue("QMB")
    with pytest.raises(MQError) as refused:
        neighbours.add_neighbour(qm, "QMB", URL, TOKEN, http=http)
    assert refused.value.reason == Reason.MQRCCF_OBJECT_ALREADY_EXISTS == 4001
    assert "transmission queue" in refused.value.detail
    assert link_of(qm, "QMB") is None
    assert qm.inquire_queue("QMB").usage == "normal"


def test_this_brokers_own_name_is_refused(qm: QueueManager) -> None:
    with pytest.raises(MQError) as refused:
        add_neighbour(qm, "QMA")
    assert refused.value.reason == Reason.MQRCCF_Q_MGR_NAME_ERROR
    assert link_of(qm, "QMA") is None
    with pytest.raises(UnknownObject):
        qm.inquire_queue("QMA")


def test_a_second_definition_is_4001_and_changes_nothing(qm: QueueManager) -> None:
    first = add_neighbour(qm)
    with pytest.raises(MQError) as refused:
        neighbours.add_neighbour(qm, "QMB", "http://elsewhere:1", TOKEN, check_topology=False)
    assert refused.value.reason == Reason.MQRCCF_OBJECT_ALREADY_EXISTS
    assert link_of(qm, "QMB") == first


@pytest.mark.parametrize(
    ("name", "url", "token", "reason"),
    [
        ("QM B", URL, TOKEN, Reason.MQRC_Q_MGR_NAME_ERROR),
        ("QMB", "qmb.test:8080", TOKEN, Reason.MQRCCF_ATTR_VALUE_ERROR),
        ("QMB", URL, "short", Reason.MQRCCF_ATTR_VALUE_ERROR),
    ],
    ids=["bad name", "no scheme", "short token"],
)
def test_a_bad_definition_is_refused_before_anything_is_sent(
    qm: QueueManager, name: str, url: str, token: str, reason: Reason
) -> None:
    sent: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(403)

    with httpx.Client(transport=httpx.MockTransport(record)) as client, pytest.raises(MQError) as refused:
        neighbours.add_neighbour(qm, name, url, token, http=client)
    assert refused.value.reason == reason
    assert sent == []  # the token never left for a neighbour that was never going to be defined
    with qm.reading() as conn:
        assert links.list_links(conn) == []


def test_remove_unlinks_and_deletes_the_transmission_queue(qm: QueueManager) -> None:
    add_neighbour(qm)
    assert neighbours.remove_neighbour(qm, "QMB") == 0
    assert link_of(qm, "QMB") is None
    with pytest.raises(UnknownObject):
        qm.inquire_queue("QMB")


def test_remove_is_2055_while_messages_wait_unless_purged(qm: QueueManager) -> None:
    add_neighbour(qm)
    wait_for(qm, "QMB", 3)
    with qm.engine.begin() as conn:
        links.store_batch(conn, "QMB", 1, b"in flight", 2)
    with pytest.raises(MQError) as refused:
        neighbours.remove_neighbour(qm, "QMB")
    assert refused.value.reason == Reason.MQRC_Q_NOT_EMPTY == 2055
    assert refused.value.detail == "5 messages wait for QMB: remove with purge to discard them"
    assert link_of(qm, "QMB") is not None and qm.depth("QMB") == 3
    assert neighbours.remove_neighbour(qm, "QMB", purge=True) == 5
    assert link_of(qm, "QMB") is None
    with qm.reading() as conn:
        assert links.outbox_depth(conn) == {}


def test_a_batch_in_flight_alone_also_blocks_removal(qm: QueueManager) -> None:
    add_neighbour(qm)
    with qm.engine.begin() as conn:
        links.store_batch(conn, "QMB", 1, b"in flight", 4)
    with pytest.raises(MQError) as refused:
        neighbours.remove_neighbour(qm, "QMB")
    assert refused.value.reason == Reason.MQRC_Q_NOT_EMPTY


def test_removing_an_unknown_neighbour_is_3085(qm: QueueManager) -> None:
    with pytest.raises(MQError) as refused:
        neighbours.remove_neighbour(qm, "QMX")
    assert refused.value.reason == Reason.MQRCCF_UNKNOWN_BROKER


def test_status_shows_each_links_channel_and_queues(qm: QueueManager) -> None:
    add_neighbour(qm, "QMC")
    link = add_neighbour(qm)
    wait_for(qm, "QMB", 3)
    with qm.engine.begin() as conn:
        links.store_batch(conn, "QMB", links.next_batch_number(conn, "QMB"), b"in flight", 2)
        links.acquire_sender(conn, "QMB", "host:1234:1", 60_000)
        links.accept_batch(conn, "QMB", "e" * 32, 9)
        links.record_error(conn, "QMB", "QMB answered 503")
        links.mark_synced(conn, "QMB")
    status = {s.link.name: s.as_dict() for s in neighbours.neighbour_status(qm)}
    received = link_of(qm, "QMB").last_received_at  # type: ignore[union-attr]
    assert received is not None
    assert status["QMB"] == {
        "name": "QMB",
        "url": URL,
        "transmission_queue": "QMB",
        "state": "retrying",
        "stopped_at": None,
        "transmission_depth": 3,
        "in_flight": 2,
        "next_batch": 2,
        "received_batch": 9,
        "proxies_sent": True,
        "sender": "host:1234:1",
        "last_sent_at": None,
        "last_received_at": received,
        "last_error": "QMB answered 503",
        "created_at": link.created_at,
    }
    assert (status["QMC"]["transmission_depth"], status["QMC"]["in_flight"]) == (0, 0)
    assert (status["QMC"]["proxies_sent"], status["QMC"]["sender"]) == (False, None)


def test_a_channel_is_running_retrying_or_stopped(qm: QueueManager) -> None:
    add_neighbour(qm)

    def state() -> tuple[str, int | None]:
        (status,) = neighbours.neighbour_status(qm)
        return status.state, status.as_dict()["stopped_at"]

    assert state() == ("running", None)
    with qm.engine.begin() as conn:
        links.record_error(conn, "QMB", "QMB unreachable")
    assert state()[0] == "retrying"
    assert neighbours.stop_channel(qm, "QMB") is True
    stopped_at = link_of(qm, "QMB").stopped_at  # type: ignore[union-attr]
    assert state() == ("stopped", stopped_at) and stopped_at is not None
    assert neighbours.stop_channel(qm, "QMB") is False
    assert neighbours.start_channel(qm, "QMB") is True
    assert neighbours.start_channel(qm, "QMB") is False
    assert state() == ("retrying", None)  # until a batch gets through


def test_a_stopped_channel_keeps_what_waits_for_it_and_is_removed_with_it(qm: QueueManager) -> None:
    add_neighbour(qm)
    neighbours.stop_channel(qm, "QMB")
    wait_for(qm, "QMB", 2)
    (status,) = neighbours.neighbour_status(qm)
    assert (status.state, status.transmission_depth) == ("stopped", 2)
    assert neighbours.remove_neighbour(qm, "QMB", purge=True) == 2
    add_neighbour(qm)
    assert [s.state for s in neighbours.neighbour_status(qm)] == ["running"]


def test_alter_changes_url_and_token_and_checks_them(qm: QueueManager) -> None:
    first = add_neighbour(qm)
    altered = neighbours.alter_neighbour(qm, "QMB", url="http://qmb.moved:9090/")
    assert (altered.url, altered.token, altered.epoch) == ("http://qmb.moved:9090", TOKEN, first.epoch)
    altered = neighbours.alter_neighbour(qm, "QMB", token="a-new-link-token-0123")
    assert (altered.url, altered.token) == ("http://qmb.moved:9090", "a-new-link-token-0123")
    for bad in ({"url": "qmb:8080"}, {"token": "short"}):
        with pytest.raises(MQError) as refused:
            neighbours.alter_neighbour(qm, "QMB", **bad)
        assert refused.value.reason == Reason.MQRCCF_ATTR_VALUE_ERROR
    assert link_of(qm, "QMB") == altered


@pytest.mark.parametrize("change", ["alter", "stop", "start"])
def test_changing_a_neighbour_not_defined_is_3085(qm: QueueManager, change: str) -> None:
    calls = {
        "alter": lambda: neighbours.alter_neighbour(qm, "QMX", url=URL),
        "stop": lambda: neighbours.stop_channel(qm, "QMX"),
        "start": lambda: neighbours.start_channel(qm, "QMX"),
    }
    with pytest.raises(MQError) as refused:
        calls[change]()
    assert refused.value.reason == Reason.MQRCCF_UNKNOWN_BROKER
