"""The memory allocator ``broker serve`` runs on: jemalloc where Debian's ``libjemalloc2`` (or
any jemalloc the dynamic linker finds) is installed, unless the ``allocator`` setting says
``system``.

glibc's malloc keeps what connection churn frees in holes smaller than a page, and a broker's
resident set would grow with every MQTT client that came and went (``docs/decisions.md``,
Nothing left behind a connection); jemalloc returns it. A process takes its allocator when it
starts, so ``serve`` starts again as the same process (``exec``, same pid), jemalloc preloaded,
before it binds or opens anything. Its children (listener processes, the router pool) inherit it.
"""

from __future__ import annotations

import ctypes.util
import os
import sys

PRELOAD = "LD_PRELOAD"


def library(setting: str) -> str | None:
    """The library to preload for ``setting``: jemalloc's, if wanted, found and not loaded yet
    (an earlier start of this process, or the operator's own ``LD_PRELOAD``, has it)."""
    if setting != "jemalloc":
        return None
    found = ctypes.util.find_library("jemalloc")
    if found is None or found in os.environ.get(PRELOAD, "").split():
        return None
    return found


def adopt(setting: str) -> None:
    """Start this process again on jemalloc (see :func:`library`); return if there is no need."""
    found = library(setting)
    if found is None:
        return
    preloaded = " ".join([*os.environ.get(PRELOAD, "").split(), found])
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, {**os.environ, PRELOAD: preloaded})
