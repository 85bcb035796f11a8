"""The driver of ``broker spark route``: lease, plan, then every partition routed and
committed by its own task, in partition order.

1. Take the stream's lease (``broker.store.leases``): from then on no routing
   service routes the stream, and none is half-way through a batch of it.
2. In one transaction: housekeeping at the job's clock (written), the snapshot
   every task routes against (``broker.spark.snapshot``), the backlog as of now
   cut into partitions of whole service batches (``broker.spark.plan``), the
   run's record (clearing what dead runs left).
3. Spark reads each partition over JDBC with the Debian driver jars, and a task
   routes it (``broker.spark.partition``) and commits it in its turn
   (``broker.spark.commit``): its deliveries, replies, forwards, dead letters and
   retained changes made visible, and its backlog removed, in one transaction.
   A monitor thread renews the lease and logs progress from the partition markers
   (so it works the same on a cluster).
4. A last transaction checks that every partition committed and nothing of the
   backlog is left, ends the run and frees the stream.

A failure or a kill at any point leaves whole partitions done and the rest of the
backlog in place: a rerun routes what is left, and ends where one clean run would.
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

from sqlalchemy import Connection
from sqlalchemy.engine import make_url

from broker.core.effects import Effect
from broker.core.state import BrokerConfig
from broker.core.system import DEFAULT_STREAM
from broker.service.config import Settings, broker_config
from broker.spark import commit, runs, task
from broker.spark.partition import Stager, TaskSpec
from broker.spark.plan import Plan, make_plan
from broker.spark.runs import PartSummary
from broker.spark.snapshot import PutContext, Snapshot, capture
from broker.store import StateStore, leases
from queues import QueueManager
from queues.database import connect_params, normalise_url
from queues.errors import MQError
from queues.ids import now_ms
from queues.names import check_queue_name
from queues.owners import owner_name
from queues.reasons import Reason
from queues.schema import messages

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

JARS = ("/usr/share/java/postgresql.jar", "/usr/share/java/xerial-sqlite-jdbc.jar")
# Debian's sqlite-jdbc jar has no native library inside; libxerial-sqlite-jdbc-jni puts it here.
SQLITE_NATIVE_DIR = "/usr/lib/x86_64-linux-gnu/jni"
FETCH_SIZE = 2_000


@dataclass(frozen=True, slots=True)
class JobOptions:
    stream: str = DEFAULT_STREAM
    partitions: int | None = None  # default: about plan.ROWS_PER_PARTITION messages, 2+ per core
    lease_ms: int = leases.DEFAULT_LEASE_MS
    progress_seconds: float = 5.0
    turn_timeout: float = 600.0  # how long a partition waits for the one before it to commit


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
    plan_seconds: float  # lease, housekeeping, snapshot and partitioning
    stage_seconds: float  # the Spark stage: every partition read, routed and committed
    finish_seconds: float
    task_route_seconds: float  # summed over tasks: reading and routing
    task_wait_seconds: float  # summed over tasks: waiting for the partition before to commit
    task_write_seconds: float  # summed over tasks: their transactions

    @property
    def seconds(self) -> float:
        return self.plan_seconds + self.stage_seconds + self.finish_seconds

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
                f"  plan {self.plan_seconds:.1f} s, read+route+commit {self.stage_seconds:.1f} s "
                f"(tasks: route {self.task_route_seconds:.1f} s, wait {self.task_wait_seconds:.1f} s, "
                f"write {self.task_write_seconds:.1f} s), finish {self.finish_seconds:.1f} s",
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
    params = connect_params(url)
    options = {"driver": "org.postgresql.Driver"}
    for name, jdbc in (("user", "user"), ("password", "password"), ("connect_timeout", "connectTimeout")):
        if params.get(name):
            options[jdbc] = str(params[name])
    if params.get("target_session_attrs") in ("read-write", "primary"):
        options["targetServerType"] = "primary"  # of several hosts, the one the broker writes to
    return f"jdbc:postgresql://{_jdbc_hosts(params)}/{parsed.database}", options


def _jdbc_hosts(params: dict[str, Any]) -> str:
    """libpq's ``host=h1,h2 port=p1,p2`` (one port for every host, or none) as JDBC's
    ``h1:p1,h2:p2``."""
    hosts = str(params.get("host") or "127.0.0.1").split(",")
    ports = str(params.get("port") or "").split(",")
    if len(ports) == 1:
        ports *= len(hosts)
    return ",".join(f"{host}:{port or 5432}" for host, port in zip(hosts, ports, strict=True))


_SPARK_TYPES = {int: "LONG", str: "STRING", bytes: "BINARY"}
# Spark has no SQLite dialect: every column's type is given (the same on PostgreSQL).
CUSTOM_SCHEMA = ", ".join(f"{c.name} {_SPARK_TYPES[c.type.python_type]}" for c in messages.columns)


def read_backlog(spark: SparkSession, url: str, plan: Plan) -> DataFrame:
    """The backlog, one Spark partition per plan partition (in order), columns in table
    order."""
    check_queue_name(plan.stream)  # MQ names cannot hold a quote: safe inside the SQL text
    jdbc_url, options = jdbc_source(url)
    return (
        spark.read.option("customSchema", CUSTOM_SCHEMA)
        .option("fetchsize", FETCH_SIZE)
        .jdbc(jdbc_url, messages.name, predicates=[plan.predicate(p) for p in plan.parts], properties=options)
    )


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
    resource = leases.stream_resource(stream)
    db = qm.engine
    started = time.perf_counter()
    leases.take_over(qm, stream, owner, options.lease_ms)
    log.info("stream leased", extra={"stream": stream, "owner": owner})
    finished = False
    try:
        now = now_ms()
        with db.begin() as conn:
            context = PutContext(qm.name, qm.user_id, qm.appl_name)
            snapshot, housekeeping = capture(
                conn, state_store, job=job, stream=stream, now=now, context=context
            )
            totals = _housekeeping(conn, snapshot, housekeeping)
            plan = make_plan(
                conn,
                stream,
                now,
                batch_size=settings.batch_size,
                partitions=options.partitions,
                cores=spark.sparkContext.defaultParallelism,
            )
            runs.start_run(conn, job, stream, plan.watermark, len(plan.parts), now)
        log.info(
            "backlog",
            extra={
                "stream": stream,
                "rows": plan.rows,
                "watermark": plan.watermark,
                "partitions": len(plan.parts),
            },
        )
        spec = TaskSpec(snapshot, plan, owner, settings.batch_size, options.turn_timeout)
        planned = time.perf_counter()
        with _monitor(spark, qm, resource, owner, job, len(plan.parts), options):
            totals.add(_route(spark, settings.database_url, spec))
        staged = time.perf_counter()
        _finish(qm, plan, job, resource, owner)
        finished = True
    finally:
        if not finished:
            _abandon(qm, job, resource, owner)
    return Summary(
        job=job,
        stream=stream,
        watermark=plan.watermark,
        partitions=len(plan.parts),
        rows=totals.rows_read,
        messages=totals.messages,
        deliveries=totals.deliveries,
        replies=totals.replies,
        forwards=totals.forwards,
        dead_letters=totals.dead_letters,
        queue_full=totals.queue_full,
        written=totals.written,
        plan_seconds=planned - started,
        stage_seconds=staged - planned,
        finish_seconds=time.perf_counter() - staged,
        task_route_seconds=totals.route_us / 1e6,
        task_wait_seconds=totals.wait_us / 1e6,
        task_write_seconds=totals.write_us / 1e6,
    )


def _housekeeping(conn: Connection, snapshot: Snapshot, effects: list[Effect]) -> PartSummary:
    """Write what housekeeping at the job's clock does (expired subscriptions and retained
    publications removed, proxy deregistrations sent), before any partition, as the
    service's housekeeping would have come before its batches."""
    stager = Stager(snapshot)
    changes = [effect for _, effect in stager.stage(0, effects)]
    if stager.rows or changes:
        commit.write(conn, snapshot, stager.rows, {}, changes, stager.summary)
    return stager.summary


def _route(spark: SparkSession, url: str, spec: TaskSpec) -> PartSummary:
    """Run the Spark stage: every partition routed and committed; their summaries added up."""
    totals = PartSummary()
    plan = spec.plan
    if not plan.parts:
        return totals
    frame = read_backlog(spark, url, plan)
    if frame.rdd.getNumPartitions() != len(plan.parts):
        raise JobError(f"Spark made {frame.rdd.getNumPartitions()} partitions, not {len(plan.parts)}")
    broadcast = spark.sparkContext.broadcast(spec.encode())
    try:
        job = spec.snapshot.job
        spark.sparkContext.setJobGroup(job, f"broker spark route {plan.stream}", interruptOnCancel=True)
        route = partial(task.route_partition, job=job, url=url, spec=broadcast)
        for row in frame.mapInArrow(route, task.SUMMARY_SCHEMA).collect():
            totals.add(PartSummary(*(row[name] for name in runs.SUMMARY_FIELDS)))
    finally:
        broadcast.destroy()
    return totals


def _finish(qm: QueueManager, plan: Plan, job: str, resource: str, owner: str) -> None:
    """Check that every partition committed and the whole backlog went; end the run."""
    with qm.engine.begin() as conn:
        leases.verify(conn, resource, owner, now_ms())
        done = runs.committed_parts(conn, job)
        if len(done) != len(plan.parts):
            raise JobError(f"{len(done)} of {len(plan.parts)} partitions committed")
        left = runs.remaining(conn, plan.backlog())
        if left:
            raise JobError(f"{left} messages of the backlog were not consumed")
        runs.end_run(conn, job)
        leases.release(conn, resource, owner)


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
                    leases.renew(conn, resource, owner, now_ms(), options.lease_ms)
                    done = runs.committed_parts(conn, job)
            except leases.LeaseError as exc:
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
    """After a failure: end the run and free the stream, if the database lets us. The
    partitions that committed stay done; the rest of the backlog is where it was."""
    try:
        with qm.engine.begin() as conn:
            runs.end_run(conn, job)
            leases.release(conn, resource, owner)
    except Exception:
        log.exception("could not end the failed run; the next run will", extra={"job": job})
