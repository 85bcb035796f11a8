"""Which allocator ``broker serve`` starts itself again on (``broker.cli.allocator``); that it
does, and stays one process, is shown by the MQTT limits tests' brokers (jemalloc mapped)."""

from __future__ import annotations

import ctypes.util
import sys

import pytest

from broker.cli import allocator

JEMALLOC = ctypes.util.find_library("jemalloc")


def test_jemalloc_is_installed_here() -> None:
    """CI installs Debian's libjemalloc2 (.ci/run), as the image does: the churn bound needs it."""
    assert JEMALLOC is not None


def test_jemalloc_is_chosen_when_wanted_and_not_preloaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    assert allocator.library("jemalloc") == JEMALLOC
    assert allocator.library("system") is None


def test_nothing_is_done_once_jemalloc_is_preloaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LD_PRELOAD", f"libother.so {JEMALLOC}")
    assert allocator.library("jemalloc") is None


def test_adopt_keeps_the_operators_preloads(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, list[str], dict[str, str]]] = []
    monkeypatch.setenv("LD_PRELOAD", "libother.so")
    monkeypatch.setattr(allocator.os, "execve", lambda path, argv, env: calls.append((path, argv, env)))
    allocator.adopt("jemalloc")
    [(_, argv, env)] = calls
    assert env["LD_PRELOAD"] == f"libother.so {JEMALLOC}"
    assert argv == sys.orig_argv
