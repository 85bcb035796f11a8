"""Which router counts ``broker serve`` accepts (the processes themselves: tests/e2e/test_faults.py)."""

from __future__ import annotations

import pytest

from broker import router_pool
from broker.config import ConfigError, Settings, load_settings
from queues import make_engine


def test_routers_come_from_the_environment_as_a_number() -> None:
    assert load_settings(environ={"BROKER_ROUTERS": "3"}).routers == 3
    with pytest.raises(ConfigError):
        load_settings(environ={"BROKER_ROUTERS": "two"})


@pytest.mark.parametrize(
    ("url", "routers", "refusal"),
    [
        ("sqlite:///broker.db", 2, "needs PostgreSQL"),
        ("postgresql://postgres@127.0.0.1/none", 0, "at least 1"),
        ("sqlite:///broker.db", 0, "at least 1"),
    ],
)
def test_router_counts_that_cannot_work_are_refused(url: str, routers: int, refusal: str) -> None:
    with pytest.raises(ConfigError, match=refusal):
        router_pool.check(Settings(routers=routers), make_engine(url))


@pytest.mark.parametrize(("url", "routers"), [("sqlite:///broker.db", 1), ("postgresql://h/none", 4)])
def test_one_router_anywhere_and_several_on_postgresql_are_accepted(url: str, routers: int) -> None:
    router_pool.check(Settings(routers=routers), make_engine(url))


class Finished:
    """A router process that has ended with ``exitcode``."""

    def __init__(self, exitcode: int) -> None:
        self.exitcode = exitcode
        self.pid = 1000 - exitcode

    def is_alive(self) -> bool:
        return False

    def join(self, timeout: float | None = None) -> None:
        return None


def test_a_router_that_died_is_started_again_and_one_that_was_stopped_is_not() -> None:
    pool = router_pool.RouterPool(Settings(routers=3))
    spawned: list[int] = []
    pool._spawn = lambda number: spawned.append(number) or Finished(-1)  # type: ignore[method-assign]
    pool._processes = [Finished(-9), Finished(0)]  # type: ignore[list-item]
    pool.restart_dead()
    assert spawned == [1]  # router 1 was killed; router 2 exited cleanly, as asked
    pool.stop()
    pool.restart_dead()
    assert spawned == [1]  # nothing is started once the pool stops
