"""broker.admin.config_backup on both databases: a populated broker exported and imported into a
new one exports the same; a second import changes nothing; a file with problems, or a dry run,
changes nothing; secrets only when asked; pruning; and a running router routes by what an import
restored."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import migrations
from broker import store
from broker.admin import config_backup, neighbours
from broker.admin.config_file import InvalidConfiguration
from broker.client import BrokerClient
from broker.core.authority import AclRule, Permission, PrincipalKind
from broker.core.effects import AddSubscription
from broker.core.state import BrokerConfig
from broker.core.subscription import Identity, Subscription, SubscriptionKey
from broker.network import links
from broker.protocol.options import PubOpt, RegOpt
from broker.service.provision import ensure_system_queues
from broker.store import mqtt
from queues import DEAD_LETTER_QUEUE, Message, QueueManager, make_engine
from queues.ids import now_ms
from tests.conftest import PostgresDatabases
from tests.e2e.harness import ServiceThread, service

TOKEN = "link-secret-0123456789abcdef"
URL = "http://qmb.example:8080"


@pytest.fixture
def restored(database_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[QueueManager]:
    """A new broker QM1 on a database of the same kind, as ``broker db upgrade`` leaves it."""
    if database_url.startswith("sqlite"):
        url = f"sqlite:///{tmp_path / 'restored.db'}"
    else:
        postgres: PostgresDatabases = request.getfixturevalue("postgres")
        url = postgres.create()
    engine = make_engine(url)
    migrations.upgrade(engine)
    QueueManager.create(engine, "QM1")
    manager = QueueManager(engine, appl_name="pytest", user_id="tester")
    ensure_system_queues(manager)
    yield manager
    manager.close()
    if not database_url.startswith("sqlite"):
        postgres.drop(url)


def subscription(
    queue: str,
    topic: str,
    *,
    q_mgr: str = "QM1",
    correl_id: bytes | None = None,
    user_id: str = "alice",
    options: int = 0,
    **fields: Any,
) -> Subscription:
    key = SubscriptionKey(Identity(q_mgr, queue, correl_id), "", topic)
    return Subscription(key, user_id, options, created_at=1, **fields)


@pytest.fixture
def populated(qm: QueueManager) -> QueueManager:
    """A broker with one of everything its configuration holds, and what it leaves out."""
    ensure_system_queues(qm)
    qm.alter_queue(DEAD_LETTER_QUEUE, max_msg_length=300_000)
    qm.define_queue("APP.BOQ", put_enabled=False, usage="normal")
    qm.define_queue(
        "APP.IN",
        max_depth=100,
        description='orders "in"',
        backout_threshold=3,
        backout_requeue_q="APP.BOQ",
        def_priority=4,
        def_persistence=1,
        index_type="correlid",
    )
    qm.define_queue("TMP.REPLY", definition_type="tempdyn")  # comes and goes with its creator
    qm.define_queue(mqtt.QUEUE_PREFIX + "0123")  # an MQTT session's
    subscriptions = [
        subscription(
            "APP.IN",
            "Sport/#",
            options=int(RegOpt.CorrelAsId | RegOpt.Pers),
            correl_id=b"\x01\x02",
            seq=1,
            sub_name="sport",
            sub_user_data="data é",
            members=("one", "two"),
            exclusive="two",
        ),
        subscription("REMOTE.Q", "News/+", q_mgr="QMB", user_id="bob", seq=2),
        subscription("APP.IN", "Proxy/#", origin="QMB", seq=3),  # a neighbour's proxy
        subscription("TMP.REPLY", "Temp", temporary=True, seq=4),
        subscription(mqtt.QUEUE_PREFIX + "0123", "mqtt/#", seq=5),
    ]
    with qm.unit_of_work() as uow:
        conn = uow.connection
        store.StateStore(BrokerConfig("QM1")).write(conn, [AddSubscription(sub) for sub in subscriptions])
        for principal, allow in (("alice", True), ("bob", False)):
            rule = AclRule(principal, PrincipalKind.USER, "Sport/#", Permission.PUBLISH, allow)
            store.add_acl_rule(conn, rule)
        store.set_group_member(conn, "traders", "bob", True)
        store.set_group_member(conn, "traders", "alice", True)
        mqtt.set_password(conn, "sensor1", b"secret", now_ms())
    neighbours.add_neighbour(qm, "QMB", URL, TOKEN, check_topology=False)
    return qm


def exported(qm: QueueManager, **options: bool) -> str:
    """The export without its first comment line, the date."""
    return config_backup.export_text(qm, **options).split("\n", 1)[1]


def test_an_export_imported_into_a_new_broker_exports_the_same(
    populated: QueueManager, restored: QueueManager
) -> None:
    text = config_backup.export_text(populated, secrets=True)
    assert "TMP.REPLY" not in text and mqtt.QUEUE_PREFIX not in text and "Proxy/#" not in text
    assert 'name = "QMB"\nurl' in text and 'name = "QMB"\ndescription' not in text  # no transmission queue
    report = config_backup.import_text(restored, text)
    assert report.lines() == [
        "create queue APP.BOQ",
        "create queue APP.IN",
        "alter system queue SYSTEM.DEAD.LETTER.QUEUE: max_msg_length 4194304 -> 300000",
        "create subscription Sport/# -> APP.IN (correl_id 0102)",
        "create subscription News/+ -> REMOTE.Q at QMB",
        "create acl rule user alice publish Sport/#",
        "create acl rule user bob publish Sport/#",
        "create group traders",
        "create neighbour QMB",
        "create mqtt principal sensor1",
    ]
    assert exported(restored, secrets=True) == exported(populated, secrets=True)
    again = config_backup.import_text(restored, text)
    assert (again.changes, again.lines()) == ([], ["no changes"])
    with restored.reading() as conn:
        assert mqtt.verify_password(b"secret", mqtt.password_hash(conn, "sensor1") or "")
        assert links.get_link(conn, "QMB") is not None
    assert restored.inquire_queue("QMB").usage == "xmitq"  # defined with the neighbour


def test_secrets_are_left_out_unless_asked_for_and_hashes_are_always_in(populated: QueueManager) -> None:
    plain, secret = exported(populated), exported(populated, secrets=True)
    assert TOKEN not in plain and "secrets = false" in plain
    assert f'token = "{TOKEN}"' in secret and "secrets = true" in secret
    assert plain.count('password_hash = "scrypt$') == secret.count('password_hash = "scrypt$') == 1
    assert "secret" not in plain.replace("secrets = false", "")  # the password itself is never there


def test_a_file_without_tokens_alters_an_existing_neighbour_and_leaves_its_token(
    populated: QueueManager,
) -> None:
    text = exported(populated).replace(URL, "http://qmb.example:9090")
    assert config_backup.import_text(populated, text).lines() == [
        'alter neighbour QMB: url "http://qmb.example:8080" -> "http://qmb.example:9090"'
    ]
    with populated.reading() as conn:
        link = links.get_link(conn, "QMB")
    assert link is not None and (link.url, link.token) == ("http://qmb.example:9090", TOKEN)


def test_a_file_with_problems_changes_nothing_and_lists_them_all(
    populated: QueueManager, restored: QueueManager
) -> None:
    good = exported(populated)
    bad = good.replace("max_depth = 100\n", 'max_depth = "100"\n').replace('topic = "News/+"', 'topic = ""')
    bad += '\n[[queue]]\nname = "APP.NEW"\nbogus = true\n'
    before = exported(restored)
    with pytest.raises(InvalidConfiguration) as raised:
        config_backup.import_text(restored, bad)
    found = [str(problem) for problem in raised.value.problems]
    assert [problem.split(": ", 3)[2] for problem in found] == ["max_depth", "topic", "bogus"]
    # the valid parts (APP.BOQ, the rules...) were not applied either, nor was the neighbour,
    # whose token the file does not hold
    assert exported(restored) == before
    with pytest.raises(InvalidConfiguration) as raised:
        config_backup.import_text(restored, good)
    assert [str(p) for p in raised.value.problems] == [
        f"line {good.count(chr(10), 0, good.index('[[neighbour]]')) + 1}: neighbour 1 (QMB): this broker has "
        "no such neighbour, and the file has no token for it (export secrets)"
    ]
    assert exported(restored) == before


def test_a_dry_run_reports_the_changes_and_makes_none(populated: QueueManager) -> None:
    text = exported(populated).replace("max_depth = 100\n", "max_depth = 10000\n")
    before = exported(populated)
    report = config_backup.import_text(populated, text, dry_run=True)
    assert report.lines() == ["alter queue APP.IN: max_depth 100 -> 10000"]
    assert exported(populated) == before
    assert config_backup.import_text(populated, text).lines() == report.lines()
    assert populated.inquire_queue("APP.IN").max_depth == 10000


def test_what_the_file_leaves_out_is_left_unless_pruned(populated: QueueManager) -> None:
    text = exported(populated, secrets=True)
    without = text.replace('[[queue]]\nname = "APP.BOQ"', '[[queue]]\nname = "APP.BOQ2"')
    assert config_backup.import_text(populated, without, dry_run=True).lines() == [
        "create queue APP.BOQ2",
        "leave queue APP.BOQ: not in the file",
    ]
    populated.alter_queue("APP.BOQ", put_enabled=True)
    populated.put("APP.BOQ", Message(body=b"keep me"))
    with pytest.raises(InvalidConfiguration) as raised:
        config_backup.import_text(populated, without, prune=True)
    assert [str(p) for p in raised.value.problems] == [
        "queue (APP.BOQ): not in the file, but it holds 1 messages: purge it first"
    ]
    populated.purge_queue("APP.BOQ")
    empty = "[configuration]\nretained = true\n"
    assert config_backup.import_text(populated, empty, prune=True).lines() == [
        "delete queue APP.BOQ",
        "delete queue APP.IN",
        "delete subscription Sport/# -> APP.IN (correl_id 0102)",
        "delete subscription News/+ -> REMOTE.Q at QMB",
        "delete acl rule user alice publish Sport/#",
        "delete acl rule user bob publish Sport/#",
        "delete group traders",
        "delete neighbour QMB",
        "delete mqtt principal sensor1",
    ]
    assert [q.name for q in populated.list_queues("APP.*")] == []
    with populated.reading() as conn:
        left = [sub.key.topic for _, sub in store.list_subscriptions(conn, store.SubscriptionFilter())]
        assert (store.list_acl_rules(conn), store.list_groups(conn), links.list_links(conn)) == ([], {}, [])
    assert sorted(left) == ["Proxy/#", "Temp", "mqtt/#"]  # none of them configuration
    assert populated.inquire_queue(DEAD_LETTER_QUEUE).max_msg_length == 300_000  # never pruned


def test_a_running_router_routes_by_what_an_import_restored(qm: QueueManager, restored: QueueManager) -> None:
    """Publications (retained ones with their folders) made through a real router, exported and
    imported: the new broker's router delivers to the restored subscription, and a new
    subscriber gets the restored retained publication, folders and all."""
    routing = ServiceThread(service(qm, batch_size=50)).start()
    try:
        qm.define_queue("SCORES")
        with BrokerClient(qm, timeout=30) as client:
            assert client.subscribe("Sport/#", "SCORES").ok
            done = client.publish(
                "Sport/Tennis", "6-4", options=PubOpt.RetainPub, folders=["<usr><court>centre</court></usr>"]
            )
            assert done is not None and done.completion == "ok"
    finally:
        routing.stop()
    text = config_backup.export_text(qm, retained=True)
    assert "<usr><court>centre</court></usr>" in text
    config_backup.import_text(restored, text)
    assert exported(restored, retained=True) == exported(qm, retained=True)
    routing = ServiceThread(service(restored, batch_size=50)).start()
    try:
        restored.define_queue("LATE")
        with BrokerClient(restored, timeout=30) as client:
            assert client.publish("Sport/Soccer", "1-0").completion == "ok"  # type: ignore[union-attr]
            delivered = client.receive("SCORES", wait=10)
            assert (delivered.topic, delivered.text) == ("Sport/Soccer", "1-0")
            assert client.subscribe("Sport/Tennis", "LATE").ok
            late = client.receive("LATE", wait=10)
    finally:
        routing.stop()
    assert (late.topic, late.text, late.retained) == ("Sport/Tennis", "6-4", False)
    assert "<usr><court>centre</court></usr>" in late.folders
