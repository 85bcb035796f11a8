"""Broker processes started as an operator starts them, for the benchmarks and the tests' harnesses.

A :class:`ServeProcess` is one ``broker serve`` (the installed console script, flags only: the
caller's ``BROKER_*`` environment is left out unless given), logging JSON lines to a file its
owner reads: readiness, batches routed, warnings. It can be started again (each start a new
process appending to the same log), stopped as an operator stops it, or killed. The network
benchmark's nodes, the network tests' nodes and the end-to-end tests' brokers are all one.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

STOP_SECONDS = 30.0
POLL_SECONDS = 0.02
T = TypeVar("T")

_HANDED_OUT: set[int] = set()


def broker_command() -> list[str]:
    """The ``broker`` console script beside this interpreter, or the module where it is not
    installed as a script."""
    script = Path(sys.executable).with_name("broker")
    return [str(script)] if script.exists() else [sys.executable, "-m", "broker.cli"]


def child_environment(environment: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without its ``BROKER_*`` settings (flags say everything),
    plus ``environment``."""
    own = {key: value for key, value in os.environ.items() if not key.startswith("BROKER_")}
    return own | (environment or {})


def free_port() -> int:
    """A port nothing listens on, never one this process handed out before: the kernel may give
    the same free port twice in a row, and a caller that asks for several binds them all later."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def wait_until(condition: Callable[[], T], timeout: float = 20.0, what: str = "a condition") -> T:
    """Poll ``condition`` until it returns something true, and return that; TimeoutError
    naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(POLL_SECONDS)


def stop(process: subprocess.Popen[bytes] | None) -> None:
    """Stop ``process`` as an operator would (SIGTERM: it finishes its batch and leaves its
    sessions as they should be), killing it if it is not gone within ``STOP_SECONDS``."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(STOP_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(STOP_SECONDS)


class ServeProcess:
    """One ``broker --db URL [global flags] serve [flags]`` process, restartable."""

    def __init__(
        self,
        name: str,
        url: str,
        log_path: Path,
        serve: Sequence[str],
        *,
        options: Sequence[str] = (),
        cwd: Path | None = None,
        environment: dict[str, str] | None = None,
    ) -> None:
        """``serve``: the flags after ``serve``; ``options``: global flags before it
        (``--qmgr``); ``environment``: ``BROKER_*`` settings beyond the flags."""
        self.name = name
        self.argv = [*broker_command(), "--db", url, "--log-format", "json", *options, "serve", *serve]
        self.log_path = log_path
        self.cwd = cwd
        self.environment = environment or {}
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, ready: Callable[[], bool], timeout: float = 60.0) -> None:
        """Start it and wait until ``ready()``; RuntimeError with its log's tail if it exits
        first, TimeoutError if it is not ready in ``timeout`` seconds."""
        assert not self.alive, f"{self.name} is already running"
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env=child_environment(self.environment),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        self.starts += 1

        def started() -> bool:
            if not self.alive:
                raise RuntimeError(f"{self.name} exited before it was ready:\n{self.tail()}")
            return ready()

        wait_until(started, timeout, f"{self.name} to be ready")

    def stop(self) -> None:
        """SIGTERM, as an operator stops it (SIGKILL if it has not gone in ``STOP_SECONDS``)."""
        stop(self.process)

    def terminate(self, timeout: float = STOP_SECONDS) -> int:
        """SIGTERM: the process finishes its batch and exits; returns its exit code."""
        return self._signal(signal.SIGTERM, timeout)

    def kill(self) -> int:
        return self._signal(signal.SIGKILL, STOP_SECONDS)

    def _signal(self, sig: signal.Signals, timeout: float) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout)

    def lines(self, msg: str | None = None) -> list[dict[str, Any]]:
        """The JSON log lines of every start so far (those with ``msg``, if given); a line cut
        short by SIGKILL, or one that is not JSON, is passed over."""
        if not self.log_path.exists():
            return []
        found = []
        for raw in self.log_path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            if isinstance(entry, dict) and (msg is None or entry.get("msg") == msg):
                found.append(entry)
        return found

    def tail(self, count: int = 30) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-count:])


def api_ready(api: str) -> bool:
    """Whether the admin API at ``api`` answers ``/ready`` with 200."""
    import httpx

    try:
        return httpx.get(api + "/ready", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False
