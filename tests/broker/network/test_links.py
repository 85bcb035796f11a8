"""broker.network.links: neighbours, sender leases, batch numbers, the outbox and the receiver's
duplicate check, on SQLite and PostgreSQL.

This module also holds :class:`Sites`, the databases every network unit test uses: one
migrated database per queue manager name and dialect, created once per test module and
emptied for each test (creating and migrating a PostgreSQL database costs about a second,
which a test module with many small scenarios would otherwise pay per test).
"""

from __future__ import annotations

import hashlib
import hmac
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Connection, Engine, delete, insert, select

from broker import store
from broker.network import links
from broker.network.schema import outbox, stopped_channels
from broker.service.config import Settings, broker_config
from broker.store.schema import changes, meta, neighbours
from migrations import upgrade
from migrations.models import target_metadata
from queues import QueueManager, make_engine
from queues.errors import MQError
from queues.ids import now_ms
from queues.owners import machine_key
from queues.reasons import Reason
from tests.conftest import DIALECTS, PostgresDatabases
from tests.overlap import overlapping

TOKEN = "link-token-0123456789"
EPOCH = "0123456789abcdef0123456789abcdef"


class Sites:
    """Broker databases of one dialect, one per queue manager name, shared by a test module."""

    def __init__(self, directory: Path, postgres: PostgresDatabases | None) -> None:
        self.directory = directory
        self.postgres = postgres
        self.engines: dict[str, Engine] = {}
        self.urls: dict[str, str] = {}
        self.opened: list[QueueManager] = []

    def qm(self, name: str) -> QueueManager:
        """An empty queue manager ``name`` (its database emptied, its dead-letter queue defined)."""
        engine = self.engines.get(name) or self._create(name)
        with engine.begin() as conn:
            for metadata in target_metadata:
                for table in reversed(metadata.sorted_tables):
                    if table is not meta:
                        conn.execute(delete(table))
        QueueManager.create(engine, name)
        manager = QueueManager(engine, appl_name="nettest", user_id="tester")
        self.opened.append(manager)
        return manager

    def _create(self, name: str) -> Engine:
        if self.postgres is None:
            url = f"sqlite:///{self.directory / (name + '.db')}"
        else:
            url = self.postgres.create()
        engine = make_engine(url)
        upgrade(engine)
        self.engines[name], self.urls[name] = engine, url
        return engine

    def release(self) -> None:
        """End of a test: stop the queue managers' arrival watchers."""
        for manager in self.opened:
            manager.notifier.close()
        self.opened.clear()

    def dispose(self) -> None:
        for name, engine in self.engines.items():
            engine.dispose()
            if self.postgres is not None:
                self.postgres.drop(self.urls[name])


# Named explicitly so that other modules import them under their function names without
# their tests' parameters shadowing the import.
@pytest.fixture(scope="module", params=DIALECTS, name="shared_sites")
def shared_sites_fixture(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Sites]:
    postgres = request.getfixturevalue("postgres") if request.param == "postgresql" else None
    created = Sites(tmp_path_factory.mktemp("sites"), postgres)
    yield created
    created.dispose()


@pytest.fixture(name="sites")
def sites_fixture(shared_sites: Sites) -> Iterator[Sites]:
    yield shared_sites
    shared_sites.release()


@pytest.fixture
def qm(sites: Sites) -> QueueManager:
    """This side of the link: queue manager QMA."""
    return sites.qm("QMA")


def link_of(qm: QueueManager, name: str) -> links.Link | None:
    with qm.reading() as conn:
        return links.get_link(conn, name)


def add(qm: QueueManager, name: str = "QMB", url: str = "http://qmb:8080", token: str = TOKEN) -> links.Link:
    with qm.engine.begin() as conn:
        return links.add_link(conn, name, url, token)


def lease_until(qm: QueueManager, name: str) -> int:
    with qm.reading() as conn:
        query = select(neighbours.c.sender_lease_until).where(neighbours.c.name == name)
        return int(conn.execute(query).scalar_one())


# -- defining links ------------------------------------------------------------------------------


def test_a_new_link_starts_with_nothing_sent_or_received(qm: QueueManager) -> None:
    before = now_ms()
    link = add(qm, url="https://qmb.example:8443/")
    assert link == links.Link(
        name="QMB",
        url="https://qmb.example:8443",
        token=TOKEN,
        epoch=link.epoch,
        next_batch=1,
        received_batch=0,
        synced=False,
        sender_owner=None,
        created_at=link.created_at,
        last_sent_at=None,
        last_received_at=None,
        last_error=None,
        stopped_at=None,
    )
    assert not link.stopped
    assert before <= link.created_at <= now_ms()
    assert len(link.epoch) == 32 and int(link.epoch, 16) >= 0
    assert link_of(qm, "QMB") == link


def test_two_administrators_defining_one_link_at_once_get_one_link_and_one_refusal(qm: QueueManager) -> None:
    def define(conn: Connection) -> links.Link:
        return links.add_link(conn, "QMB", "http://qmb:8080", TOKEN)

    first, second = overlapping(qm.engine, define, define)
    assert first.name == "QMB"
    assert isinstance(second, MQError) and second.reason == Reason.MQRCCF_OBJECT_ALREADY_EXISTS
    assert link_of(qm, "QMB") == first


def test_every_link_gets_its_own_epoch(qm: QueueManager) -> None:
    assert add(qm, "QMB").epoch != add(qm, "QMC").epoch


def test_links_are_listed_by_name(qm: QueueManager) -> None:
    for name in ("QMC", "QMB", "QMD"):
        add(qm, name)
    with qm.reading() as conn:
        assert [link.name for link in links.list_links(conn)] == ["QMB", "QMC", "QMD"]


@pytest.mark.parametrize(
    ("name", "url", "token", "reason"),
    [
        ("QM B", "http://qmb:8080", TOKEN, Reason.MQRC_Q_MGR_NAME_ERROR),
        ("Q" * 49, "http://qmb:8080", TOKEN, Reason.MQRC_Q_MGR_NAME_ERROR),
        ("", "http://qmb:8080", TOKEN, Reason.MQRC_Q_MGR_NAME_ERROR),
        ("QMB", "qmb:8080", TOKEN, Reason.MQRCCF_ATTR_VALUE_ERROR),
        ("QMB", "ftp://qmb", TOKEN, Reason.MQRCCF_ATTR_VALUE_ERROR),
        ("QMB", "http://qmb:8080", "x" * 15, Reason.MQRCCF_ATTR_VALUE_ERROR),
        ("QMB", "http://qmb:8080", "zürich-token-0123456789", Reason.MQRCCF_ATTR_VALUE_ERROR),
        ("QMB", "http://qmb:8080", "token with a blank 0123", Reason.MQRCCF_ATTR_VALUE_ERROR),
    ],
    ids=[
        "blank in name",
        "name too long",
        "empty name",
        "no scheme",
        "not http",
        "short token",
        "non-ASCII token",
        "blank in token",
    ],
)
def test_a_bad_definition_is_refused_with_its_reason(
    qm: QueueManager, name: str, url: str, token: str, reason: Reason
) -> None:
    with pytest.raises(MQError) as refused:
        add(qm, name, url, token)
    assert refused.value.reason == reason
    with qm.reading() as conn:
        assert links.list_links(conn) == []


def test_a_token_of_sixteen_characters_is_enough(qm: QueueManager) -> None:
    assert add(qm, token="x" * 16).token == "x" * 16


def test_a_second_definition_of_a_neighbour_is_4001(qm: QueueManager) -> None:
    first = add(qm)
    with pytest.raises(MQError) as refused:
        add(qm, url="http://elsewhere:1")
    assert refused.value.reason == Reason.MQRCCF_OBJECT_ALREADY_EXISTS == 4001
    assert link_of(qm, "QMB") == first


def test_update_changes_url_and_token_only(qm: QueueManager) -> None:
    first = add(qm)
    with qm.engine.begin() as conn:
        updated = links.update_link(conn, "QMB", url="http://moved:9090/", token="another-token-0123456")
    assert updated.url == "http://moved:9090"
    assert updated.token == "another-token-0123456"
    assert updated.epoch == first.epoch
    with qm.engine.begin() as conn, pytest.raises(MQError) as refused:
        links.update_link(conn, "QMX", url="http://x:1")
    assert refused.value.reason == Reason.MQRCCF_UNKNOWN_BROKER


@pytest.mark.parametrize(("url", "token"), [("ftp://moved", None), (None, "short")], ids=["url", "token"])
def test_update_refuses_what_the_channel_could_not_use(
    qm: QueueManager, url: str | None, token: str | None
) -> None:
    first = add(qm)
    with qm.engine.begin() as conn, pytest.raises(MQError) as refused:
        links.update_link(conn, "QMB", url=url, token=token)
    assert refused.value.reason == Reason.MQRCCF_ATTR_VALUE_ERROR
    assert link_of(qm, "QMB") == first


# -- stopping and starting channels --------------------------------------------------------------


def stop(qm: QueueManager, name: str = "QMB") -> bool:
    with qm.engine.begin() as conn:
        return links.stop_channel(conn, name)


def start(qm: QueueManager, name: str = "QMB") -> bool:
    with qm.engine.begin() as conn:
        return links.start_channel(conn, name)


def test_a_channel_stops_and_starts_once_each_and_only_its_own(qm: QueueManager) -> None:
    add(qm, "QMB")
    add(qm, "QMC")
    before = now_ms()
    assert stop(qm) is True
    stopped = link_of(qm, "QMB")
    assert stopped is not None and stopped.stopped
    assert stopped.stopped_at is not None and before <= stopped.stopped_at <= now_ms()
    assert stop(qm) is False
    assert link_of(qm, "QMB") == stopped  # stopping again keeps the first time
    with qm.reading() as conn:
        assert [(link.name, link.stopped) for link in links.list_links(conn)] == [
            ("QMB", True),
            ("QMC", False),
        ]
    assert start(qm) is True
    assert start(qm) is False
    assert link_of(qm, "QMB").stopped_at is None  # type: ignore[union-attr]


@pytest.mark.parametrize("change", [stop, start])
def test_stopping_or_starting_the_channel_of_no_neighbour_is_3085(
    qm: QueueManager, change: Callable[[QueueManager, str], bool]
) -> None:
    with pytest.raises(MQError) as refused:
        change(qm, "QMX")
    assert refused.value.reason == Reason.MQRCCF_UNKNOWN_BROKER
    with qm.reading() as conn:
        assert conn.execute(select(stopped_channels)).all() == []


def test_a_removed_link_forgets_its_stop_and_a_new_one_runs(qm: QueueManager) -> None:
    add(qm)
    stop(qm)
    with qm.engine.begin() as conn:
        links.remove_link(conn, "QMB")
    with qm.reading() as conn:
        assert conn.execute(select(stopped_channels)).all() == []
    with qm.engine.begin() as conn:  # a stop left by a removal racing it
        conn.execute(insert(stopped_channels).values(link="QMB", stopped_at=1))
    assert not add(qm).stopped


def test_remove_forgets_the_link_and_its_batches_in_flight(qm: QueueManager) -> None:
    add(qm, "QMB")
    add(qm, "QMC")
    with qm.engine.begin() as conn:
        links.store_batch(conn, "QMB", 1, b"payload-b", 2)
        links.store_batch(conn, "QMC", 1, b"payload-c", 3)
        links.remove_link(conn, "QMB")
    assert link_of(qm, "QMB") is None
    with qm.reading() as conn:
        assert links.outbox_depth(conn) == {"QMC": 3}
        assert links.in_flight(conn, "QMB") is None
    with qm.engine.begin() as conn, pytest.raises(MQError) as refused:
        links.remove_link(conn, "QMB")
    assert refused.value.reason == Reason.MQRCCF_UNKNOWN_BROKER == 3085


def _logged(qm: QueueManager) -> tuple[int, list[tuple[str, bytes]]]:
    with qm.reading() as conn:
        version = store.current_version(conn)
        entries = [(row.entity, row.entity_key) for row in conn.execute(select(changes))]
    return version, entries


def test_adding_and_removing_a_link_is_logged_for_the_routers(qm: QueueManager) -> None:
    key = hashlib.blake2b(b"QMB", digest_size=24).digest()
    version, _ = _logged(qm)
    add(qm)
    added, entries = _logged(qm)
    assert added == version + 1
    assert entries == [(store.NEIGHBOUR, key)]
    with qm.engine.begin() as conn:
        links.remove_link(conn, "QMB")
    removed, entries = _logged(qm)
    assert removed == added + 1
    assert entries == [(store.NEIGHBOUR, key), (store.NEIGHBOUR, key)]


def test_a_router_refreshing_its_state_sees_links_come_and_go(qm: QueueManager) -> None:
    state_store = store.StateStore(broker_config(qm.name, Settings()))
    with qm.reading() as conn:
        state = state_store.load(conn)
    assert set(state.neighbours) == set()
    add(qm)
    with qm.reading() as conn:
        state = state_store.refresh(conn, state)
    assert set(state.neighbours) == {"QMB"}
    with qm.engine.begin() as conn:
        links.remove_link(conn, "QMB")
    with qm.reading() as conn:
        state = state_store.refresh(conn, state)
    assert set(state.neighbours) == set()


def test_proxies_are_sent_once_per_new_link(qm: QueueManager) -> None:
    add(qm)
    with qm.engine.begin() as conn:
        assert links.mark_synced(conn, "QMB") is True
        assert links.mark_synced(conn, "QMB") is False
    assert link_of(qm, "QMB").synced is True  # type: ignore[union-attr]


# -- authentication ------------------------------------------------------------------------------


def test_the_right_token_authenticates_the_link(qm: QueueManager) -> None:
    link = add(qm)
    with qm.reading() as conn:
        assert links.authenticate(conn, "QMB", TOKEN) == link


@pytest.mark.parametrize(
    ("sender", "token"),
    [("QMB", TOKEN + "x"), ("QMB", TOKEN[:-1]), ("QMB", ""), ("QMX", TOKEN)],
    ids=["longer token", "shorter token", "no token", "unknown sender"],
)
def test_anything_else_is_3085(qm: QueueManager, sender: str, token: str) -> None:
    add(qm)
    with qm.reading() as conn, pytest.raises(MQError) as refused:
        links.authenticate(conn, sender, token)
    assert refused.value.reason == Reason.MQRCCF_UNKNOWN_BROKER == 3085


def test_tokens_are_compared_in_constant_time(qm: QueueManager, monkeypatch: pytest.MonkeyPatch) -> None:
    add(qm)
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(links.hmac, "compare_digest", spy)
    with qm.reading() as conn, pytest.raises(MQError):
        links.authenticate(conn, "QMB", "guess-0123456789abc")
    assert compared == [(TOKEN.encode(), b"guess-0123456789abc")]


# -- the sender lease ----------------------------------------------------------------------------


def test_one_process_holds_the_sender_lease(qm: QueueManager) -> None:
    add(qm)
    with qm.engine.begin() as conn:
        assert links.acquire_sender(conn, "QMB", "one", 10_000) is True
        assert links.acquire_sender(conn, "QMB", "two", 10_000) is False
    assert link_of(qm, "QMB").sender_owner == "one"  # type: ignore[union-attr]


def test_the_holder_renews_its_lease(qm: QueueManager, monkeypatch: pytest.MonkeyPatch) -> None:
    add(qm)
    monkeypatch.setattr(links, "now_ms", lambda: 1_000_000)
    with qm.engine.begin() as conn:
        assert links.acquire_sender(conn, "QMB", "one", 10_000)
    assert lease_until(qm, "QMB") == 1_010_000
    monkeypatch.setattr(links, "now_ms", lambda: 1_009_000)
    with qm.engine.begin() as conn:
        assert links.acquire_sender(conn, "QMB", "one", 10_000)
    assert lease_until(qm, "QMB") == 1_019_000


def test_another_process_takes_over_an_expired_lease(
    qm: QueueManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    add(qm)
    monkeypatch.setattr(links, "now_ms", lambda: 1_000_000)
    with qm.engine.begin() as conn:
        assert links.acquire_sender(conn, "QMB", "one", 10_000)
    monkeypatch.setattr(links, "now_ms", lambda: 1_010_000)  # the last moment of the lease
    with qm.engine.begin() as conn:
        assert not links.acquire_sender(conn, "QMB", "two", 10_000)
    monkeypatch.setattr(links, "now_ms", lambda: 1_010_001)
    with qm.engine.begin() as conn:
        assert links.acquire_sender(conn, "QMB", "two", 10_000)
        assert not links.acquire_sender(conn, "QMB", "one", 10_000)
    assert link_of(qm, "QMB").sender_owner == "two"  # type: ignore[union-attr]


def test_only_the_holder_releases_the_lease(qm: QueueManager) -> None:
    add(qm)
    with qm.engine.begin() as conn:
        links.acquire_sender(conn, "QMB", "one", 60_000)
        links.release_sender(conn, "QMB", "two")
        assert not links.acquire_sender(conn, "QMB", "two", 60_000)
        links.release_sender(conn, "QMB", "one")
        assert links.acquire_sender(conn, "QMB", "two", 60_000)


def test_no_lease_on_an_unknown_link(qm: QueueManager) -> None:
    with qm.engine.begin() as conn:
        assert links.acquire_sender(conn, "QMX", "one", 60_000) is False


# -- batches: sender side ------------------------------------------------------------------------


def test_batch_numbers_count_up_per_link(qm: QueueManager) -> None:
    add(qm, "QMB")
    add(qm, "QMC")
    with qm.engine.begin() as conn:
        numbers = [links.next_batch_number(conn, name) for name in ("QMB", "QMB", "QMC", "QMB")]
    assert numbers == [1, 2, 1, 3]
    assert link_of(qm, "QMB").next_batch == 4  # type: ignore[union-attr]


def test_a_batch_stays_in_flight_until_confirmed(qm: QueueManager) -> None:
    add(qm)
    with qm.engine.begin() as conn:
        links.store_batch(conn, "QMB", 1, b"first", 3)
        links.store_batch(conn, "QMB", 2, b"second", 2)
        links.record_error(conn, "QMB", "QMB unreachable")
    with qm.reading() as conn:
        assert links.in_flight(conn, "QMB") == links.InFlight(1, b"first", 3)
        assert links.outbox_depth(conn) == {"QMB": 5}
    assert link_of(qm, "QMB").last_error == "QMB unreachable"  # type: ignore[union-attr]
    before = now_ms()
    with qm.engine.begin() as conn:
        links.confirm_batch(conn, "QMB", 1)
    with qm.reading() as conn:
        assert links.in_flight(conn, "QMB") == links.InFlight(2, b"second", 2)
        assert links.outbox_depth(conn) == {"QMB": 2}
    link = link_of(qm, "QMB")
    assert link is not None and link.last_error is None
    assert link.last_sent_at is not None and before <= link.last_sent_at <= now_ms()
    with qm.engine.begin() as conn:
        links.confirm_batch(conn, "QMB", 2)
    with qm.reading() as conn:
        assert links.in_flight(conn, "QMB") is None
        assert links.outbox_depth(conn) == {}


def test_a_batch_number_is_stored_once(qm: QueueManager) -> None:
    add(qm)
    with qm.engine.begin() as conn:
        links.store_batch(conn, "QMB", 1, b"first", 1)
    with pytest.raises(Exception, match=r"(?i)unique|duplicate"), qm.engine.begin() as conn:
        links.store_batch(conn, "QMB", 1, b"again", 1)
    with qm.reading() as conn:
        assert list(conn.execute(select(outbox.c.payload))) == [(b"first",)]


def test_a_recorded_error_is_cut_to_2000_characters(qm: QueueManager) -> None:
    add(qm)
    with qm.engine.begin() as conn:
        links.record_error(conn, "QMB", "e" * 5000)
    assert link_of(qm, "QMB").last_error == "e" * 2000  # type: ignore[union-attr]


# -- batches: receiver side ----------------------------------------------------------------------


def accept(qm: QueueManager, epoch: str, number: int, sender: str = "QMB") -> bool:
    with qm.engine.begin() as conn:
        return links.accept_batch(conn, sender, epoch, number)


def test_within_an_epoch_only_higher_numbers_are_taken(qm: QueueManager) -> None:
    add(qm)
    assert [accept(qm, EPOCH, n) for n in (1, 1, 3, 2, 3, 4)] == [True, False, True, False, False, True]
    link = link_of(qm, "QMB")
    assert link is not None and link.received_batch == 4
    assert link.last_received_at is not None


def test_a_new_epoch_is_taken_from_any_number(qm: QueueManager) -> None:
    add(qm)
    assert accept(qm, EPOCH, 7)
    restarted = "f" * 32
    assert accept(qm, restarted, 1)
    assert not accept(qm, restarted, 1)
    assert accept(qm, restarted, 2)
    assert link_of(qm, "QMB").received_batch == 2  # type: ignore[union-attr]


def test_a_batch_from_an_unknown_sender_is_not_taken(qm: QueueManager) -> None:
    assert accept(qm, EPOCH, 1, sender="QMX") is False


def test_a_lease_held_by_a_dead_process_of_this_machine_is_taken_over_at_once(qm: QueueManager) -> None:
    """A broker restarted after a crash sends again without waiting out its predecessor."""
    add(qm)
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    dead = f"router:host:1/{process.pid}@{machine_key()}"
    with qm.engine.begin() as conn:
        assert links.acquire_sender(conn, "QMB", dead, 60_000)
    with qm.engine.begin() as conn:
        assert links.acquire_sender(conn, "QMB", "successor", 10_000)
    assert link_of(qm, "QMB").sender_owner == "successor"  # type: ignore[union-attr]


def test_a_lease_held_by_a_live_process_of_this_machine_is_not_taken(qm: QueueManager) -> None:
    add(qm)
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        alive = f"router:host:1/{process.pid}@{machine_key()}"
        with qm.engine.begin() as conn:
            assert links.acquire_sender(conn, "QMB", alive, 60_000)
        with qm.engine.begin() as conn:
            assert not links.acquire_sender(conn, "QMB", "successor", 10_000)
    finally:
        process.kill()
        process.wait()
    assert link_of(qm, "QMB").sender_owner == alive  # type: ignore[union-attr]
