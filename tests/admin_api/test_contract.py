"""The API is exactly what its OpenAPI document says: schemathesis, every check it has, over every
operation, against a real ``broker serve --api`` on each database.

Examples, coverage, fuzzing (schema-valid and schema-violating requests) and the stateful phase,
which follows the document's links from the operations that list or create resources to those that
take their ids; the broker is seeded first with one of each (a retained publication, a dead letter,
a subscription), so that those operations reach their logic. Every failure schemathesis can report
fails the test: a 5xx, a response its schema does not allow, a status the document does not list,
a 405 without the right ``Allow``, a schema-valid request refused or a schema-violating one taken.
The seed is fixed, so a run is repeatable; ``broker bench`` is not where this belongs, the suite is.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx

from broker.client import BrokerClient
from broker.core.system import DEFAULT_STREAM
from broker.protocol.options import PubOpt
from queues import DEAD_LETTER_QUEUE, Message
from tests.e2e.processes import BROKER, Brokers, child_environment, free_port, wait_until

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
EXAMPLES = 25
SEED = 20261125


def test_every_operation_keeps_the_contract_of_the_document(database_url: str, tmp_path: Path) -> None:
    brokers = Brokers(database_url, tmp_path)
    try:
        port = free_port()
        # Schemathesis sends bad tokens wanting 401 every time: the sign-in throttle would answer
        # 429 (documented) after the fifth, so it is off here (tests/admin_api/test_signins.py).
        brokers.start(api_port=port, environment={"BROKER_AUTH_THROTTLE_DELAY": "0"})
        created = subprocess.run(
            [str(BROKER), "--db", database_url, "token", "create", "--role", "admin", "--json"],
            capture_output=True,
            text=True,
            env=child_environment(),
            check=True,
        )
        secret = json.loads(created.stdout)["token"]
        base = f"http://127.0.0.1:{port}"
        seed(brokers, base, secret)
        run = subprocess.run(
            [
                str(SCHEMATHESIS),
                "run",
                f"{base}/openapi.json",
                "--checks",
                "all",
                "--header",
                f"Authorization: Bearer {secret}",
                "--max-examples",
                str(EXAMPLES),
                "--seed",
                str(SEED),
                "--generation-database",
                "none",
                "--no-color",
            ],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=900,
        )
        assert run.returncode == 0, run.stdout[-8000:]
        selected = re.search(r"Selected: (\d+)/(\d+)\s+Tested: (\d+)", run.stdout)
        assert selected is not None, run.stdout[-3000:]
        assert selected[1] == selected[2] == selected[3]  # every operation of the document
        assert re.search(r"(\d+) generated, \1 passed", run.stdout), run.stdout[-3000:]
        for process in brokers.processes:
            assert process.alive, process.tail()
            assert process.lines() and not [line for line in process.lines() if line.get("level") == "error"]
    finally:
        brokers.close()


def seed(brokers: Brokers, base: str, secret: str) -> None:
    """One resource of each kind the stateful phase follows links to."""
    qm = brokers.qm
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {secret}"}, timeout=30) as api:
        wait_until(lambda: api.get("/api/v1/status").json()["routers"] != [], 30, "the router's report")
        qm.define_queue("SCORES")
        made = api.post("/api/v1/subscriptions", json={"topics": ["Sport/#"], "queue": "SCORES"})
        assert made.status_code == 201, made.text
    with BrokerClient(qm, timeout=30) as client:
        assert client.publish(["Sport/Soccer"], "1-0", options=PubOpt.RetainPub).completion == "ok"
    qm.put(DEFAULT_STREAM, Message(body=b"not an MQRFH2 message"))  # dead-lettered by the router
    wait_until(lambda: qm.depth(DEAD_LETTER_QUEUE) == 1, 30, "the poison message's dead letter")
