"""A listening socket that cannot be bound, said in one line (``docs/decisions.md``, the
``broker`` command): the address, why, and the settings and flags that chose it."""

from __future__ import annotations

import os

from broker.service.config import ConfigError


def cannot_listen(where: str, exc: OSError, chosen_by: str) -> ConfigError:
    """What binding ``where`` raised, as the configuration error the command prints alone
    (exit code 2) before anything has started, so that no traceback hides the port in use."""
    why = os.strerror(exc.errno) if exc.errno else str(exc)
    return ConfigError(f"cannot listen on {where}: {why} ({chosen_by})")
