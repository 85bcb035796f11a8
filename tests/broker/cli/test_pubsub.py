"""``broker publish/subscribe/...``, ``subscriptions``, ``retained``, ``acl`` and ``group`` through
``broker.cli.main``, with a routing service thread serving the same database, on both dialects.

What is checked is what a person at a terminal sees: the broker's answer in words (completion,
reason name and number, refused topics), the JSON of ``--json``, and the exit code (1 when the
broker answers ``error`` or an MQ call fails, 2 for a usage error).
"""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from broker.cli import main
from queues import QueueManager
from tests.conftest import DIALECTS
from tests.e2e.harness import ServiceThread, emptied_database, running, service, shared_database

# One database per dialect for the module, emptied before each test (see tests.e2e.harness).
shared = pytest.fixture(scope="module", params=DIALECTS)(shared_database)
engine = pytest.fixture(emptied_database)


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    @property
    def error_line(self) -> str:
        """The ``MQRC_NAME (n): detail`` line among the log lines on stderr."""
        return next(line for line in self.err.splitlines() if line.startswith("MQRC"))


class Cli:
    def __init__(self, url: str, capsys: pytest.CaptureFixture[str]) -> None:
        self.url = url
        self._capsys = capsys

    def __call__(self, *argv: str) -> Result:
        self._capsys.readouterr()
        try:
            code = main(["--db", self.url, *argv])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        captured = self._capsys.readouterr()
        return Result(code, captured.out, captured.err)

    def ok(self, *argv: str) -> str:
        result = self(*argv)
        assert result.code == 0, (result.out, result.err)
        return result.out


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No developer broker.toml or BROKER_* variables; each run's logging set-up undone."""
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith("BROKER_") and name != "BROKER_TEST_PG_URL":
            monkeypatch.delenv(name)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def serving(qm: QueueManager) -> Iterator[ServiceThread]:
    for name in ("SUB.A", "SUB.B"):
        qm.define_queue(name)
    with running(qm, batch_size=10) as thread:
        yield thread


@pytest.fixture
def cli(qm: QueueManager, serving: ServiceThread, capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(qm.engine.url.render_as_string(hide_password=False), capsys)


AS_ALICE = ("--user-id", "alice")


def test_publish_subscribe_receive(cli: Cli) -> None:
    assert cli.ok("subscribe", "--topic", "Sport/#", "--queue", "SUB.A", *AS_ALICE) == "ok\n"
    assert (
        cli.ok("publish", "--topic", "Sport/Soccer/Event/MatchStarted", "--retain", "kick-off", *AS_ALICE)
        == "ok\n"
    )
    assert cli.ok("receive", "SUB.A") == "topic    Sport/Soccer/Event/MatchStarted\nbody     kick-off\n"

    cli.ok("subscribe", "--topic", "Sport/Soccer/#", "--queue", "SUB.B", "--inform-if-retained", *AS_ALICE)
    received = cli("receive", "SUB.B", "--json")
    assert received.code == 0
    pub = received.json()
    assert {k: pub[k] for k in ("topics", "sub_point", "retained", "folders", "body_text", "body_hex")} == {
        "topics": ["Sport/Soccer/Event/MatchStarted"],
        "sub_point": None,
        "retained": True,
        "folders": [],
        "body_text": "kick-off",
        "body_hex": None,
    }
    assert pub["mqmd"]["user_id"] == "alice"

    empty = cli("receive", "SUB.A", "--wait", "0.1")
    assert empty.code == 1
    assert empty.error_line == "MQRC_NO_MSG_AVAILABLE (2033): no message available on SUB.A"


def test_publish_body_from_file_stdin_and_options(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli.ok("subscribe", "--topic", "Data/#", "--queue", "SUB.A", *AS_ALICE)
    (tmp_path / "body.bin").write_bytes(b"\x00\xffraw")
    cli.ok(
        "publish", "--topic", "Data/File", "--file", str(tmp_path / "body.bin"), "--seq-num", "5", *AS_ALICE
    )
    monkeypatch.setattr("sys.stdin", io.StringIO("from stdin"))
    assert (
        cli.ok("publish", "--topic", "Data/Stdin", "--no-wait", *AS_ALICE) == "sent (no answer requested)\n"
    )

    first = cli("receive", "SUB.A", "--json").json()
    assert (first["topics"], first["body_hex"], first["seq_num"]) == (["Data/File"], "00ff726177", "5")
    assert cli.ok("receive", "SUB.A", "--wait", "20") == "topic    Data/Stdin\nbody     from stdin\n"

    both = cli("publish", "--topic", "Data/X", "--file", str(tmp_path / "body.bin"), "text")
    assert both.code == 2


def test_partial_authority_in_words_and_json(cli: Cli) -> None:
    assert cli.ok(
        "acl", "add", "--principal", "bob", "--topic", "Secret", "--permission", "publish", "--deny"
    ) == ("added #1: deny bob to publish on Secret\n")
    cli.ok("subscribe", "--topic", "#", "--queue", "SUB.A", *AS_ALICE)

    partial = cli("publish", "--topic", "Open/News", "--topic", "Secret/Plans", "--user-id", "bob", "x")
    assert (partial.code, partial.out) == (
        0,
        "warning\n  MQRCCF_NOT_AUTHORIZED (3081) on topic 'Secret/Plans'\n",
    )
    assert cli.ok("receive", "SUB.A") == "topic    Open/News\nbody     x\n"

    refused = cli("publish", "--topic", "Secret/Plans", "--user-id", "bob", "--json", "x")
    assert refused.code == 1
    assert refused.json() == {
        "completion": "error",
        "responses": [
            {
                "reason": 3081,
                "topic": "Secret/Plans",
                "parameter": None,
                "detail": "'bob' may not publish on 'Secret/Plans'",
            }
        ],
        "attributes": [],
        "hints": [],
    }
    assert cli("receive", "SUB.A").code == 1  # nothing was delivered


def test_subscribe_options_full_response_and_unsubscribe(cli: Cli) -> None:
    out = cli.ok(
        "subscribe",
        "--topic",
        "Stocks/IBM",
        "--queue",
        "SUB.A",
        "--sub-name",
        "ibm",
        "--correl-id",
        "DESK1",
        "--full-response",
        "--new-pubs-only",
        "--persistence",
        "persistent",
        *AS_ALICE,
    )
    assert out.splitlines() == [
        "ok",
        "  Command: RegSub",
        "  Topic: Stocks/IBM",
        "  QMgrName: QM1",
        "  QName: SUB.A",
        "  UserId: alice",
        "  RegOpt: CorrelAsId",
        "  RegOpt: NewPubsOnly",
        "  RegOpt: Pers",
        "  CorrelId: " + b"DESK1".ljust(24, b"\x00").hex().upper(),
        "  SubName: ibm",
    ]
    not_there = cli(
        "unsubscribe", "--topic", "Stocks/HPQ", "--queue", "SUB.A", "--correl-id", "DESK1", *AS_ALICE
    )
    assert (not_there.code, not_there.out) == (
        1,
        "error\n  MQRCCF_NOT_REGISTERED (3073) on topic 'Stocks/HPQ': not registered on 'Stocks/HPQ'\n",
    )
    cli.ok("subscribe", "--topic", "Stocks/HPQ", "--queue", "SUB.A", "--correl-id", "DESK1", *AS_ALICE)

    assert cli.ok("unsubscribe", "--all", "--queue", "SUB.A", "--correl-id", "DESK1", *AS_ALICE) == "ok\n"
    assert cli("subscriptions", "list", "--json").json() == []


def test_request_update_and_delete_publication(cli: Cli) -> None:
    cli.ok("publish", "--topic", "Weather/London", "--retain", "rain", *AS_ALICE)
    cli.ok("subscribe", "--topic", "Weather/#", "--queue", "SUB.A", "--pub-on-req-only", *AS_ALICE)
    assert cli("receive", "SUB.A").code == 1

    assert cli.ok("request-update", "--topic", "Weather/#", "--queue", "SUB.A", *AS_ALICE) == "ok\n"
    assert cli.ok("receive", "SUB.A") == "topic    Weather/London\nbody     rain\n"
    assert cli.ok("delete-publication", "--topic", "Weather/London", *AS_ALICE) == "ok\n"

    none = cli("request-update", "--topic", "Weather/#", "--queue", "SUB.A", *AS_ALICE)
    assert (none.code, none.out) == (
        1,
        "error\n  MQRCCF_NO_RETAINED_MSG (3077) on topic 'Weather/#': "
        "no retained publication on 'Weather/#'\n",
    )
    two = cli("request-update", "--topic", "A", "--topic", "B", "--queue", "SUB.A")
    assert two.code == 2


def test_subscriptions_and_retained_listings(cli: Cli) -> None:
    cli.ok("subscribe", "--topic", "Sport/#", "--queue", "SUB.A", "--inform-if-retained", *AS_ALICE)
    cli.ok("subscribe", "--topic", "News/+", "--queue", "SUB.B", "--user-id", "bob")
    cli.ok("publish", "--topic", "Sport/Golf", "--retain", "par", *AS_ALICE)
    cli.ok("publish", "--topic", "News/Today", "--retain", "headline", *AS_ALICE)

    lines = cli.ok("subscriptions", "list").splitlines()
    assert [line.split() for line in lines] == [
        ["ID", "TOPIC", "QUEUE", "USER", "OPTIONS"],
        ["1", "Sport/#", "SUB.A", "alice", "InformIfRet"],
        ["2", "News/+", "SUB.B", "bob"],
    ]
    (bobs,) = cli("subscriptions", "list", "--user", "bob", "--json").json()
    assert {k: bobs[k] for k in ("id", "topic", "queue", "qmgr", "user_id", "options", "correl_id")} == {
        "id": 2,
        "topic": "News/+",
        "queue": "SUB.B",
        "qmgr": "QM1",
        "user_id": "bob",
        "options": [],
        "correl_id": None,
    }
    assert [r["id"] for r in cli("subscriptions", "list", "--after", "1", "--json").json()] == [2]
    assert [r["topic"] for r in cli("subscriptions", "list", "--topic", "Sport/#", "--json").json()] == [
        "Sport/#"
    ]

    retained = cli.ok("retained", "list").splitlines()
    assert [line.split() for line in retained] == [
        ["ID", "TOPIC", "BODY"],
        ["1", "Sport/Golf", "par"],
        ["2", "News/Today", "headline"],
    ]
    (news,) = cli("retained", "list", "--topic", "News/#", "--json").json()
    assert {k: news[k] for k in ("id", "topic", "sub_point", "body_text", "body_length")} == {
        "id": 2,
        "topic": "News/Today",
        "sub_point": "",
        "body_text": "headline",
        "body_length": 8,
    }


def test_acl_and_groups(cli: Cli) -> None:
    cli.ok(
        "acl",
        "add",
        "--principal",
        "traders",
        "--group",
        "--topic",
        "Stocks",
        "--permission",
        "subscribe",
        "--deny",
    )
    added = cli(
        "acl",
        "add",
        "--principal",
        "bob",
        "--topic",
        "Stocks/IBM",
        "--permission",
        "subscribe",
        "--allow",
        "--json",
    )
    assert added.json() == {
        "id": 2,
        "principal": "bob",
        "kind": "user",
        "topic": "Stocks/IBM",
        "permission": "subscribe",
        "allow": True,
    }
    assert cli.ok("group", "add", "traders", "carol") == "carol added to traders\n"
    assert cli.ok("group", "add", "traders", "carol") == "no change\n"
    assert cli.ok("acl", "list") == (
        "#1: deny group traders to subscribe on Stocks\n"
        "#2: allow bob to subscribe on Stocks/IBM\n"
        "group traders: carol\n"
    )
    refused = cli("acl", "check", "carol", "subscribe", "Stocks/HPQ")  # "may not" exits 1, for scripts
    assert (refused.code, refused.out) == (
        1,
        "carol may not subscribe on Stocks/HPQ: decided by #1: deny group traders to subscribe on Stocks\n",
    )
    assert cli.ok("acl", "check", "dave", "publish", "Stocks/HPQ") == (
        "dave may publish on Stocks/HPQ: decided by the default policy (allow)\n"
    )

    # The running broker applies the rules at its next batch.
    refused = cli("subscribe", "--topic", "Stocks/HPQ", "--queue", "SUB.A", "--user-id", "carol")
    assert (refused.code, refused.out) == (
        1,
        "error\n  MQRCCF_NOT_AUTHORIZED (3081) on topic 'Stocks/HPQ': "
        "'carol' may not subscribe to 'Stocks/HPQ'\n",
    )
    assert cli.ok("group", "remove", "traders", "carol") == "carol removed from traders\n"
    assert cli.ok("subscribe", "--topic", "Stocks/HPQ", "--queue", "SUB.A", "--user-id", "carol") == "ok\n"

    assert cli.ok("acl", "remove", "1") == "removed rule #1\n"
    missing = cli("acl", "remove", "1")
    assert (missing.code, missing.error_line) == (1, "MQRC_UNKNOWN_OBJECT_NAME (2085): no rule #1")
    missing = cli("acl", "remove", "1", "--json")
    assert (missing.code, json.loads(missing.err.splitlines()[-1])) == (
        1,
        {"reason": 2085, "reason_name": "MQRC_UNKNOWN_OBJECT_NAME", "detail": "no rule #1"},
    )
    assert cli("acl", "list", "--json").json() == {
        "rules": [
            {
                "id": 2,
                "principal": "bob",
                "kind": "user",
                "topic": "Stocks/IBM",
                "permission": "subscribe",
                "allow": True,
            }
        ],
        "groups": {},
    }


def test_no_broker_running_times_out_with_the_hint(
    qm: QueueManager, capsys: pytest.CaptureFixture[str]
) -> None:
    service(qm)  # the system queues exist, nobody serves them
    cli = Cli(qm.engine.url.render_as_string(hide_password=False), capsys)
    result = cli("publish", "--topic", "A", "--timeout", "0.3", "x")
    assert result.code == 1
    assert result.error_line == (
        "MQRC_NO_MSG_AVAILABLE (2033): no response from the broker within 0.3 s: is 'broker serve' running"
        " on this database? The Publish stays on SYSTEM.BROKER.DEFAULT.STREAM and takes effect when a"
        " broker routes it"
    )
    assert qm.list_queues("AMQ.*") == []  # the temporary reply queue went with the command


def test_deleting_a_subscribers_queue_names_the_option_that_deregisters_first(cli: Cli) -> None:
    """The README's order: subscribe, then delete the queue; the refusal says what to type."""
    cli.ok("subscribe", "--topic", "Sport/#", "--queue", "SUB.A")
    refused = cli("queue", "delete", "SUB.A")
    assert refused.code == 1
    assert refused.error_line == (
        "MQRC_OBJECT_IN_USE (2042): queue SUB.A receives 1 subscription(s) (Sport/#); deregister them, or "
        "delete the queue with --force, which deregisters them"
    )
    assert cli.ok("queue", "delete", "SUB.A", "--force") == "queue SUB.A deleted\n"
    assert cli.ok("subscriptions", "list", "--json") == "[]\n"


def test_a_refusal_says_why_in_the_brokers_own_words(cli: Cli) -> None:
    """The reason code alone does not say which of its causes it was: the broker's answer does."""
    named = cli(
        "subscribe", "--topic", "Sport/#", "--topic", "News/#", "--queue", "SUB.A", "--sub-name", "n1"
    )
    assert (named.code, named.out) == (
        1,
        "error\n  MQRCCF_SUB_NAME_ERROR (3153): a SubName names one subscription: give one Topic\n",
    )
    cli.ok("subscribe", "--topic", "Sport/#", "--queue", "SUB.A", *AS_ALICE)
    taken = cli("subscribe", "--topic", "News/#", "--queue", "SUB.A", "--user-id", "bob", "--json")
    assert taken.code == 1
    assert taken.json()["responses"] == [
        {
            "reason": 3078,
            "topic": None,
            "parameter": None,
            "detail": "identity SUB.A@QM1 belongs to user 'alice'",
        }
    ]
