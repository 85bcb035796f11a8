"""What every CLI command shares: settings, the queue manager, output and exit codes.

Exit codes: 0 success, 2 usage error (argparse), 1 an MQ error, printed as
``MQRC_NAME (number): detail`` on stderr (or as JSON with ``--json``) so that
scripts can branch on the reason name.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from typing import TYPE_CHECKING, Any

from broker.service.config import Settings, load_settings
from queues.errors import MQError
from queues.reasons import Reason

if TYPE_CHECKING:
    from queues import QueueManager

EXIT_OK = 0
EXIT_MQ_ERROR = 1
EXIT_USAGE = 2


class Context:
    """Lazily opened resources for one CLI invocation."""

    def __init__(self, args: argparse.Namespace, *, process: bool = False) -> None:
        """``process``: the invocation is the process's own command line (not a caller's
        ``main(argv)``), so it may start the process again (``broker.cli.allocator``)."""
        self.args = args
        self.json = bool(getattr(args, "json", False))
        self.process = process

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

        url = self.settings.database_url
        if not getattr(self.args, "creates_database", False):
            _refuse_missing(url)
        return make_engine(
            url,
            sqlite_synchronous=self.settings.sqlite_synchronous,
            busy_timeout_ms=self.settings.sqlite_busy_timeout_ms,
        )

    def engine(self) -> Any:
        """One engine per invocation, shared by every step and disposed of at the end. Only
        the commands that make a database ready (``set_defaults(creates_database=True)``)
        may open a SQLite file that is not there: for any other, a missing file is a command
        run in the wrong directory or with the wrong ``--db``, never a new queue manager."""
        return self._engine

    @cached_property
    def qm(self) -> QueueManager:
        from queues import QueueManager

        qm = QueueManager(self.engine(), appl_name="broker", turn_timeout=self.settings.turn_timeout)
        try:
            self.check_qmgr(qm.name)
        except MQError:
            qm.close()
            raise
        return qm

    def audit(self, command: str, summary: dict[str, Any]) -> None:
        """Write ``broker COMMAND``'s change to the admin API's audit log, as the operator's
        (``cli:`` and the login): changes made on the database directly are audited too."""
        import getpass

        from broker.admin import accounts

        with self.qm.unit_of_work() as uow:
            accounts.record(
                uow.connection,
                token_id=None,
                principal=f"cli:{getpass.getuser()}",
                method="CLI",
                path=f"broker {command}",
                resource=f"broker {command.split()[0]}",
                summary=summary,
                status=0,
            )

    def check_qmgr(self, stored: str | None) -> None:
        """The database names its queue manager; a name the settings give explicitly (flag,
        environment or file) must agree with it, and none is needed (``docs/decisions.md``)."""
        asked = dict(self.settings.sources).get("qmgr_name")
        if asked is None or stored is None or stored == self.settings.qmgr_name:
            return
        where = {"flags": "--qmgr", "environment": "BROKER_QMGR_NAME"}.get(asked, f"qmgr_name in the {asked}")
        raise MQError(
            Reason.MQRC_Q_MGR_NAME_ERROR,
            f"this database belongs to queue manager {stored!r}, not {self.settings.qmgr_name!r} ({where}): "
            "leave the name out, the database knows it",
        )

    def prepare_database(self) -> str:
        """Migrate the database (creating it if need be) and name its queue manager: the name
        it has, else the ``qmgr_name`` setting. Returns the name."""
        from broker.service.provision import prepare_database
        from queues import QueueManager

        stored = QueueManager.stored_name(self.engine())
        self.check_qmgr(stored)
        name = stored or self.settings.qmgr_name
        prepare_database(self.engine(), name)
        return name

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


def _refuse_missing(url: str) -> None:
    """Refuse a SQLite file that is not there (2059), naming where it was looked for."""
    from queues.database import sqlite_file

    path = sqlite_file(url)
    if path is not None and not os.path.exists(path):
        raise MQError(
            Reason.MQRC_Q_MGR_NOT_AVAILABLE,
            f"no database at {path}: name the queue manager's database with --db URL or "
            "BROKER_DATABASE_URL ('broker db upgrade' or 'broker serve' creates a new one)",
        )


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
