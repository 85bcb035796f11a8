"""Lease owners: a dead process of this machine is recognised, nothing else is."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from queues import owners
from queues.owners import dead_here, machine_key, owner_name


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process
    process.kill()
    process.wait()


def test_an_owner_name_fits_the_owner_columns_and_ends_with_pid_and_machine() -> None:
    name = owner_name("spark:" + "f" * 32)
    assert len(name) <= 96
    assert name.endswith(f"/{os.getpid()}@{machine_key()}")
    assert len(machine_key()) == 12


def test_a_live_process_of_this_machine_is_not_dead(child: subprocess.Popen[bytes]) -> None:
    assert not dead_here(f"router:host:1/{child.pid}@{machine_key()}")


def test_this_process_is_not_dead() -> None:
    assert not dead_here(owner_name("router"))


def test_a_killed_process_is_dead_before_and_after_it_is_reaped(child: subprocess.Popen[bytes]) -> None:
    owner = f"router:host:1/{child.pid}@{machine_key()}"
    child.kill()
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # dead, still a zombie
    assert dead_here(owner)
    child.wait()
    assert dead_here(owner)


def test_a_process_of_another_machine_or_namespace_is_never_judged(child: subprocess.Popen[bytes]) -> None:
    child.kill()
    child.wait()
    assert not dead_here(f"router:host:1/{child.pid}@0123456789ab")
    assert not dead_here(f"router:host:1/{child.pid}@")


@pytest.mark.parametrize("owner", ["", "job-1", "host:123:456", "router:host:1/x@k", "@"])
def test_names_without_a_pid_and_machine_are_never_judged(owner: str) -> None:
    assert not dead_here(owner)


def test_without_proc_nothing_is_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    machine_key.cache_clear()

    def missing(*_: object, **__: object) -> None:
        raise FileNotFoundError("/proc")

    monkeypatch.setattr(owners, "open", missing, raising=False)
    try:
        assert machine_key() == ""
        assert not dead_here("router:host:1/999999@")
    finally:
        machine_key.cache_clear()


def test_the_process_of_an_owner_is_its_pid_and_machine_key() -> None:
    assert owners.process_of(owner_name("router")) == (os.getpid(), machine_key())
    assert owners.process_of("host:123:456") is None
