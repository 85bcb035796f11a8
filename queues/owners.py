"""Who holds a lease, and whether that holder is a dead process on this machine.

Leases (a channel's sender, a stream's Spark job) lapse by the clock because a
holder on another machine cannot be asked whether it is alive. A holder on this
machine can: a broker restarted after a crash finds its predecessor's leases
still running for up to their full term, and waiting that out is all it would
gain. An owner therefore ends with ``/<pid>@<machine>``, where the machine key
is the kernel's boot id and the PID namespace, so that a container with the
same hostname, or this host after a reboot, never counts as "here": only a
process this one could signal is judged, and one whose PID no longer exists is
dead. A reused PID only makes a dead holder look alive, which costs the wait
and never a second holder.
"""

from __future__ import annotations

import functools
import hashlib
import os
import socket

from queues.ids import now_ms

HOST_CHARS = 16  # owner columns hold 96 characters; the host is only there for people


@functools.cache
def machine_key() -> str:
    """This boot of this kernel, in this PID namespace (12 hex digits of a hash)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:  # no /proc: nothing is ever judged dead, leases lapse by the clock
        return ""
    return hashlib.blake2b(f"{boot}.{namespace}".encode(), digest_size=6).hexdigest()


def owner_name(kind: str) -> str:
    """A lease owner name for this process, unique across restarts: ``kind``, host and
    start time for people, the PID and machine key for :func:`dead_here`."""
    return f"{kind}:{socket.gethostname()[:HOST_CHARS]}:{now_ms()}/{os.getpid()}@{machine_key()}"


def process_of(owner: str) -> tuple[int, str] | None:
    """The PID and machine key an owner name ends with, if it has them."""
    head, at, key = owner.rpartition("@")
    pid = head.rpartition("/")[2]
    if not at or not key or not pid.isdigit():
        return None
    return int(pid), key


def dead_here(owner: str) -> bool:
    """Whether ``owner`` names a process of this machine that no longer exists."""
    process = process_of(owner)
    if process is None or process[1] != machine_key() or process[0] == os.getpid():
        return False
    pid = process[0]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, under another user
        return False
    return _zombie(pid)


def _zombie(pid: int) -> bool:
    """A killed process its parent has not reaped yet still answers signal 0."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return True  # gone between the two looks
    return stat.rpartition(")")[2].split()[:1] == ["Z"]
