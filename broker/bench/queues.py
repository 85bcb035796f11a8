"""Queue benchmark: put-many and batch get against what the database itself can do.

Rows per second alone say little (a laptop SSD and a cloud volume differ tenfold),
so every cell is measured next to its raw ceiling on the same database, in the same
run: the very rows the queue manager stored (read back after the put, so columns and
values are identical) written into a bare table with only a primary key, in
transactions of the same batch size, with the fastest plain client path: ``sqlite3``
``executemany`` on a connection with the product's pragmas (WAL, ``synchronous=FULL``)
and psycopg ``COPY`` on PostgreSQL. The ratio to that ceiling is what the queue manager
costs on top of the database; the target is at least 50% at batch 1000 for both put-many
and batch get (claim + delete, committed). Each cell runs three rounds and each contender
keeps its fastest, so a noisy moment on a shared machine does not decide the ratio.

SQLite runs in a temporary file; PostgreSQL in a throw-away database created on the
server of ``pg_url`` and dropped at the end, so the benchmark never touches real data.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import psycopg
from sqlalchemy import Column, Engine, MetaData, Table, select
from sqlalchemy.engine import make_url

import migrations
from broker.bench.options import DATABASES, emit, numbers, positive
from queues import Message, QueueManager, make_engine
from queues.database import conninfo
from queues.definition import MAX_MAX_DEPTH
from queues.schema import MESSAGE_COLUMNS, Id, messages

DEFAULT_BATCHES = (1, 100, 1000)
DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/postgres"

BODY_SIZE = 256
QUEUE = "BENCH.QUEUE"
CEILING_TABLE = "bench_ceiling"
WARM_UP_MESSAGES = 1_000
_COLUMNS = ", ".join(MESSAGE_COLUMNS)


def default_messages(batch: int) -> int:
    """Enough messages per cell for stable figures: every commit at batch 1 is a disk flush."""
    return 2_000 if batch == 1 else 50_000


@dataclass(frozen=True, slots=True)
class Cell:
    """One database and batch size: rows moved and seconds taken by each contender."""

    database: str
    batch: int
    messages: int
    ceiling_rows: int
    put_rows: int
    got_rows: int
    ceiling_seconds: float
    put_seconds: float
    get_seconds: float

    @property
    def ceiling_rate(self) -> float:
        return self.ceiling_rows / self.ceiling_seconds

    @property
    def put_rate(self) -> float:
        return self.put_rows / self.put_seconds

    @property
    def get_rate(self) -> float:
        return self.got_rows / self.get_seconds

    @property
    def put_ratio(self) -> float:
        return self.put_rate / self.ceiling_rate

    @property
    def get_ratio(self) -> float:
        return self.get_rate / self.ceiling_rate

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "ceiling_rows_per_second": self.ceiling_rate,
            "put_rows_per_second": self.put_rate,
            "get_rows_per_second": self.get_rate,
            "put_ratio": self.put_ratio,
            "get_ratio": self.get_ratio,
        }


class Ceiling(Protocol):
    """Writes rows into the bare table with the database's plain client."""

    def write(self, rows: Sequence[tuple[Any, ...]], batch: int) -> None: ...

    def clear(self) -> None: ...

    def close(self) -> None: ...


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class SqliteCeiling:
    """``executemany`` on a raw ``sqlite3`` connection that carries the product's pragmas."""

    def __init__(self, engine: Engine) -> None:
        self._pooled = engine.raw_connection()
        driver = self._pooled.driver_connection
        assert driver is not None
        self._conn = driver
        marks = ", ".join("?" * len(MESSAGE_COLUMNS))
        self._insert = f"INSERT INTO {CEILING_TABLE} ({_COLUMNS}) VALUES ({marks})"

    def write(self, rows: Sequence[tuple[Any, ...]], batch: int) -> None:
        for chunk in _chunks(rows, batch):
            self._conn.execute("BEGIN")
            self._conn.executemany(self._insert, chunk)
            self._conn.execute("COMMIT")

    def clear(self) -> None:
        self._conn.execute(f"DELETE FROM {CEILING_TABLE}")

    def close(self) -> None:
        self._pooled.close()


class PostgresCeiling:
    """psycopg ``COPY`` on its own connection, one transaction per batch."""

    def __init__(self, conninfo: str) -> None:
        self._conn = psycopg.connect(conninfo)
        self._copy = f"COPY {CEILING_TABLE} ({_COLUMNS}) FROM STDIN"

    def write(self, rows: Sequence[tuple[Any, ...]], batch: int) -> None:
        for chunk in _chunks(rows, batch):
            with self._conn.cursor() as cursor, cursor.copy(self._copy) as copy:
                for row in chunk:
                    copy.write_row(row)
            self._conn.commit()

    def clear(self) -> None:
        self._conn.execute(f"TRUNCATE {CEILING_TABLE}")
        self._conn.commit()

    def close(self) -> None:
        self._conn.close()


def _create_ceiling_table(engine: Engine) -> None:
    """The message table's columns and types, without its indexes: only the primary key."""
    bare = Table(
        CEILING_TABLE,
        MetaData(),
        Column("id", Id, primary_key=True, autoincrement=True),
        *(Column(c.name, c.type, nullable=c.nullable) for c in messages.columns if c.name != "id"),
    )
    bare.create(engine)


@contextmanager
def _sqlite() -> Iterator[tuple[Engine, Callable[[], Ceiling]]]:
    with tempfile.TemporaryDirectory(prefix="broker-bench-") as directory:
        engine = make_engine(f"sqlite:///{Path(directory) / 'bench.db'}")
        try:
            yield engine, lambda: SqliteCeiling(engine)
        finally:
            engine.dispose()


@contextmanager
def _postgres(pg_url: str) -> Iterator[tuple[Engine, Callable[[], Ceiling]]]:
    name = f"broker_bench_{os.getpid()}"
    admin = conninfo(pg_url)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    url = make_url(pg_url).set(database=name).render_as_string(hide_password=False)
    engine = make_engine(url)
    try:
        yield engine, lambda: PostgresCeiling(conninfo(url))
    finally:
        engine.dispose()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _prepare(engine: Engine) -> QueueManager:
    migrations.upgrade(engine)
    QueueManager.create(engine, "QM1")
    qm = QueueManager(engine, appl_name="bench", user_id="bench")
    qm.define_queue(QUEUE, max_depth=MAX_MAX_DEPTH)
    _create_ceiling_table(engine)
    return qm


def _bodies(count: int) -> list[Message]:
    filler = bytes(range(256)) * (BODY_SIZE // 256 + 1)
    return [Message(body=(i.to_bytes(8, "big") + filler)[:BODY_SIZE]) for i in range(count)]


def _stored_rows(qm: QueueManager) -> list[tuple[Any, ...]]:
    """What the put stored, column for column, for the ceiling to write again."""
    columns = [messages.c[name] for name in MESSAGE_COLUMNS]
    with qm.reading() as conn:
        return [tuple(row) for row in conn.execute(select(*columns).order_by(messages.c.id))]


def _settle(engine: Engine) -> None:
    """Start every cell from a message table without the previous cell's dead rows:
    PostgreSQL keeps deleted rows until VACUUM, and the claim's index scan walks past
    them, so a cell would otherwise measure how far autovacuum happens to have got."""
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql(f"VACUUM ANALYZE {messages.name}")


def _analyze(engine: Engine) -> None:
    """Statistics for the queue as it now stands, as autovacuum's analyze gathers them on a
    server where it runs (the default): the claim's plan depends on them, and the table was
    last analysed empty, by :func:`_settle`."""
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql(f"ANALYZE {messages.name}")


def _measure(database: str, batch: int, count: int, qm: QueueManager, ceiling: Ceiling) -> Cell:
    items = [(QUEUE, message) for message in _bodies(count)]
    _settle(qm.engine)
    started = time.perf_counter()
    put = 0
    for chunk in _chunks(items, batch):
        with qm.unit_of_work() as uow:
            put += len(uow.put_many(chunk).msg_ids)
    put_seconds = time.perf_counter() - started

    rows = _stored_rows(qm)
    _analyze(qm.engine)
    started = time.perf_counter()
    got = 0
    while got < put:
        with qm.unit_of_work() as uow:
            taken = len(uow.get_batch(QUEUE, batch))
        if not taken:
            break
        got += taken
    get_seconds = time.perf_counter() - started

    started = time.perf_counter()
    ceiling.write(rows, batch)
    ceiling_seconds = time.perf_counter() - started
    ceiling.clear()
    return Cell(database, batch, count, len(rows), put, got, ceiling_seconds, put_seconds, get_seconds)


# Each cell is measured this many times and each contender keeps its fastest round: on a
# machine shared with the database, noise only ever slows a round down.
ROUNDS = 3


def _fastest(rounds: Sequence[Cell]) -> Cell:
    return replace(
        rounds[0],
        ceiling_seconds=min(c.ceiling_seconds for c in rounds),
        put_seconds=min(c.put_seconds for c in rounds),
        get_seconds=min(c.get_seconds for c in rounds),
    )


def run(
    batches: Sequence[int] = DEFAULT_BATCHES,
    *,
    messages: int | None = None,
    pg_url: str = DEFAULT_PG_URL,
) -> list[Cell]:
    """Every batch size on SQLite, then on PostgreSQL; ``messages`` per cell overrides the defaults."""
    targets = {"sqlite": _sqlite, "postgresql": lambda: _postgres(pg_url)}
    cells = []
    for database in DATABASES:
        with targets[database]() as (engine, open_ceiling):
            qm = _prepare(engine)
            ceiling = open_ceiling()
            try:
                widest = max(batches)
                _measure(database, widest, min(WARM_UP_MESSAGES, 10 * widest), qm, ceiling)
                for batch in batches:
                    count = messages if messages is not None else default_messages(batch)
                    rounds = [_measure(database, batch, count, qm, ceiling) for _ in range(ROUNDS)]
                    cells.append(_fastest(rounds))
            finally:
                ceiling.close()
                qm.close()
    return cells


def table(cells: Sequence[Cell]) -> str:
    header = (
        f"{'database':<10} {'batch':>5} {'messages':>8} {'ceiling rows/s':>14}"
        f" {'put-many rows/s':>15} {'ratio':>6} {'batch-get rows/s':>16} {'ratio':>6}"
    )
    lines = [header]
    for c in cells:
        lines.append(
            f"{c.database:<10} {c.batch:>5} {c.messages:>8} {c.ceiling_rate:>14,.0f}"
            f" {c.put_rate:>15,.0f} {c.put_ratio:>6.0%} {c.get_rate:>16,.0f} {c.get_ratio:>6.0%}"
        )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--messages", type=positive, help="messages per cell (default 2,000 at batch 1, else 50,000)"
    )
    parser.add_argument(
        "--batches",
        type=numbers,
        default=DEFAULT_BATCHES,
        metavar="N,N,...",
        help="batch sizes (default 1,100,1000)",
    )
    parser.add_argument(
        "--pg-url",
        default=DEFAULT_PG_URL,
        metavar="URL",
        help="PostgreSQL server on which a throw-away database is created (default the local one)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")


def command(args: argparse.Namespace) -> None:
    cells = run(args.batches, messages=args.messages, pg_url=args.pg_url)
    emit(args, [cell.as_dict() for cell in cells], table(cells))
