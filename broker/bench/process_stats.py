"""What a server process costs, read from ``/proc``: its resident memory and its CPU time,
each summed over the process and every process below it (``broker serve --routers`` and
``--mqtt-processes`` have children)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def tree(pid: int) -> set[int]:
    """``pid`` and its descendants."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
    found, frontier = {pid}, [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found.update(children)
        frontier = children
    return found


def rss_kb(pid: int) -> int:
    """VmRSS of ``pid`` and every process below it."""
    return sum(_vm_rss(p) for p in tree(pid))


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of ``pid`` and every process below it (those still running)."""
    return sum(_cpu(p) for p in tree(pid))


def quiet(pids: Sequence[int], *, busy: float = 0.1, seconds: float = 10.0) -> None:
    """Wait until the processes together use less than ``busy`` of a core over a look of
    ``LOOK_SECONDS`` (at most ``seconds``): what a run measures is not the tail of the work
    the run before it left them (a server ending the sessions of thousands of clients that
    have just gone)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        before = sum(cpu_seconds(pid) for pid in pids)
        time.sleep(LOOK_SECONDS)
        if sum(cpu_seconds(pid) for pid in pids) - before < busy * LOOK_SECONDS:
            return


LOOK_SECONDS = 0.3


def _vm_rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _cpu(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14 and 15 of stat)
