"""The README, followed in order, works as written: its "Using it" commands and its Python example,
run against a real ``broker serve`` on the default database in a fresh directory."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.e2e.processes import BROKER, child_environment, wait_until

ROOT = Path(__file__).resolve().parents[1]


def blocks(language: str, after: str) -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index(after) :]
    return re.findall(rf"```{language}\n(.*?)```", section, re.S)


def commands(block: str) -> list[list[str]]:
    """The block's commands, without their comments."""
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]


def test_the_readme_works_when_followed_in_order(tmp_path: Path) -> None:
    env = child_environment()
    serve = subprocess.Popen(
        [str(BROKER), "serve"], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        wait_until(lambda: (tmp_path / "broker.db").exists(), 30, "the default database")
        first_steps = blocks("sh", "## Using it")[0]
        outputs = []
        for argv in commands(first_steps):
            assert argv[0] == "broker", argv
            done = subprocess.run(
                [str(BROKER), *argv[1:]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
            )
            assert done.returncode == 0, (argv, done.stderr)
            outputs.append(done.stdout)
        assert "Sport/Soccer" in outputs[4]  # receive: the first publication, decoded
        python = blocks("python", "Applications use")[0]
        ran = subprocess.run(
            [sys.executable, "-c", python], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.splitlines() == ["ok", "Sport/Soccer/Score 1-0 False"]
    finally:
        serve.terminate()
        serve.wait(30)
