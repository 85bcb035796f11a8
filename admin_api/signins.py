"""Checking an API token under the sign-in throttle, at every door: a bearer token, the console's
sign-in form and its session cookie.

Each failure is counted, logged and in the audit log (never the secret); an attempt the throttle
refuses is counted and logged, and not checked. Decisions: ``docs/decisions.md``, "Sign-in
throttle".
"""

from __future__ import annotations

import logging
import math
from hashlib import blake2b
from typing import Any

from fastapi import Request
from prometheus_client import CollectorRegistry, Counter, Gauge

from admin_api.auditing import record_failed_sign_in
from broker.admin import accounts
from broker.admin.accounts import Token
from broker.core.throttle import address_key
from broker.service.config import Settings
from broker.service.throttling import Guard
from queues import QueueManager
from queues.ids import now_ms

log = logging.getLogger("admin_api.signins")

BEARER = "bearer"
SIGN_IN = "console sign-in"
SESSION = "console session"  # a revoked token there is a session that ended, not a failure
UNAUTHORIZED = 401


class Throttled(Exception):
    """The throttle refuses the attempt unchecked: try again in ``seconds``."""

    def __init__(self, wait: float) -> None:
        self.seconds = max(1, math.ceil(wait))
        super().__init__(
            f"too many unknown or revoked tokens from this address or with this token: "
            f"try again in {self.seconds} s"
        )


class Signins:
    """One API process's token checks: its throttle and their counters."""

    def __init__(self, qm: QueueManager, settings: Settings) -> None:
        self.qm = qm
        self.registry = CollectorRegistry()  # exposed beside the rest on /metrics
        r = self.registry
        self.failures = Counter(
            "broker_api_signin_failures",
            "Unknown or revoked tokens shown to the API, by door",
            ["door"],
            registry=r,
        )
        self.refused = Counter(
            "broker_api_signins_throttled",
            "Tokens refused unchecked by the sign-in throttle",
            ["door"],
            registry=r,
        )
        gauge = Gauge(
            "broker_api_throttled",
            "Tokens and addresses whose sign-ins are refused unchecked now (auth_throttle_*)",
            ["key"],
            registry=r,
        )
        self.guard = Guard(settings, gauge)

    def check(self, request: Request, secret: str, door: str) -> Token | None:
        """The live token with this secret, or None (its failure recorded); :class:`Throttled`
        while the throttle refuses the request's address or token."""
        user, address = _key(secret), address_key(request.client.host if request.client else "")
        decision = self.guard.admit_waiting(user, address)
        if not decision.admitted:
            self.refused.labels(door).inc()
            log.warning(
                "api sign-in refused: throttled",
                extra={"door": door, "address": address, "throttled": " and ".join(decision.by)},
            )
            raise Throttled(decision.wait)
        try:
            with self.qm.reading() as conn:
                token = accounts.find_token(conn, secret)
        except BaseException:
            self.guard.abandoned(user, address)
            raise
        if token is not None and token.live(now_ms()):
            self.guard.succeeded(user, address)
            return token
        if token is not None and door == SESSION:
            self.guard.abandoned(user, address)
            return None
        self._failed(request, token, door, self.guard.failed(user, address))
        return None

    def _failed(self, request: Request, token: Token | None, door: str, delays: dict[str, float]) -> None:
        self.failures.labels(door).inc()
        address = request.client.host if request.client else ""
        summary: dict[str, Any] = {
            "sign_in": _refused(token),
            "door": door,
            "address": address,
        }
        if delays:
            summary["throttled_for"] = {kind: round(seconds, 1) for kind, seconds in delays.items()}
        log.warning("api sign-in failed", extra=summary)
        try:
            record_failed_sign_in(self.qm, request.scope, token, summary, UNAUTHORIZED)
        except Exception:  # the refusal stands; a lost entry must not turn it into a 500
            log.exception("audit entry not written", extra=summary)


def _refused(token: Token | None) -> str:
    """Why a token was refused, for the log and the audit entry."""
    if token is None:
        return "unknown token"
    return "revoked token" if token.revoked else "expired token"


def _key(secret: str) -> str:
    """A token's key in the throttle: its secret, digested (the table holds no secret)."""
    return blake2b(secret.encode("utf-8", "surrogatepass"), digest_size=12, person=b"api-sign-in").hexdigest()
