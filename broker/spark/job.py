"""The driver of ``broker spark route``: lease, watermark, read, route, merge.

1. Take the stream's lease (``broker.spark.lease``): from then on no routing
   service routes the stream, and none is half-way through a batch of it.
2. In one transaction: the watermark W (the stream's highest row id), the
   snapshot every task routes against (``broker.spark.snapshot``), the run's
   record (clearing what dead runs left).
3. Spark reads the backlog (the stream's rows with id <= W) over JDBC in
   id-range partitions, with the Debian driver jars, and each partition is
   routed and staged by ``broker.spark.partition`` through ``mapInArrow``.
   A monitor thread renews the lease and logs progress from the partition
   markers (so it works the same on a cluster).
4. The final merge (``broker.spark.merge``) makes it all visible in one
   transaction; the staging is cleared afterwards.

A failure anywhere before the merge commits leaves nothing visible: the job
releases its lease and clears its staging if it still can, and a rerun starts
afresh. Killed outright, it leaves the lease to lapse and the staging to the
next run.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import make_url

from broker.config import Settings
from broker.owners import owner_name
from broker.service import broker_config
from broker.spark import lease, merge, partition, staging
from broker.spark.snapshot import PutContext, capture
from broker.spark.staging import PartSummary
from broker.state import BrokerConfig
from broker.store import StateStore
from broker.system import DEFAULT_STREAM
from queues import QueueManager, sql
from queues.database import normalise_url
from queues.errors import MQError
from queues.ids import now_ms
from queues.names import DEAD_LETTER_QUEUE, check_queue_name
from queues.reasons import Reason
from queues.schema import messages

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

JARS = ("/usr/share/java/postgresql.jar", "/usr/share/java/xerial-sqlite-jdbc.jar")
# Debian's sqlite-jdbc jar has no native library inside; libxerial-sqlite-jdbc-jni puts it here.
SQLITE_NATIVE_DIR = "/usr/lib/x86_64-linux-gnu/jni"
ROWS_PER_PARTITION = 10_000
FETCH_SIZE = 2_000


@dataclass(frozen=True, slots=True)
class JobOptions:
    stream: str = DEFAULT_STREAM
    partitions: int | None = None  # default: one per ROWS_PER_PARTITION rows, at least two per core
    lease_ms: int = lease.DEFAULT_LEASE_MS
    progress_seconds: float = 5.0


@dataclass(frozen=True, slots=True)
class Summary:
    job: str
    stream: str
    watermark: int
    partitions: int
    rows: int  # backlog rows consumed, expired ones included
    messages: int  # of which routed
    deliveries: int
    replies: int
    forwards: int
    dead_letters: int  # messages written to the dead-letter queue
    queue_full: int  # of which deliveries their queue had no room for (MQRC_Q_FULL)
    written: int  # messages written to all queues
    route_seconds: float  # read + route + stage (the Spark stage), wall clock
    merge_seconds: float
    cleanup_seconds: float
    task_route_seconds: float  # summed over tasks: reading and routing
    task_stage_seconds: float  # summed over tasks: writing the staged rows

    @property
    def seconds(self) -> float:
        return self.route_seconds + self.merge_seconds + self.cleanup_seconds

    @property
    def rows_per_second(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "seconds": self.seconds, "rows_per_second": self.rows_per_second}

    def text(self) -> str:
        return "\n".join(
            [
                f"routed {self.messages:,} messages of {self.stream} (ids <= {self.watermark}) "
                f"in {self.partitions} partitions",
                f"  deliveries {self.deliveries:,}, replies {self.replies:,}, forwards {self.forwards:,}, "
                f"dead letters {self.dead_letters:,} ({self.queue_full:,} for full queues)",
                f"  read+route+stage {self.route_seconds:.1f} s "
                f"(tasks: route {self.task_route_seconds:.1f} s, stage {self.task_stage_seconds:.1f} s), "
                f"merge {self.merge_seconds:.1f} s, "
                f"clean-up {self.cleanup_seconds:.1f} s",
                f"  total {self.seconds:.1f} s, {self.rows_per_second:,.0f} messages/s",
            ]
        )


class JobError(MQError):
    def __init__(self, detail: str) -> None:
        super().__init__(Reason.MQRCCF_COMMAND_FAILED, detail)


def spark_session(master: str, *, app_name: str = "broker spark route") -> SparkSession:
    """A session whose Python workers run this interpreter (so they have lxml and this
    package) and whose JVMs have the Debian JDBC drivers."""
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    native = f"-Dorg.sqlite.lib.path={SQLITE_NATIVE_DIR}"
    return (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.jars", ",".join(JARS))
        .config("spark.pyspark.python", sys.executable)
        .config("spark.driver.extraJavaOptions", native)
        .config("spark.executor.extraJavaOptions", native)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )


def jdbc_source(url: str) -> tuple[str, dict[str, str]]:
    """The JDBC URL and connection options for a database URL the broker accepts."""
    parsed = make_url(normalise_url(url))
    if parsed.get_backend_name() == "sqlite":
        if not parsed.database or parsed.database == ":memory:":
            raise JobError("the Spark job needs a SQLite database file, not an in-memory database")
        return f"jdbc:sqlite:{Path(parsed.database).resolve()}", {"driver": "org.sqlite.JDBC"}
    options = {"driver": "org.postgresql.Driver"}
    if parsed.username:
        options["user"] = parsed.username
    if parsed.password:
        options["password"] = str(parsed.password)
    host = parsed.host or "127.0.0.1"
    return f"jdbc:postgresql://{host}:{parsed.port or 5432}/{parsed.database}", options


_SPARK_TYPES = {int: "LONG", str: "STRING", bytes: "BINARY"}
# Spark has no SQLite dialect: every column's type is given (the same on PostgreSQL).
CUSTOM_SCHEMA = ", ".join(f"{c.name} {_SPARK_TYPES[c.type.python_type]}" for c in messages.columns)


def read_backlog(
    spark: SparkSession, url: str, stream: str, low: int, watermark: int, parts: int
) -> DataFrame:
    """The stream's rows with id <= watermark, in ``parts`` id ranges, columns in table order."""
    check_queue_name(stream)  # MQ names cannot hold a quote: safe inside the SQL text
    jdbc_url, options = jdbc_source(url)
    columns = ", ".join(sql.COLUMNS)
    query = f"(SELECT {columns} FROM {messages.name} WHERE queue = '{stream}' AND id <= {watermark})"
    reader = (
        spark.read.format("jdbc")
        .options(**options)
        .option("url", jdbc_url)
        .option("dbtable", f"{query} backlog")
        .option("customSchema", CUSTOM_SCHEMA)
        .option("fetchsize", FETCH_SIZE)
    )
    if parts > 1:
        reader = (
            reader.option("partitionColumn", "id")
            .option("lowerBound", low)
            .option("upperBound", watermark)
            .option("numPartitions", parts)
        )
    return reader.load()


def partition_count(options: JobOptions, backlog: staging.Backlog, cores: int) -> int:
    """None for an empty backlog; Spark cuts the id range into at most ``watermark - low``
    strides."""
    if not backlog.rows:
        return 0
    wanted = options.partitions or max(2 * cores, -(-backlog.rows // ROWS_PER_PARTITION))
    return max(1, min(wanted, backlog.watermark - backlog.low))


def check_stream(qm: QueueManager, settings: Settings, stream: str) -> BrokerConfig:
    """The broker's configuration, if ``stream`` is one of its stream queues (before a
    Spark session is worth starting)."""
    config = broker_config(qm.name, settings)
    if stream not in config.streams:
        raise JobError(f"{stream} is not a stream queue of this broker ({', '.join(config.streams)})")
    return config


def run(spark: SparkSession, qm: QueueManager, settings: Settings, options: JobOptions) -> Summary:
    config = check_stream(qm, settings, options.stream)
    stream = options.stream
    state_store = StateStore(
        config, default_allow=settings.default_policy == "allow", admin_group=settings.admin_group
    )
    job = uuid.uuid4().hex
    owner = owner_name(f"spark:{job}")
    resource = lease.stream_resource(stream)
    db = qm.engine
    lease.take_over(qm, stream, owner, options.lease_ms)
    log.info("stream leased", extra={"stream": stream, "owner": owner})
    merged = False
    try:
        now = now_ms()
        with db.begin() as conn:
            backlog = staging.backlog(conn, stream)
            snapshot = capture(
                conn,
                state_store,
                job=job,
                stream=stream,
                now=now,
                context=PutContext(qm.name, qm.user_id, qm.appl_name),
            )
            parts = partition_count(options, backlog, spark.sparkContext.defaultParallelism)
            staging.start_run(conn, job, stream, backlog.watermark, parts, now)
        log.info(
            "backlog",
            extra={
                "stream": stream,
                "rows": backlog.rows,
                "watermark": backlog.watermark,
                "partitions": parts,
            },
        )
        started = time.perf_counter()
        with _monitor(spark, qm, resource, owner, job, parts, options):
            totals = _route(spark, settings.database_url, snapshot.encode(), job, backlog, parts, stream)
        routed = time.perf_counter()
        run_ = merge.Run(snapshot, owner, backlog.watermark, parts, settings.batch_size)
        result = merge.merge(db, run_, state_store)
        merged = True
        merged_at = time.perf_counter()
        with db.begin() as conn:
            staging.clear(conn, job)
        cleaned = time.perf_counter()
    finally:
        if not merged:
            _abandon(qm, job, resource, owner)
    totals.add(result.routed)
    return Summary(
        job=job,
        stream=stream,
        watermark=backlog.watermark,
        partitions=parts,
        rows=result.consumed,
        messages=totals.messages,
        deliveries=totals.deliveries,
        replies=totals.replies,
        forwards=totals.forwards,
        dead_letters=result.written.get(DEAD_LETTER_QUEUE, 0),
        queue_full=result.overflowed,
        written=sum(result.written.values()),
        route_seconds=routed - started,
        merge_seconds=merged_at - routed,
        cleanup_seconds=cleaned - merged_at,
        task_route_seconds=totals.route_us / 1e6,
        task_stage_seconds=totals.stage_us / 1e6,
    )


def _route(
    spark: SparkSession, url: str, payload: bytes, job: str, backlog: staging.Backlog, parts: int, stream: str
) -> PartSummary:
    """Run the Spark stage: every partition routed and staged; their summaries added up."""
    totals = PartSummary()
    if not backlog.rows:
        return totals
    frame = read_backlog(spark, url, stream, backlog.low, backlog.watermark, parts)
    if frame.rdd.getNumPartitions() != parts:
        raise JobError(f"Spark made {frame.rdd.getNumPartitions()} partitions of the backlog, not {parts}")
    broadcast = spark.sparkContext.broadcast(payload)
    try:
        spark.sparkContext.setJobGroup(job, f"broker spark route {stream}", interruptOnCancel=True)
        route = partial(partition.route_partition, job=job, url=url, snapshot=broadcast)
        for row in frame.mapInArrow(route, partition.SUMMARY_SCHEMA).collect():
            totals.add(PartSummary(*(row[name] for name in staging.SUMMARY_FIELDS)))
    finally:
        broadcast.destroy()
    return totals


@contextmanager
def _monitor(
    spark: SparkSession,
    qm: QueueManager,
    resource: str,
    owner: str,
    job: str,
    parts: int,
    options: JobOptions,
) -> Iterator[None]:
    """Renew the lease and log progress while the block runs; a lapsed lease cancels the
    Spark job (a router may be routing the stream)."""
    stop = threading.Event()
    lost: list[MQError] = []
    started = time.perf_counter()

    interval = min(options.progress_seconds, options.lease_ms / 3000)  # renew three times a lease

    def watch() -> None:
        while not stop.wait(interval):
            try:
                with qm.engine.begin() as conn:
                    lease.renew(conn, resource, owner, now_ms(), options.lease_ms)
                    done = staging.staged_parts(conn, job)
            except lease.LeaseError as exc:
                lost.append(exc)
                spark.sparkContext.cancelJobGroup(job)
                return
            except Exception as exc:  # the database may come back before the lease lapses
                log.warning("could not renew the lease", extra={"error": repr(exc)})
                continue
            rows = sum(part.rows_read for part in done.values())
            elapsed = time.perf_counter() - started
            log.info(
                "progress",
                extra={
                    "partitions_done": len(done),
                    "partitions": parts,
                    "rows_routed": rows,
                    "rows_per_second": round(rows / elapsed) if elapsed else 0,
                },
            )

    thread = threading.Thread(target=watch, name="spark-monitor", daemon=True)
    thread.start()
    try:
        yield
    except Exception:
        if lost:  # the Spark job failed because it was cancelled: say why
            raise lost[0] from None
        raise
    finally:
        stop.set()
        thread.join()
    if lost:
        raise lost[0]


def _abandon(qm: QueueManager, job: str, resource: str, owner: str) -> None:
    """After a failure: clear this run's staging and free the stream, if the database lets us."""
    try:
        with qm.engine.begin() as conn:
            staging.end_run(conn, job)
            staging.clear(conn, job)
            lease.release(conn, resource, owner)
    except Exception:
        log.exception("could not clear the failed run; the next run will", extra={"job": job})
