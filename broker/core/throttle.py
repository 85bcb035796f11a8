"""Failed sign-ins counted per user and per address, and whether the next attempt may be checked.

Pure and handed the time; the rules and their reasons are in ``docs/decisions.md``, "Sign-in
throttle". Nothing here is thread-safe: the shells hold a lock (``broker.service.throttling``).
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict
from dataclasses import dataclass

USER = "user"
ADDRESS = "address"
IPV6_PREFIX = 64  # one subscriber's IPv6 network: its every address is one key


@dataclass(frozen=True, slots=True)
class Policy:
    """``free`` failures cost nothing; each one after begins a delay of ``delay`` seconds,
    doubled each time up to ``max_delay``, during which the key's attempts are refused
    unchecked. A key without a failure for ``forget`` seconds starts afresh. A table holds
    ``keys`` keys at most. A ``delay`` of 0 throttles nothing."""

    free: int = 5
    delay: float = 1.0
    max_delay: float = 60.0
    forget: float = 900.0
    keys: int = 10_000

    @property
    def enabled(self) -> bool:
        return self.delay > 0 and self.keys > 0

    def delay_after(self, failures: int) -> float:
        """The delay that a key's ``failures``-th failure begins (0 for the free ones)."""
        beyond = failures - self.free
        if beyond <= 0:
            return 0.0
        return min(self.max_delay, self.delay * 2.0 ** min(beyond - 1, 64))


@dataclass(slots=True)
class _Record:
    failures: int = 0
    until: float = 0.0  # no attempt of the key is checked before then
    last: float = 0.0  # when it last failed
    checking: int = 0  # its checks under way


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether an attempt may be checked now; if not, ``by`` which kinds of key ("user",
    "address" or both) and for how long: ``wait`` seconds of a delay, or, ``busy``, until a
    check under way ends (so many are under way that they could use up the free failures)."""

    wait: float = 0.0
    by: tuple[str, ...] = ()

    @property
    def admitted(self) -> bool:
        return not self.by

    @property
    def busy(self) -> bool:
        return bool(self.by) and not self.wait


ADMITTED = Decision()


class Keys:
    """One kind of key's records: keys that failed or are being checked, the least recently
    used evicted when the table is full, so cycling through keys cannot grow it."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._records: OrderedDict[str, _Record] = OrderedDict()

    def __len__(self) -> int:
        return len(self._records)

    def state(self, key: str, now: float) -> tuple[float, bool]:
        """The seconds left of the key's delay, and whether it is busy: its checks under way,
        counted as failures to come, would use up its free ones (so a burst of attempts gets no
        more checks than that before the delays begin)."""
        record = self._current(key, now)
        if record is None:
            return 0.0, False
        busy = record.checking > 0 and record.failures + record.checking >= self.policy.free
        return max(0.0, record.until - now), busy

    def begin(self, key: str) -> None:
        self._record(key).checking += 1

    def failed(self, key: str, now: float) -> float:
        """Count a failure; the delay it begins (0: none)."""
        record = self._record(key)
        record.checking = max(0, record.checking - 1)
        record.failures += 1
        record.last = now
        delay = self.policy.delay_after(record.failures)
        record.until = now + delay
        return delay

    def ended(self, key: str) -> None:
        """A check that did not fail has ended: a key with no failures is forgotten."""
        record = self._records.get(key)
        if record is None:
            return
        record.checking = max(0, record.checking - 1)
        if not record.failures and not record.checking:
            del self._records[key]

    def forgive(self, key: str) -> None:
        """A check of the key succeeded: its failures are forgotten."""
        record = self._records.get(key)
        if record is not None:
            record.failures, record.until = 0, 0.0
            self.ended(key)

    def throttled(self, now: float) -> int:
        """How many keys are in a delay now."""
        return sum(1 for record in self._records.values() if record.until > now)

    def _current(self, key: str, now: float) -> _Record | None:
        record = self._records.get(key)
        if record is None:
            return None
        if not record.checking and now >= record.until and now - record.last >= self.policy.forget:
            del self._records[key]
            return None
        self._records.move_to_end(key)
        return record

    def _record(self, key: str) -> _Record:
        record = self._records.get(key)
        if record is None:
            if len(self._records) >= self.policy.keys:
                self._records.popitem(last=False)
            record = self._records[key] = _Record()
        else:
            self._records.move_to_end(key)
        return record


class Throttle:
    """Users' and addresses' failures, and the (user, address) pairs that signed in: a pair
    that did is refused only when both its user and its address are throttled, so neither an
    attacker elsewhere nor a neighbour behind the same address locks a known client out."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.users = Keys(policy)
        self.addresses = Keys(policy)
        self._known: OrderedDict[tuple[str, str], None] = OrderedDict()

    def admit(self, user: str, address: str, now: float) -> Decision:
        """Whether the attempt may be checked now; if so, it is under way until
        :meth:`failed`, :meth:`succeeded` or :meth:`abandoned` is called with the same keys.
        A busy attempt waits for a check to end and asks again: refusing it would refuse a
        fleet behind one address that reconnects at once."""
        if not self.policy.enabled:
            return ADMITTED
        states = {USER: self.users.state(user, now), ADDRESS: self.addresses.state(address, now)}
        by = tuple(kind for kind, (wait, busy) in states.items() if wait or busy)
        if len(by) == 1 and (user, address) in self._known:
            by = ()
        if by:
            return Decision(max(states[kind][0] for kind in by), by)
        self.users.begin(user)
        self.addresses.begin(address)
        return ADMITTED

    def failed(self, user: str, address: str, now: float) -> dict[str, float]:
        """Count a failed check against both keys; the delays it began, by kind of key."""
        if not self.policy.enabled:
            return {}
        delays = {USER: self.users.failed(user, now), ADDRESS: self.addresses.failed(address, now)}
        return {kind: delay for kind, delay in delays.items() if delay}

    def succeeded(self, user: str, address: str) -> None:
        """The user's failures are forgotten, not the address's (an attacker's own account must
        not wash its address clean), and the pair is known from now on."""
        if not self.policy.enabled:
            return
        self.users.forgive(user)
        self.addresses.ended(address)
        self._known[(user, address)] = None
        self._known.move_to_end((user, address))
        if len(self._known) > self.policy.keys:
            self._known.popitem(last=False)

    def abandoned(self, user: str, address: str) -> None:
        """A check that could not be made (the database was unavailable): no verdict."""
        if self.policy.enabled:
            self.users.ended(user)
            self.addresses.ended(address)

    def throttled(self, now: float) -> dict[str, int]:
        """How many users and addresses are in a delay now."""
        return {USER: self.users.throttled(now), ADDRESS: self.addresses.throttled(now)}


def address_key(host: str) -> str:
    """The key of a client's address: the address itself, an IPv4-mapped one as IPv4, and an
    IPv6 one as its /64 network (a subscriber holds all of one); other text as it is."""
    try:
        address = ipaddress.ip_address(host.strip("[]").split("%")[0])
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/{IPV6_PREFIX}", strict=False))
    return str(address)
