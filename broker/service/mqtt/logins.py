"""Who a CONNECT is: its certificate, or its user name and password, checked beside the event loop.

Passwords are checked on a pool of threads sized to the cores (scrypt releases the interpreter
lock), each address in turn, under the sign-in throttle (``broker.core.throttle``); an unknown
user costs the same work as a wrong password. Decisions: ``docs/decisions.md``, "Sign-in
throttle".
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass, field
from functools import partial
from hashlib import blake2b
from typing import Any

from broker.core.throttle import Decision, address_key
from broker.protocol.mqtt.packets import CONNACK_BAD_CREDENTIALS, CONNACK_NOT_AUTHORIZED, Connect
from broker.service.config import Settings
from broker.service.metrics import MqttMetrics
from broker.service.throttling import Guard
from broker.service.turns import Turns
from broker.store import mqtt as sessions
from queues import QueueManager
from queues.message import USER_ID_LENGTH

log = logging.getLogger("broker.mqtt")

# scrypt takes 16 MiB a check, kept by each thread's malloc arena: a few threads, not one a core
# on a large machine.
MAX_CHECKERS = 8


def checkers() -> int:
    """Threads checking passwords: the cores this process may run on, up to ``MAX_CHECKERS``."""
    return max(1, min(len(os.sched_getaffinity(0)), MAX_CHECKERS))


@dataclass(frozen=True, slots=True)
class Login:
    """The answer to a CONNECT: ``code`` 0 and the principal, or a CONNACK return code;
    ``throttled`` when it was refused unchecked, with what the log line says of it."""

    code: int
    principal: str = ""
    throttled: dict[str, Any] = field(default_factory=dict)


class Logins:
    """The listener's password checks, their throttle and the passwords already verified."""

    def __init__(self, qm: QueueManager, settings: Settings, metrics: MqttMetrics) -> None:
        self.qm = qm
        self.settings = settings
        self.metrics = metrics
        self.guard = Guard(settings, metrics.throttled)
        self.pool = Turns(checkers(), "mqtt-auth")
        # A password once verified against a user's current hash, as a keyed digest (memory only).
        self._verified: dict[str, tuple[str, bytes]] = {}
        # What an unknown user's password is checked against: the same scrypt as a known one's.
        self._dummy = sessions.hash_password(os.urandom(16))
        self._ended = asyncio.Event()  # set (and replaced) when a check ends: busy ones ask again

    def close(self) -> None:
        self.pool.close()

    async def check(self, connect: Connect, certified: str | None, address: str) -> Login:
        """A verified client certificate names the principal (``certified``, its subject's CN):
        the user name must be absent or the same, and no password is checked. Otherwise the
        user name and password must match a stored MQTT principal; without a user name, only
        when anonymous clients are configured (``mqtt_anonymous``: the principal they act as)."""
        if certified is not None:
            if connect.username not in (None, certified) or not 0 < len(certified) <= USER_ID_LENGTH:
                return Login(CONNACK_NOT_AUTHORIZED)
            return Login(0, certified)
        user, password = connect.username, connect.password
        if user is None:
            anonymous = self.settings.mqtt_anonymous
            return Login(0, anonymous) if anonymous else Login(CONNACK_NOT_AUTHORIZED)
        if len(user) > USER_ID_LENGTH or password is None:
            return Login(CONNACK_BAD_CREDENTIALS)
        return await self._throttled_check(user, password, address_key(host_of(address)))

    async def _throttled_check(self, user: str, password: bytes, host: str) -> Login:
        while (decision := self.guard.admit(user, host)).busy:
            await self._ended.wait()
        if not decision.admitted:
            return Login(CONNACK_NOT_AUTHORIZED, throttled=_described(decision))
        try:
            return self._verdict(user, host, await self._verify(user, password, host))
        except BaseException:
            self.guard.abandoned(user, host)
            raise
        finally:
            ended, self._ended = self._ended, asyncio.Event()
            ended.set()

    def _verdict(self, user: str, host: str, verified: bool) -> Login:
        if verified:
            self.guard.succeeded(user, host)
            return Login(0, user)
        self.metrics.login_failures.inc()
        for kind, seconds in self.guard.failed(user, host).items():
            log.warning(
                "mqtt logins throttled",
                extra={"key": kind, kind: user if kind == "user" else host, "seconds": seconds},
            )
        return Login(CONNACK_BAD_CREDENTIALS)

    async def _verify(self, user: str, password: bytes, host: str) -> bool:
        """Whether ``password`` is ``user``'s. The hash is read on the loop's default executor
        and a password verified before is recognised at once, so a known client never queues
        behind the checks of a flood; the rest is scrypt on the pool, in ``host``'s turn,
        against a dummy hash for an unknown user."""
        loop = asyncio.get_running_loop()
        stored = await loop.run_in_executor(None, self._stored, user)
        digest = blake2b(password, key=(stored or self._dummy).encode()[-64:], digest_size=32).digest()
        if stored is not None and self._verified.get(user) == (stored, digest):
            return True
        check = partial(sessions.verify_password, password, stored or self._dummy)
        matched = await asyncio.wrap_future(self.pool.submit(host, check))
        if not matched or stored is None:
            return False
        self._verified[user] = (stored, digest)
        return True

    def _stored(self, user: str) -> str | None:
        with self.qm.reading() as conn:
            return sessions.password_hash(conn, user)


def host_of(address: str) -> str:
    """The host of a connection's ``host:port`` address."""
    host, colon, port = address.rpartition(":")
    return host if colon and port.isdigit() else address


def _described(decision: Decision) -> dict[str, Any]:
    return {"throttled": " and ".join(decision.by), "retry_after": round(decision.wait, 1)}
