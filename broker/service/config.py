"""Settings from flags, environment and an optional TOML file, in that order.

A new user needs none of it: the defaults run a queue manager ``QM1`` on a
SQLite file ``broker.db`` in the working directory. Every setting has one name
used everywhere: the field name below, ``BROKER_<FIELD>`` in the environment,
``<field> = ...`` in the file (``broker.toml`` in the working directory, or the
file named by ``--config``/``BROKER_CONFIG``).
"""

from __future__ import annotations

import os
import socket
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
    # How long a transaction waits for SQLite's write lock (held by another process) before it
    # fails as "database unavailable": its work is then retried, and MQTT clients are refused.
    sqlite_busy_timeout_ms: int = 30_000
    log_level: str = "INFO"
    log_format: str = "auto"  # text when standard error is a terminal, JSON otherwise
    allocator: str = "jemalloc"  # what `broker serve` runs on where it is installed (broker.cli.allocator)
    event_loop: str = "uvloop"  # the MQTT listener's and the API's (broker.service.event_loop)
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
    # Failed sign-ins (MQTT logins, console sign-ins, API bearer tokens; broker.core.throttle):
    # a user or an address fails auth_throttle_free times at no cost; each failure after begins
    # a delay of auth_throttle_delay seconds (0: no throttle), doubled each time up to
    # auth_throttle_max_delay, in which its attempts are refused unchecked. Failures are
    # forgotten after auth_throttle_forget seconds without one; each process keeps
    # auth_throttle_keys users and as many addresses.
    auth_throttle_free: int = 5
    auth_throttle_delay: float = 1.0
    auth_throttle_max_delay: float = 60.0
    auth_throttle_forget: float = 900.0
    auth_throttle_keys: int = 10_000
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
    # Addresses or networks (CIDR) of TCP load balancers that put a PROXY protocol header before
    # each client's bytes (HAProxy's send-proxy-v2): a connection from one of them to the MQTT
    # or MQTT-over-TLS listener must begin with one, and is known by the client's address it
    # names (the sign-in throttle, the sessions, the logs). Empty: no header is read.
    mqtt_proxy_from: tuple[str, ...] = ()
    mqtt_anonymous: str = ""
    mqtt_max_inflight: int = 100
    mqtt_max_packet_size: int = 4 * 1024 * 1024
    # A client whose unsent output passes mqtt_max_output_bytes (it does not read) loses the
    # QoS 0 deliveries made meanwhile; its QoS 1/2 ones wait on its session queue. Two of the
    # largest packets by default: a reader that keeps up is still a few of them behind in a
    # burst of large payloads, once the kernel's socket buffer is full.
    mqtt_max_output_bytes: int = 8 * 1024 * 1024
    # Back-pressure on input (broker.service.mqtt.intake): a connection with mqtt_max_unrouted
    # packets (or mqtt_max_unrouted_bytes of them) read and not yet routed or recorded is not
    # read until they are, and no connection with any is read while all of them together hold
    # mqtt_max_unrouted_total (or mqtt_max_unrouted_total_bytes): TCP then slows the senders.
    # New connections (broker.service.mqtt.admission): each listener accepts at most
    # mqtt_max_connect_rate a second, none while mqtt_max_half_open it accepted await the answer
    # to their CONNECT, and closes one that sends no CONNECT within mqtt_connect_timeout seconds.
    mqtt_max_connect_rate: int = 1000
    mqtt_max_half_open: int = 1000
    mqtt_connect_timeout: float = 10.0
    mqtt_max_unrouted: int = 500
    mqtt_max_unrouted_bytes: int = 1024 * 1024
    mqtt_max_unrouted_total: int = 2000
    mqtt_max_unrouted_total_bytes: int = 2 * 1024 * 1024
    # Topic aliases an MQTT 5.0 client may set on its publications, and the most the listener
    # sets on what it sends a client that takes them (0: none).
    mqtt_topic_alias_maximum: int = 10
    # What an MQTT 5.0 client asking for Response Information is told: this, then its client id
    # and "/" ("" = none is told).
    mqtt_response_information: str = "response/"
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
    # The MQTT cluster (broker.service.mqtt.membership): this node's name ("" = the host name
    # and the port of its first MQTT listener), and how long a node may go without a
    # heartbeat before another declares it dead and releases its sessions (seconds).
    node_name: str = ""
    node_timeout: float = 5.0
    # Where the settings came from, for `broker config show`.
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False)


class ConfigError(ValueError):
    """A setting has a value of the wrong type or an unknown name."""


_FIELDS = {f.name: f for f in fields(Settings) if f.name != "sources"}


# Settings that take one of a few words: a misspelt policy must not silently mean "deny".
CHOICES = {
    "log_format": ("auto", "json", "text"),
    "allocator": ("jemalloc", "system"),
    "event_loop": ("uvloop", "asyncio"),
    "log_level": ("DEBUG", "INFO", "WARNING", "ERROR"),
    "default_policy": ("allow", "deny"),
    "sqlite_synchronous": ("OFF", "NORMAL", "FULL", "EXTRA"),
}


# Numbers that must be more than 0 (a count, a size or a time that 0 would make meaningless:
# a node_timeout of 0 declares every node dead at once); every other number must be 0 or more.
POSITIVE = frozenset(
    {
        "batch_size",
        "routers",
        "turn_timeout",
        "auth_throttle_max_delay",
        "auth_throttle_forget",
        "auth_throttle_keys",
        "neighbour_timeout",
        "mqtt_max_inflight",
        "mqtt_max_packet_size",
        "mqtt_max_output_bytes",
        "mqtt_max_connect_rate",
        "mqtt_max_half_open",
        "mqtt_connect_timeout",
        "mqtt_max_unrouted",
        "mqtt_max_unrouted_bytes",
        "mqtt_max_unrouted_total",
        "mqtt_max_unrouted_total_bytes",
        "mqtt_processes",
        "node_timeout",
    }
)


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
        if isinstance(default, tuple):
            items = value.split(",") if isinstance(value, str) else list(value)
            return tuple(str(item).strip() for item in items if str(item).strip())
        if not isinstance(default, int | float):
            return str(value)
        number = type(default)(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"setting {name}={value!r} is not valid: {exc}") from None
    return _number(name, number, value)


def _number(name: str, number: float, value: Any) -> float:
    """``number`` (read from ``value``), if in range for the setting ``name`` (NaN never is)."""
    if name in POSITIVE and not number > 0:
        raise ConfigError(f"setting {name}={value!r} is not valid: it must be more than 0")
    if not number >= 0:
        raise ConfigError(f"setting {name}={value!r} is not valid: it must be 0 or more")
    return number


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


def node_name(settings: Settings) -> str:
    """This node's name in an MQTT cluster: ``node_name``, or the host name and the port of
    its first MQTT listener (a node is one machine, and one port on it)."""
    from broker.core.cluster import check_node_name

    name = settings.node_name
    if not name:
        listens = (settings.mqtt_listen, settings.mqtt_tls_listen, settings.mqtt_ws_listen)
        listen = next((text for text in listens if text), settings.mqtt_wss_listen)
        port = mqtt_address(listen)[1] if listen else 0
        name = f"{socket.gethostname()}:{port}"
    try:
        return check_node_name(name)
    except ValueError as exc:
        raise ConfigError(f"setting node_name={name!r} is not valid: {exc}") from None
