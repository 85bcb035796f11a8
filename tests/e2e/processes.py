"""Real ``broker serve`` processes and a steady publisher, for the end-to-end and fault tests.

A :class:`ServeProcess` is the installed console script, started the way an operator starts it,
logging JSON lines to a file the test reads (readiness, batches routed, warnings). Readiness is
its ``broker started`` line: it is logged after the database is migrated and every system queue
defined, so from then on commands put by the test are served. Each process is stopped by its own
pid; the fixtures kill whatever is still alive at teardown. :class:`Brokers` groups the processes
of one test on one database; :class:`PrivateCluster` is a PostgreSQL server a test may restart.

A :class:`Publisher` thread puts numbered publications (the body is the number) at a steady pace
through its own queue manager, as an application process would. A put whose commit fails with the
database gone may or may not have committed: such numbers are recorded as ``uncertain`` rather
than retried, so that a duplicate or a gap is always the broker's doing, never the test's.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from broker.bench import processes
from broker.bench.processes import child_environment, free_port  # noqa: F401 (the tests use them from here)
from broker.client import command_message
from broker.core.system import DEFAULT_STREAM
from broker.protocol import psc
from broker.protocol.options import PubOpt
from queues import MQError, QueueManager, Reason, make_engine

BROKER = Path(sys.executable).with_name("broker")  # the installed console script
PG_BIN = Path("/usr/lib/postgresql/15/bin")
READY_SECONDS = 60.0


class ServeProcess(processes.ServeProcess):
    """One ``broker serve`` process of a test (restartable: each start is a new process, same
    log file), ready once every router and the MQTT listener of this start say so."""

    def __init__(
        self,
        url: str,
        workdir: Path,
        name: str,
        batch_size: int,
        routers: int = 1,
        api_port: int | None = None,
        mqtt_port: int | None = None,
        environment: dict[str, str] | None = None,
    ) -> None:
        serve = ["--batch-size", str(batch_size), "--routers", str(routers)]
        if api_port is not None:
            serve += ["--api", "--port", str(api_port)]
        if mqtt_port is not None:
            serve += ["--mqtt", f"127.0.0.1:{mqtt_port}"]
        super().__init__(name, url, workdir / f"{name}.log", serve, cwd=workdir, environment=environment)
        self.url = url
        self.workdir = workdir
        self.routers = routers
        self.api_port = api_port  # with --api on this port
        self.mqtt_port = mqtt_port  # with --mqtt 127.0.0.1:PORT

    def start(self) -> ServeProcess:  # type: ignore[override]  # its own readiness; returns itself
        super().start(self._ready, READY_SECONDS)
        return self

    def _ready(self) -> bool:
        routers_ready = len(self.lines("broker started")) >= self.starts * self.routers
        listener_ready = self.mqtt_port is None or len(self.lines("mqtt listener started")) >= self.starts
        return routers_ready and listener_ready

    def routed(self, queue: str = DEFAULT_STREAM, pid: int | None = None) -> int:
        """Messages this process (or its router ``pid``) logged as routed from ``queue``."""
        return sum(
            int(e["messages"])
            for e in self.lines("batch routed")
            if e.get("queue") == queue and pid in (None, e.get("pid"))
        )


class Brokers:
    """The ``broker serve`` processes of one test, on one database."""

    def __init__(self, url: str, workdir: Path) -> None:
        self.url = url
        self.workdir = workdir
        self.processes: list[ServeProcess] = []
        self._qm: QueueManager | None = None

    def start(
        self,
        name: str = "broker",
        *,
        batch_size: int = 5,
        routers: int = 1,
        api_port: int | None = None,
        mqtt_port: int | None = None,
        environment: dict[str, str] | None = None,
    ) -> ServeProcess:
        process = ServeProcess(
            self.url, self.workdir, name, batch_size, routers, api_port, mqtt_port, environment
        )
        self.processes.append(process)
        return process.start()

    @property
    def qm(self) -> QueueManager:
        """The test's own connection to the broker's queue manager (after a broker has started)."""
        if self._qm is None:
            self._qm = QueueManager(make_engine(self.url), appl_name="e2e-test", user_id="tester")
        return self._qm

    def close(self) -> None:
        for process in self.processes:
            if process.alive:
                process.kill()
        if self._qm is not None:
            self._qm.close()


class PrivateCluster:
    """A throw-away PostgreSQL cluster run by the postgres OS user, trust authentication."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="broker-e2e-pg-"))  # /tmp: the postgres user can reach it
        self.data = self.root / "data"
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/broker"

    def create(self) -> None:
        """initdb, start, and create the broker's database."""
        shutil.chown(self.root, "postgres", "postgres")
        self._as_postgres(PG_BIN / "initdb", "-D", self.data, "-A", "trust", "-U", "postgres", "--no-sync")
        self.start()
        with psycopg.connect(self.url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
            conn.execute("CREATE DATABASE broker")

    def _as_postgres(self, *argv: object) -> None:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", *map(str, argv)],
            check=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=120,
        )

    def _pg_ctl(self, *argv: str) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = self.root / "server.log"
        self._as_postgres(
            PG_BIN / "pg_ctl", "-D", self.data, "-o", options, "-l", log, "-w", "-t", "60", *argv
        )

    def start(self) -> None:
        self._pg_ctl("start")

    def stop(self) -> None:
        self._pg_ctl("-m", "fast", "stop")

    def restart(self) -> None:
        self._pg_ctl("-m", "fast", "restart")

    def remove(self) -> None:
        """Stop the server if it runs and delete every file of the cluster."""
        if (self.data / "postmaster.pid").exists():
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


class Publisher(threading.Thread):
    """Puts publications numbered 0..count-1 on the default stream, ``interval`` seconds apart."""

    def __init__(self, url: str, count: int, topic: Callable[[int], str], *, interval: float) -> None:
        super().__init__(name="publisher", daemon=True)
        self.url = url
        self.count = count
        self.topic = topic
        self.interval = interval
        self.put: list[int] = []
        self.uncertain: list[int] = []
        self.retries = 0
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def halt(self) -> None:
        self._halt.set()

    def finish(self, timeout: float = 120.0) -> None:
        self.join(timeout)
        assert not self.is_alive(), "the publisher did not finish"
        if self.error is not None:
            raise AssertionError(f"the publisher failed: {self.error!r}") from self.error

    def run(self) -> None:
        try:
            with QueueManager(make_engine(self.url), appl_name="publisher", user_id="publisher") as qm:
                for number in range(self.count):
                    if self._halt.is_set():
                        return
                    self._put(qm, number)
                    time.sleep(self.interval)
        except BaseException as exc:  # reported by finish()
            self.error = exc

    def _put(self, qm: QueueManager, number: int) -> None:
        message = publication(self.topic(number), number)
        while True:
            staged = False
            try:
                with qm.unit_of_work() as uow:
                    uow.put(DEFAULT_STREAM, message)
                    staged = True
            except MQError as exc:
                if exc.reason != Reason.MQRC_CONNECTION_BROKEN:
                    raise
                if staged:  # lost at commit: it may be on the queue or not
                    self.uncertain.append(number)
                    return
                self.retries += 1
                time.sleep(0.05)
                continue
            self.put.append(number)
            return


def publication(topic: str, number: int) -> Any:
    """A datagram Publish (no reply wanted) whose body is its number."""
    command = psc.Publish(
        topics=(topic,),
        sub_point=None,
        options=PubOpt(0),
        pub_time=None,
        seq_num=str(number),
        q_mgr_name=None,
        q_name=None,
        correl_id=None,
        folder="",
    )
    return command_message(command, payload=str(number).encode(), request=False, user_id="publisher")


def wait_until(condition: Callable[[], bool], timeout: float, what: str, *, required: bool = True) -> bool:
    """Poll ``condition``; on timeout fail, or (not ``required``) return False so that the
    caller's own checks can say precisely what is missing."""
    try:
        processes.wait_until(condition, timeout, what)
    except TimeoutError:
        if required:
            raise
        return False
    return True
