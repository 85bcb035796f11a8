"""Which router counts ``broker serve`` accepts (the processes themselves: tests/e2e/test_faults.py)."""

from __future__ import annotations

import pytest

from broker.service import router_pool
from broker.service.config import ConfigError, Settings, load_settings


def test_routers_come_from_the_environment_as_a_number() -> None:
    assert load_settings(environ={"BROKER_ROUTERS": "3"}).routers == 3
    with pytest.raises(ConfigError):
        load_settings(environ={"BROKER_ROUTERS": "two"})


@pytest.mark.parametrize("routers", [0, -1])
def test_router_counts_below_one_are_refused(routers: int) -> None:
    with pytest.raises(ConfigError, match="at least 1"):
        router_pool.check(Settings(routers=routers))


def test_a_turn_timeout_below_a_second_is_refused() -> None:
    assert load_settings(environ={"BROKER_TURN_TIMEOUT": "30"}).turn_timeout == 30
    with pytest.raises(ConfigError, match="turn_timeout must be at least 1 second"):
        router_pool.check(Settings(turn_timeout=0))


@pytest.mark.parametrize("routers", [1, 4])
def test_one_router_or_several_are_accepted(routers: int) -> None:
    router_pool.check(Settings(routers=routers))


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


def test_mqtt_listener_process_counts_below_one_are_refused() -> None:
    assert load_settings(environ={"BROKER_MQTT_PROCESSES": "2"}).mqtt_processes == 2
    with pytest.raises(ConfigError, match="mqtt_processes must be at least 1"):
        router_pool.check(Settings(mqtt_processes=0))
