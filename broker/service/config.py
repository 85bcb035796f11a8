"""Settings from flags, environment and an optional TOML file, in that order.

A new user needs none of it: the defaults run a queue manager ``QM1`` on a
SQLite file ``broker.db`` in the working directory. Every setting has one name
used everywhere: the field name below, ``BROKER_<FIELD>`` in the environment,
``<field> = ...`` in the file (``broker.toml`` in the working directory, or the
file named by ``--config``/``BROKER_CONFIG``).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.core.state import BrokerConfig

DEFAULT_CONFIG_FILE = "broker.toml"
DEFAULT_DATABASE_URL = "sqlite:///broker.db"  # in the working directory, as a new user expects
DATABASES = ("sqlite:", "postgresql:", "postgresql+psycopg:", "postgres:")


@dataclass(frozen=True, slots=True)
class Settings:
    database_url: str = DEFAULT_DATABASE_URL
    qmgr_name: str = "QM1"
    sqlite_synchronous: str = "FULL"
    log_level: str = "INFO"
    log_format: str = "auto"  # text when standard error is a terminal, JSON otherwise
    # Routing service
    batch_size: int = 500
    # On SQLite, how long the router waits after a batch that was not full before its next one,
    # to gather larger batches; 0 (the default): not at all, since routing holds no lock.
    sqlite_linger_ms: int = 0
    stream_queues: tuple[str, ...] = ("SYSTEM.BROKER.DEFAULT.STREAM",)
    # Routing processes `broker serve` runs (broker.service.router_pool).
    routers: int = 1
    # Seconds a router holding a claim turn may go without progress (a stopped or hung process)
    # before the turn is taken from it (queues.claims); longer than any batch takes to route.
    turn_timeout: int = 10
    default_policy: str = "allow"
    admin_group: str = "mqm"
    # Admin API
    api_host: str = "127.0.0.1"
    api_port: int = 8080
    # Seconds the admin API waits for a neighbouring broker's answer in the topology check.
    neighbour_timeout: float = 10.0
    # TLS (broker.service.tls): the server's PEM certificate chain and unencrypted key, shared by
    # MQTT over TLS, MQTT over secure WebSockets and the API's HTTPS (api_tls); with tls_client_ca,
    # client certificates signed by it are verified and name the MQTT principal (their CN).
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""
    api_tls: bool = False
    # More MQTT listeners, "[HOST:]PORT" each ("" = none): over TLS (8883 by convention) and
    # over WebSockets at path /mqtt, plain (8080) and over TLS (8081); one broker, one set of
    # sessions, whatever carries the connection.
    mqtt_tls_listen: str = ""
    mqtt_ws_listen: str = ""
    mqtt_wss_listen: str = ""
    # MQTT listener (broker.service.mqtt): "[HOST:]PORT" to serve MQTT 3.1/3.1.1 on ("" = none;
    # HOST defaults to 127.0.0.1); anonymous clients act as the principal mqtt_anonymous, and
    # are refused when it is empty; at most mqtt_max_inflight QoS 1/2 messages are sent to a
    # client unacknowledged; a packet longer than mqtt_max_packet_size bytes closes its connection.
    mqtt_listen: str = ""
    mqtt_anonymous: str = ""
    mqtt_max_inflight: int = 100
    mqtt_max_packet_size: int = 4 * 1024 * 1024
    # A client whose unsent output passes mqtt_max_output_bytes (it does not read) loses the
    # QoS 0 deliveries made meanwhile; its QoS 1/2 ones wait on its session queue.
    mqtt_max_output_bytes: int = 1024 * 1024
    # Listener processes sharing the MQTT ports (SO_REUSEPORT) and the sessions, through the
    # database (broker.service.mqtt.processes).
    mqtt_processes: int = 1
    # Housekeeping of the sessions no client is connected to (broker.service.mqtt.housekeeping):
    # one offline longer than mqtt_session_expiry seconds is removed with its subscriptions and
    # messages (0 = never); one holding more than mqtt_max_queued messages loses its oldest
    # (0 = no limit). Every mqtt_sys_interval seconds the listener publishes its status on
    # $SYS/broker/... topics (0 = never).
    mqtt_session_expiry: int = 0
    mqtt_max_queued: int = 0
    mqtt_sys_interval: int = 0
    # A file of bridges to other MQTT brokers, in Mosquitto's bridge syntax
    # (broker.service.mqtt.bridging); "" = none.
    mqtt_bridges: str = ""
    # Where the settings came from, for `broker config show`.
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False)


class ConfigError(ValueError):
    """A setting has a value of the wrong type or an unknown name."""


_FIELDS = {f.name: f for f in fields(Settings) if f.name != "sources"}


# Settings that take one of a few words: a misspelt policy must not silently mean "deny".
CHOICES = {
    "log_format": ("auto", "json", "text"),
    "log_level": ("DEBUG", "INFO", "WARNING", "ERROR"),
    "default_policy": ("allow", "deny"),
    "sqlite_synchronous": ("OFF", "NORMAL", "FULL", "EXTRA"),
}


def _coerce(name: str, value: Any) -> Any:
    if name in CHOICES:
        return _choice(name, value)
    if name == "database_url":
        return _database_url(value)
    default = getattr(Settings(), name)
    try:
        if isinstance(default, bool):
            if isinstance(value, str):
                return value.strip().lower() in ("1", "true", "yes", "on")
            return bool(value)
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
        if isinstance(default, tuple):
            items = value.split(",") if isinstance(value, str) else list(value)
            return tuple(str(item).strip() for item in items if str(item).strip())
        return str(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"setting {name}={value!r} is not valid: {exc}") from None


def _database_url(value: Any) -> str:
    url = str(value).strip()
    if not url.startswith(DATABASES):
        raise ConfigError(
            f"database_url {url.split('://')[0] + '://...' if '://' in url else url!r} is not supported: "
            "use sqlite:///FILE or postgresql://USER@HOST/DATABASE"
        )
    return url


def _choice(name: str, value: Any) -> str:
    words = CHOICES[name]
    word = str(value).strip()
    found = next((w for w in words if w.lower() == word.lower()), None)
    if found is None:
        raise ConfigError(f"setting {name}={value!r} is not valid: use one of {', '.join(words)}")
    return found


def _from_file(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read configuration file {path}: {exc}") from None
    table = data.get("broker", data)
    unknown = set(table) - _FIELDS.keys()
    if unknown:
        raise ConfigError(f"unknown settings in {path}: {', '.join(sorted(unknown))}")
    return dict(table)


def load_settings(
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    config_file: str | os.PathLike[str] | None = None,
) -> Settings:
    """Merge defaults < file < environment < flags (``None`` flags are ignored)."""
    environ = os.environ if environ is None else environ
    flags = {k: v for k, v in (flags or {}).items() if v is not None and k in _FIELDS}
    path = config_file or environ.get("BROKER_CONFIG")
    if path is None and Path(DEFAULT_CONFIG_FILE).is_file():
        path = DEFAULT_CONFIG_FILE
    layers: list[tuple[str, Mapping[str, Any]]] = []
    if path is not None:
        layers.append((f"file {path}", _from_file(Path(path))))
    layers.append(
        (
            "environment",
            {
                name: environ[f"BROKER_{name.upper()}"]
                for name in _FIELDS
                if f"BROKER_{name.upper()}" in environ
            },
        )
    )
    layers.append(("flags", flags))
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for source, layer in layers:
        for name, value in layer.items():
            values[name] = _coerce(name, value)
            sources[name] = source
    settings = replace(Settings(), **values)
    return replace(settings, sources=tuple(sorted(sources.items())))


def mqtt_address(text: str, name: str = "mqtt_listen") -> tuple[str, int]:
    """``[HOST:]PORT`` (the setting ``name``) as (host, port); the host is 127.0.0.1 unless given."""
    host, _, port = text.strip().rpartition(":")
    try:
        number = int(port)
    except ValueError:
        raise ConfigError(f"setting {name}={text!r} is not valid: use [HOST:]PORT") from None
    if not 0 < number < 65536:
        raise ConfigError(f"setting {name}={text!r} is not valid: the port must be 1 to 65535")
    return host.strip("[]") or "127.0.0.1", number


def broker_config(qmgr: str, settings: Settings) -> BrokerConfig:
    """Stream queues are ``NAME`` (default subscription point) or ``NAME=SubPoint``."""
    from broker.core.state import BrokerConfig  # the routing core: not for every CLI command
    from broker.core.subscription import DEFAULT_SUB_POINT

    streams: dict[str, str] = {}
    for entry in settings.stream_queues:
        name, _, sub_point = entry.partition("=")
        streams[name.strip()] = sub_point.strip() or DEFAULT_SUB_POINT
    return BrokerConfig(qmgr, streams=streams, user_id=settings.admin_group)
