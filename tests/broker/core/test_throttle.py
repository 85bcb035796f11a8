"""broker.core.throttle: failed sign-ins per user and per address, on a clock the tests hand in."""

from __future__ import annotations

import pytest

from broker.core.throttle import ADDRESS, USER, Policy, Throttle, address_key

POLICY = Policy(free=3, delay=1.0, max_delay=8.0, forget=100.0, keys=50)


def fail(throttle: Throttle, user: str, address: str, now: float) -> dict[str, float]:
    """One attempt that is checked and fails (it must be admitted)."""
    assert throttle.admit(user, address, now).admitted
    return throttle.failed(user, address, now)


def test_free_failures_then_delays_that_double_up_to_the_maximum() -> None:
    throttle = Throttle(POLICY)
    now = 0.0
    begun = []
    for _ in range(9):
        delays = fail(throttle, "sensor1", "10.0.0.1", now)
        begun.append(delays.get(USER, 0.0))
        now += delays.get(USER, 0.0)  # the next attempt comes as soon as the delay is over
    assert begun == [0, 0, 0, 1, 2, 4, 8, 8, 8]


def test_a_throttled_key_is_refused_unchecked_until_its_delay_is_over() -> None:
    throttle = Throttle(POLICY)
    for _ in range(4):
        fail(throttle, "sensor1", "10.0.0.1", 0.0)  # the fourth begins a delay of 1 s
    refused = throttle.admit("sensor1", "10.0.0.1", 0.5)
    assert (refused.admitted, refused.wait, refused.by) == (False, 0.5, (USER, ADDRESS))
    assert throttle.admit("sensor1", "10.0.0.2", 0.5).by == (USER,)  # from elsewhere too
    assert throttle.admit("sensor2", "10.0.0.1", 0.5).by == (ADDRESS,)  # and another user from there
    assert throttle.admit("sensor1", "10.0.0.1", 1.0).admitted
    assert throttle.throttled(0.5) == {USER: 1, ADDRESS: 1}
    assert throttle.throttled(1.0) == {USER: 0, ADDRESS: 0}


def test_a_burst_gets_no_more_checks_than_the_free_failures() -> None:
    """Sixty attempts at once: checks under way count as failures to come, so the rest are
    busy (they wait for a check to end, and ask again)."""
    throttle = Throttle(POLICY)
    decisions = [throttle.admit("sensor1", "10.0.0.1", 0.0) for _ in range(60)]
    assert [d.admitted for d in decisions].count(True) == 3
    assert {(d.busy, d.wait, d.by) for d in decisions if not d.admitted} == {(True, 0.0, (USER, ADDRESS))}
    for _ in range(3):
        throttle.failed("sensor1", "10.0.0.1", 0.0)
    assert throttle.admit("sensor1", "10.0.0.1", 0.0).admitted  # one more, then the delays begin
    assert throttle.admit("sensor1", "10.0.0.1", 0.0).busy
    assert throttle.failed("sensor1", "10.0.0.1", 0.0) == {USER: 1.0, ADDRESS: 1.0}
    assert not throttle.admit("sensor1", "10.0.0.1", 0.0).busy  # refused: in a delay


def test_a_fleet_behind_one_address_is_paced_not_refused() -> None:
    """Attempts that succeed leave no failures: a busy address admits the next as one ends."""
    throttle = Throttle(POLICY)
    for n in range(100):
        decision = throttle.admit(f"device{n}", "10.0.0.1", 0.0)
        if decision.busy:
            throttle.succeeded(f"device{n - 3}", "10.0.0.1")
            decision = throttle.admit(f"device{n}", "10.0.0.1", 0.0)
        assert decision.admitted, n


def test_a_pair_that_signed_in_is_refused_only_when_both_its_keys_are_throttled() -> None:
    throttle = Throttle(POLICY)
    assert throttle.admit("sensor1", "10.0.0.1", 0.0).admitted
    throttle.succeeded("sensor1", "10.0.0.1")
    for _ in range(4):
        fail(throttle, "sensor1", "192.0.2.9", 1.0)  # an attacker elsewhere: sensor1 throttled
    assert not throttle.admit("sensor1", "10.0.0.3", 1.5).admitted  # a stranger is refused
    assert throttle.admit("sensor1", "10.0.0.1", 1.5).admitted  # the device is not locked out
    throttle.succeeded("sensor1", "10.0.0.1")
    for n in range(4):
        fail(throttle, f"other{n}", "10.0.0.1", 2.0)  # a neighbour fails: the address throttled
    assert throttle.admit("sensor1", "10.0.0.1", 2.5).admitted  # the device still is not
    throttle.succeeded("sensor1", "10.0.0.1")
    for n in range(4):
        fail(throttle, "sensor1", f"198.51.100.{n}", 2.6)  # the attacker again, from four addresses
    assert throttle.admit("sensor1", "10.0.0.1", 2.7).by == (USER, ADDRESS)  # both: refused


def test_success_forgives_the_user_but_not_the_address() -> None:
    """An attacker's own account must not wash its address clean between guesses."""
    throttle = Throttle(POLICY)
    for _ in range(3):
        fail(throttle, "victim", "192.0.2.9", 0.0)
    assert throttle.admit("mine", "192.0.2.9", 0.0).admitted
    throttle.succeeded("mine", "192.0.2.9")
    assert fail(throttle, "victim2", "192.0.2.9", 0.0) == {ADDRESS: 1.0}  # its fourth failure
    assert throttle.admit("victim", "10.0.0.1", 0.0).admitted
    throttle.succeeded("victim", "10.0.0.1")
    assert throttle.users.state("victim", 0.0) == (0.0, False)


def test_failures_are_forgotten_after_a_quiet_spell() -> None:
    throttle = Throttle(POLICY)
    for _ in range(4):
        fail(throttle, "sensor1", "10.0.0.1", 0.0)
    assert fail(throttle, "sensor1", "10.0.0.1", 99.0) == {USER: 2.0, ADDRESS: 2.0}
    assert fail(throttle, "sensor1", "10.0.0.1", 300.0) == {}  # the first failure of a new spell


def test_cycling_user_names_cannot_grow_the_tables() -> None:
    throttle = Throttle(POLICY)
    for n in range(20_000):
        fail(throttle, f"user{n}", f"10.{n % 256}.{n // 256 % 256}.{n // 65536}", float(n))
    assert len(throttle.users) == len(throttle.addresses) == POLICY.keys


def test_a_check_that_cannot_be_made_leaves_nothing_behind() -> None:
    throttle = Throttle(POLICY)
    assert throttle.admit("sensor1", "10.0.0.1", 0.0).admitted
    throttle.abandoned("sensor1", "10.0.0.1")
    assert len(throttle.users) == len(throttle.addresses) == 0


def test_a_zero_delay_throttles_nothing() -> None:
    throttle = Throttle(Policy(delay=0.0))
    for _ in range(100):
        fail(throttle, "sensor1", "10.0.0.1", 0.0)
    assert len(throttle.users) == 0


@pytest.mark.parametrize(
    ("host", "key"),
    [
        ("192.0.2.7", "192.0.2.7"),
        ("::ffff:192.0.2.7", "192.0.2.7"),
        ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
        ("[2001:db8:1:2::9]", "2001:db8:1:2::/64"),
        ("fe80::1%eth0", "fe80::/64"),
        ("testclient", "testclient"),
    ],
)
def test_an_ipv6_address_counts_as_its_64_network(host: str, key: str) -> None:
    assert address_key(host) == key
