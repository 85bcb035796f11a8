"""The README, followed in order, works as written: its "Using it" commands, the administrator's
after them and its Python example, run against a real ``broker serve`` on the default database in
a fresh directory."""

from __future__ import annotations

import re
import shlex
import socket
import subprocess
import sys
import threading
from pathlib import Path

from tests.e2e.processes import BROKER, child_environment, free_port, wait_until

ROOT = Path(__file__).resolve().parents[1]


def blocks(language: str, after: str) -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index(after) :]
    return re.findall(rf"```{language}\n(.*?)```", section, re.S)


def commands(block: str) -> list[list[str]]:
    """The block's commands, without their comments (``a && b``: two commands)."""
    return [
        shlex.split(command, comments=True)
        for line in block.splitlines()
        if line.strip()
        for command in line.split(" && ")
    ]


def test_the_readme_works_when_followed_in_order(tmp_path: Path) -> None:
    env = child_environment()
    serve = subprocess.Popen(
        [str(BROKER), "serve"], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        wait_until(lambda: (tmp_path / "broker.db").exists(), 30, "the default database")
        first_steps = blocks("sh", "## Using it")[0]
        # The administrator's block after them, without its optional [arguments].
        administration = re.sub(r" \[[^]]*\]", "", blocks("sh", "The queue-manager commands")[0])
        outputs = []
        for argv in commands(first_steps) + commands(administration):
            assert argv[0] == "broker", argv
            done = subprocess.run(
                [str(BROKER), *argv[1:]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
            )
            assert done.returncode == 0, (argv, done.stderr)
            outputs.append(done.stdout)
        assert "Sport/Soccer" in outputs[4]  # receive: the first publication, decoded
        assert outputs[-1] == "queue SCORES deleted\n"
        python = blocks("python", "Applications use")[0]
        ran = subprocess.run(
            [sys.executable, "-c", python], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.splitlines() == ["ok", "Sport/Soccer/Score 1-0 False"]
    finally:
        serve.terminate()
        serve.wait(30)


def test_the_readme_mqtt_example_works_as_written(tmp_path: Path) -> None:
    """The MQTT block: a principal, the listener, mosquitto_sub and mosquitto_pub with it, and an
    MQRFH2 publication reaching the MQTT subscriber (on a free port instead of the README's)."""
    env = child_environment()
    port = str(free_port())
    lines = [
        [port if word == "11883" else word for word in argv] for argv in commands(blocks("sh", "## MQTT")[0])
    ]
    background: list[subprocess.Popen[str]] = []
    try:
        for argv in lines:
            program = [str(BROKER), *argv[1:]] if argv[0] == "broker" else argv
            if program[-1] == "&":
                background.append(_start(program[:-1], tmp_path, env))
                _wait_for(argv, port, tmp_path, env)
                continue
            # No terminal (a new session): the password prompts read standard input.
            done = subprocess.run(
                program, cwd=tmp_path, env=env, input="secret\nsecret\n", capture_output=True,
                text=True, timeout=60, start_new_session=True,
            )  # fmt: skip
            assert done.returncode == 0, (argv, done.stderr)
        received = background[1].stdout
        assert received is not None
        guard = threading.Timer(60, background[1].kill)  # a missing line ends the read, not the run
        guard.start()
        assert [received.readline().strip() for _ in range(2)] == [
            "Sport/Soccer/Event/MatchStarted kick-off",
            "Sport/Soccer/Event/Goal from MQRFH2",
        ]
        guard.cancel()
    finally:
        for process in reversed(background):
            process.terminate()
            process.wait(30)


def _start(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1
    )


def _wait_for(argv: list[str], port: str, cwd: Path, env: dict[str, str]) -> None:
    """What a reader of the README waits for before the next line: the listener to listen, the
    subscriber's subscription to be registered."""
    if argv[:2] == ["broker", "serve"]:
        wait_until(lambda: _listening(int(port)), 30, "the MQTT listener")
    elif argv[0] == "mosquitto_sub":
        wait_until(lambda: "Sport/#" in _subscriptions(cwd, env), 30, "the MQTT subscription")


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _subscriptions(cwd: Path, env: dict[str, str]) -> str:
    listed = subprocess.run(
        [str(BROKER), "subscriptions", "list", "--json"], cwd=cwd, env=env, capture_output=True, text=True
    )
    return listed.stdout
