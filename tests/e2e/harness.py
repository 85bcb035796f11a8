"""What the service, client and CLI tests share: a routing service in this process, and readers for
the queues it writes (subscriber queues, reply queues, the dead-letter queue).

The service is the real :class:`~broker.service.router.RoutingService` on a real database; tests either
drive it a batch at a time (``run_once``/``route_queue``) or let :class:`ServiceThread` run its
loop while a client waits for replies, exactly as ``broker serve`` would.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from sqlalchemy import Engine, inspect, text

from broker.client import ReceivedPublication, decode_publication
from broker.service.config import Settings
from broker.service.router import RoutingService
from queues import DEAD_LETTER_QUEUE, Message, NoMessageAvailable, QueueManager, dlh
from queues.message import derive
from tests.queues import databases


def shared_database(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engine]:
    """Body of a module-scoped fixture (params ``tests.conftest.DIALECTS``): one migrated database
    per dialect for a whole module, because creating one per test costs more than most tests."""
    yield from databases.shared_engine(request, tmp_path_factory)


def emptied_database(shared: Engine) -> Engine:
    """Body of an ``engine`` fixture: the shared database as a new one, queue manager QM1, every
    table empty and every id counting from 1 again (tests print and compare ids)."""
    with shared.begin() as conn:
        tables = [name for name in inspect(conn).get_table_names() if name != "alembic_version"]
        if conn.dialect.name == "postgresql":
            conn.execute(text(f"TRUNCATE TABLE {', '.join(tables)} RESTART IDENTITY"))
        else:
            for name in tables:
                conn.execute(text(f"DELETE FROM {name}"))
            conn.execute(text("DELETE FROM sqlite_sequence"))
        conn.execute(text("INSERT INTO psb_meta (id, version) VALUES (1, 0)"))
    QueueManager.create(shared, "QM1")
    return shared


def settings(engine: Engine, **overrides: object) -> Settings:
    return Settings(database_url=engine.url.render_as_string(hide_password=False), **overrides)  # type: ignore[arg-type]


def service(qm: QueueManager, **overrides: object) -> RoutingService:
    """A prepared routing service (system queues defined) for ``qm``'s database."""
    routing = RoutingService(qm, settings(qm.engine, **overrides))
    routing.prepare()
    return routing


class ServiceThread:
    """``RoutingService.run`` in a background thread, as ``broker serve`` runs it."""

    def __init__(self, routing: RoutingService) -> None:
        self.service = routing
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="routing-service", daemon=True)

    def _run(self) -> None:
        try:
            self.service.run()
        except BaseException as exc:  # reported by stop(): a crashed loop fails the test
            self.error = exc

    def start(self) -> ServiceThread:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.service.stop()
        self.service.qm.notifier.announce_everything()  # wake the idle wait at once
        self._thread.join(30)
        assert not self._thread.is_alive(), "the routing loop did not stop"
        if self.error is not None:
            raise AssertionError(f"the routing loop crashed: {self.error!r}") from self.error


@contextmanager
def running(qm: QueueManager, **overrides: object) -> Iterator[ServiceThread]:
    thread = ServiceThread(service(qm, **overrides)).start()
    try:
        yield thread
    finally:
        thread.stop()


def drain(qm: QueueManager, queue: str, correl_id: bytes | None = None) -> list[ReceivedPublication]:
    """Every publication on ``queue`` (with ``correl_id``, if given), in get order."""
    found = []
    while True:
        try:
            found.append(decode_publication(qm.get(queue, correl_id=correl_id)))
        except NoMessageAvailable:
            return found


def bodies(publications: list[ReceivedPublication]) -> list[str]:
    return [p.text for p in publications]


@dataclass(frozen=True)
class DeadLetter:
    """A dead-letter queue message: its MQDLH and the message as it was before."""

    header: dlh.DeadLetterHeader
    original: Message

    @property
    def publication(self) -> ReceivedPublication:
        return decode_publication(self.original)


def dead_letters(qm: QueueManager) -> list[DeadLetter]:
    """The dead-letter queue's messages, oldest first, left where they are."""
    found = []
    for browsed in qm.browse(DEAD_LETTER_QUEUE, limit=1000):
        m = browsed.message
        header, data = dlh.decode(m.body, m.encoding)
        original = derive(m, body=data, format=header.format, encoding=header.encoding, ccsid=header.ccsid)
        found.append(DeadLetter(header, original))
    return found
