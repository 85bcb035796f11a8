"""The running broker: the imperative shell that loads the state, calls the core and
applies its effects in SQL (``router``), more routing processes (``router_pool``), and
what every process of it shares: settings (``config``), logs, metrics, provisioning.

Names are re-exported lazily: the Spark job and the CLI import ``config`` without
loading the routing loop and everything it runs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.service.config import ConfigError, Settings, load_settings
    from broker.service.metrics import BrokerMetrics
    from broker.service.router import RoutingService
    from broker.service.router_pool import RouterPool

_EXPORTS = {
    "ConfigError": "broker.service.config",
    "Settings": "broker.service.config",
    "load_settings": "broker.service.config",
    "BrokerMetrics": "broker.service.metrics",
    "RoutingService": "broker.service.router",
    "RouterPool": "broker.service.router_pool",
}
__all__ = [
    "BrokerMetrics",
    "ConfigError",
    "RouterPool",
    "RoutingService",
    "Settings",
    "load_settings",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # the next access is a plain attribute
    return value
