"""What every CLI command shares: settings, the queue manager, output and exit codes.

Exit codes: 0 success, 2 usage error (argparse), 1 an MQ error, printed as
``MQRC_NAME (number): detail`` on stderr (or as JSON with ``--json``) so that
scripts can branch on the reason name.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from typing import TYPE_CHECKING, Any

from broker.service.config import Settings, load_settings
from queues.errors import MQError

if TYPE_CHECKING:
    from queues import QueueManager

EXIT_OK = 0
EXIT_MQ_ERROR = 1
EXIT_USAGE = 2


class Context:
    """Lazily opened resources for one CLI invocation."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.json = bool(getattr(args, "json", False))

    @cached_property
    def settings(self) -> Settings:
        return load_settings(
            {
                "database_url": self.args.db,
                "qmgr_name": self.args.qmgr,
                "log_level": self.args.log_level,
                "log_format": self.args.log_format,
                "batch_size": getattr(self.args, "batch_size", None),
                "stream_queues": getattr(self.args, "streams", None),
                "routers": getattr(self.args, "routers", None),
                "mqtt_listen": getattr(self.args, "mqtt_listen", None),
                **{
                    name: getattr(self.args, name, None)
                    for name in (
                        "mqtt_tls_listen",
                        "mqtt_ws_listen",
                        "mqtt_wss_listen",
                        "mqtt_processes",
                        "tls_cert",
                        "tls_key",
                        "tls_client_ca",
                        "api_tls",
                    )
                },
            },
            config_file=self.args.config,
        )

    @cached_property
    def _engine(self) -> Any:
        from queues import make_engine  # SQLAlchemy: only for commands that use the database

        return make_engine(self.settings.database_url, sqlite_synchronous=self.settings.sqlite_synchronous)

    def engine(self) -> Any:
        """One engine per invocation, shared by every step and disposed of at the end."""
        return self._engine

    @cached_property
    def qm(self) -> QueueManager:
        from queues import QueueManager

        return QueueManager(self.engine(), appl_name="broker", turn_timeout=self.settings.turn_timeout)

    def close(self) -> None:
        if "qm" in self.__dict__:
            self.qm.close()
        if "_engine" in self.__dict__:
            self._engine.dispose()

    def emit(self, value: Any, text: str | None = None) -> None:
        """Print ``value`` as JSON with --json, else ``text`` (or the value itself)."""
        if self.json:
            print(json.dumps(value, indent=2, default=str))
        else:
            print(text if text is not None else value)
        sys.stdout.flush()  # a closed pipe is found here, while a message being got can go back


@contextmanager
def mq_errors(ctx: Context) -> Iterator[None]:
    try:
        yield
    except MQError as exc:
        if ctx.json:
            json.dump(
                {"reason": exc.reason, "reason_name": exc.reason_name, "detail": exc.detail}, sys.stderr
            )
            sys.stderr.write("\n")
        else:
            print(f"{exc.reason_name} ({exc.reason}): {exc.detail}", file=sys.stderr)
        raise SystemExit(EXIT_MQ_ERROR) from None
