"""Queue-manager clients that tests run in separate processes (multiprocessing, spawn).

Each function is a process body: it opens its own QueueManager on ``url`` and talks to
the test through a pipe or a file, because what is tested is what the database does
between processes (wake-ups, SKIP LOCKED / BEGIN IMMEDIATE, rollback of a killed client).
"""

from __future__ import annotations

import random
import time
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Barrier
from pathlib import Path

from queues import Message, NoMessageAvailable, QueueManager, UnitOfWork

READY = "ready"
GO = "go"


def put_after(url: str, queue: str, delay: float, pipe: Connection) -> None:
    """Say ready, put one message ``delay`` seconds later and report when it was committed."""
    with QueueManager.connect(url, appl_name="putter") as qm:
        pipe.send(READY)
        time.sleep(delay)
        qm.put(queue, Message(body=b"from another process"))
        pipe.send(time.time())


def _take(uow: UnitOfWork, queue: str, size: int, one_by_one: bool) -> list[Message]:
    if not one_by_one:
        return uow.get_batch(queue, size)
    got: list[Message] = []
    try:
        while len(got) < size:
            got.append(uow.get(queue))
    except NoMessageAvailable:
        pass
    return got


def consume(url: str, queue: str, seed: int, out: str, start: Barrier) -> None:
    """Compete for ``queue`` until it is empty, in units of work of random size, backing
    some out; write the body of every message whose unit of work committed to ``out``.
    ``start`` lines the consumers up so that none drains the queue before the others run."""
    rng = random.Random(seed)
    committed: list[str] = []
    backouts = 0
    with QueueManager.connect(url, appl_name=f"consumer{seed}") as qm:
        qm.depth(queue)
        start.wait(60)
        while True:
            back_out = rng.random() < 0.15
            with qm.unit_of_work() as uow:
                got = _take(uow, queue, rng.randint(1, 40), one_by_one=rng.random() < 0.5)
                if got and back_out:
                    uow.backout()
            if got and back_out:
                backouts += 1
            elif got:
                committed.extend(m.body.decode() for m in got)
                # Work on what was got, outside the unit of work. SQLite does not queue waiting
                # writers, so without a pause one consumer could starve the rest of the lock.
                time.sleep(0.002)
            elif qm.depth(queue) == 0:
                break
            else:
                time.sleep(0.005)  # the rest is held by other consumers' units of work
    Path(out).write_text("\n".join([f"backouts {backouts}", *committed]) + "\n")


def get_and_hang(url: str, queue: str, count: int, pipe: Connection) -> None:
    """Say ready; on ``go`` get ``count`` messages in a unit of work, report their MsgIds
    and never commit (the test kills this process with SIGKILL)."""
    with QueueManager.connect(url, appl_name="doomed") as qm:
        pipe.send(READY)
        if pipe.recv() != GO:
            return
        with qm.unit_of_work() as uow:
            pipe.send([uow.get(queue).msg_id for _ in range(count)])
            time.sleep(600)


def unit_of_work_after(
    url: str, gets: list[str], puts: list[tuple[str, bytes]], delay: float, pipe: Connection
) -> None:
    """Say ready; ``delay`` seconds later, in one unit of work, get one message from each
    of ``gets`` and put one on each of ``puts`` (queue, CorrelId); report the commit time."""
    with QueueManager.connect(url, appl_name="exchanger") as qm:
        pipe.send(READY)
        time.sleep(delay)
        with qm.unit_of_work() as uow:
            for queue in gets:
                uow.get(queue)
            for queue, correl_id in puts:
                uow.put(queue, Message(body=b"from a unit of work", correl_id=correl_id))
        pipe.send(time.time())
