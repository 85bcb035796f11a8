"""The database fails under a running ``broker serve --mqtt --api`` while traffic flows on every
path (``tests/e2e/outages.py``): PostgreSQL restarted, stopped for 10 s, its backends killed;
SQLite's write lock held by another process past the busy timeout, its disk full, its file made
read-only. After each, every path delivers again within 5 s of the database's return, nothing
acknowledged is lost, every background task of the process is alive and running, and the log
holds no traceback."""

from __future__ import annotations

import errno
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from broker.core.system import DEFAULT_STREAM
from broker.protocol.mqtt.packets import ConnAck, Publish, SubAck, Subscribe
from queues import database
from tests.broker.service.mqtt.clients import MqttBroker, Raw, eventually
from tests.e2e.outages import Harness, hold_sqlite_write_lock
from tests.e2e.processes import Brokers, PrivateCluster, publication

pytestmark = pytest.mark.slow

OUTAGE_SECONDS = 10.0


@pytest.fixture
def harness_on_postgres(
    private_postgres: PrivateCluster, tmp_path: Path
) -> Iterator[tuple[Harness, PrivateCluster]]:
    harness = Harness(private_postgres.url, tmp_path)
    try:
        yield harness, private_postgres
    finally:
        harness.close()


def terminate_backends(cluster: PrivateCluster) -> None:
    with psycopg.connect(cluster.url, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = 'broker' AND pid <> pg_backend_pid()"
        )


def test_postgresql_restarted(harness_on_postgres: tuple[Harness, PrivateCluster]) -> None:
    harness, cluster = harness_on_postgres
    harness.run("postgresql restart", cluster.restart, lambda: None)


def test_postgresql_stopped_for_ten_seconds(harness_on_postgres: tuple[Harness, PrivateCluster]) -> None:
    harness, cluster = harness_on_postgres

    harness.run("postgresql stopped 10 s", cluster.stop, cluster.start, hold=OUTAGE_SECONDS)


def test_postgresql_backends_terminated(harness_on_postgres: tuple[Harness, PrivateCluster]) -> None:
    harness, cluster = harness_on_postgres
    harness.run(
        "postgresql backends terminated", lambda: terminate_backends(cluster), lambda: None, outage=False
    )


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB file system of the test's own (tmpfs), to fill."""
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_sqlite_write_lock_held_past_the_busy_timeout(tmp_path: Path) -> None:
    database = tmp_path / "broker.db"
    harness = Harness(f"sqlite:///{database}", tmp_path, BROKER_SQLITE_BUSY_TIMEOUT_MS="1000")
    holder: list[subprocess.Popen[bytes]] = []
    try:
        harness.run(
            "sqlite write lock held 10 s",
            lambda: holder.append(hold_sqlite_write_lock(str(database), OUTAGE_SECONDS)),
            lambda: holder[0].wait(OUTAGE_SECONDS),
            hold=OUTAGE_SECONDS - 1,
        )
    finally:
        for process in holder:
            process.kill()
        harness.close()


def fill(directory: Path) -> Path:
    """Fill the file system of ``directory`` to its last byte; returns the filler file."""
    filler = directory / "filler"
    with filler.open("wb", buffering=0) as f:
        for size in (1 << 20, 4096, 1):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    return filler


def test_sqlite_disk_full(small_disk: Path, tmp_path: Path) -> None:
    harness = Harness(f"sqlite:///{small_disk / 'broker.db'}", tmp_path)
    try:
        harness.run(
            "sqlite disk full 10 s",
            lambda: fill(small_disk),
            (small_disk / "filler").unlink,
            hold=OUTAGE_SECONDS,
        )
    finally:
        harness.close()


def test_sqlite_file_made_read_only(tmp_path: Path) -> None:
    """``chattr +i``: even root may not write it (root ignores the permission bits)."""
    database = tmp_path / "broker.db"
    harness = Harness(f"sqlite:///{database}", tmp_path)
    files = [str(database), f"{database}-wal"]
    try:
        harness.run(
            "sqlite file read-only 10 s",
            lambda: subprocess.run(["chattr", "+i", *files], check=True),
            lambda: subprocess.run(["chattr", "-i", *files], check=True),
            hold=OUTAGE_SECONDS,
        )
    finally:
        subprocess.run(["chattr", "-i", *files], check=False)
        harness.close()


def test_a_broker_idle_through_a_restart_serves_its_next_client_and_publication_at_once(
    private_postgres: PrivateCluster, tmp_path: Path
) -> None:
    """No traffic while PostgreSQL restarts: the first CONNECT after it is accepted (not
    refused with 3 because the listener's own connection died unseen), and an MQRFH2
    publication reaches the MQTT subscriber that was waiting throughout."""
    brokers = Brokers(private_postgres.url, tmp_path)
    try:
        broker = MqttBroker(brokers)
        subscriber = Raw(broker.port)
        assert subscriber.connect("waiting", clean=False) == ConnAck(False, 0)
        subscriber.send(Subscribe(1, (("w/#", 1),)))
        assert subscriber.next() == SubAck(1, (1,))
        newcomer = Raw(broker.port)
        assert newcomer.connect("before") == ConnAck(False, 0)  # the listener has used its connection
        newcomer.close()
        assert eventually(lambda: bool(broker.process.lines("mqtt client disconnected")))  # its end written
        private_postgres.restart()
        time.sleep(2 * database.PING_AFTER_IDLE_SECONDS)  # every connection idle past it
        newcomer = Raw(broker.port)
        assert newcomer.connect("after", clean=False) == ConnAck(False, 0)
        newcomer.close()
        brokers.qm.put(DEFAULT_STREAM, publication("w/x", 1))
        delivered = subscriber.next()
        assert isinstance(delivered, Publish) and (delivered.topic, delivered.payload) == ("w/x", b"1")
        subscriber.close()
        reasons = [line["reason"] for line in broker.process.lines("mqtt client disconnected")]
        assert not [reason for reason in reasons if "return code 3" in reason]
        assert "Traceback" not in broker.process.log_path.read_text()
    finally:
        brokers.close()
