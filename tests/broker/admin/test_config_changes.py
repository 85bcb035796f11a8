"""broker.admin.config_changes: what an import changes, one report line each, decided without a
database."""

from __future__ import annotations

from broker.admin.config_changes import changes, problems
from broker.admin.config_file import (
    AclRuleConfig,
    Configuration,
    GroupConfig,
    MqttPrincipalConfig,
    NeighbourConfig,
    QueueConfig,
    RetainedConfig,
    SubscriptionConfig,
    configuration,
    read,
)

TOKEN = "link-secret-0123456789abcdef"
HASH = "scrypt$16384$8$1$00$" + "ab" * 32
SUB = SubscriptionConfig(topic="Sport/#", queue="APP.IN", user="alice")


def current() -> Configuration:
    return configuration(
        "QM1",
        queues=[QueueConfig("APP.IN"), QueueConfig("APP.OUT"), QueueConfig("OLD")],
        system_queues=[QueueConfig("SYSTEM.DEAD.LETTER.QUEUE", max_depth=999_999_999)],
        subscriptions=[SUB],
        retained=[RetainedConfig(topic="Sport/Tennis")],
        acl_rules=[AclRuleConfig(principal="alice", permission="publish", topic="Sport", allow=True)],
        groups=[GroupConfig("traders", ("alice", "bob"))],
        neighbours=[NeighbourConfig("QMB", "http://qmb:8080", TOKEN)],
        mqtt_principals=[MqttPrincipalConfig("sensor1", HASH)],
    )


def lines(wanted: Configuration, *, prune: bool = False) -> list[str]:
    return [change.line() for change in changes(current(), wanted, prune=prune)]


def test_the_same_configuration_changes_nothing() -> None:
    assert changes(current(), current(), prune=True) == []


def test_objects_are_created_altered_and_what_the_file_leaves_out_left() -> None:
    wanted = configuration(
        "QM1",
        queues=[
            QueueConfig("APP.IN"),
            QueueConfig("APP.OUT", description='orders "out"', max_depth=10000, put_enabled=False),
            QueueConfig("APP.NEW"),
        ],
        subscriptions=[SubscriptionConfig(topic="Sport/#", queue="APP.IN", user="bob", options=("Pers",))],
        acl_rules=[AclRuleConfig(principal="alice", permission="publish", topic="Sport", allow=False)],
        groups=[GroupConfig("traders", ("alice", "carol"))],
        neighbours=[NeighbourConfig("QMB", "http://qmb:9090")],
        mqtt_principals=[MqttPrincipalConfig("sensor1", HASH.replace("ab", "cd"))],
    )
    assert lines(wanted) == [
        "create queue APP.NEW",
        'alter queue APP.OUT: description "" -> "orders \\"out\\"", max_depth 5000 -> 10000, '
        "put_enabled true -> false",
        "leave queue OLD: not in the file",
        'alter subscription Sport/# -> APP.IN: user "alice" -> "bob", options [] -> ["Pers"]',
        "alter acl rule user alice publish Sport: allow true -> false",
        'alter group traders: members ["alice", "bob"] -> ["alice", "carol"]',
        'alter neighbour QMB: url "http://qmb:8080" -> "http://qmb:9090"',  # the token is left as it is
        "alter mqtt principal sensor1: password_hash (changed)",  # never shown
    ]


def test_pruning_deletes_what_the_file_leaves_out_but_never_a_system_queue() -> None:
    assert lines(configuration("QM1", retained=[]), prune=True) == [
        "delete queue APP.IN",
        "delete queue APP.OUT",
        "delete queue OLD",
        "delete subscription Sport/# -> APP.IN",
        "delete retained publication Sport/Tennis",
        "delete acl rule user alice publish Sport",
        "delete group traders",
        "delete neighbour QMB",
        "delete mqtt principal sensor1",
    ]


def test_retained_publications_are_compared_only_when_the_file_has_them() -> None:
    assert "delete retained publication Sport/Tennis" not in lines(configuration("QM1"), prune=True)
    wanted = configuration("QM1", retained=[RetainedConfig(topic="Sport/Tennis", body_base64="MS0w")])
    assert 'alter retained publication Sport/Tennis: body_base64 "" -> "MS0w"' in lines(wanted)


def test_a_changed_token_is_reported_but_never_shown() -> None:
    wanted = configuration("QM1", neighbours=[NeighbourConfig("QMB", "http://qmb:8080", TOKEN[::-1])])
    assert "alter neighbour QMB: token (changed)" in lines(wanted)
    assert TOKEN[::-1] not in " ".join(lines(wanted))


def test_a_new_neighbour_needs_its_token_and_a_deleted_queue_no_subscription_of_the_file() -> None:
    wanted = read(
        """\
[[queue]]
name = "APP.OUT"

[[subscription]]
topic = "Sport/#"
queue = "OLD"
user = "alice"

[[neighbour]]
name = "QMC"
url = "http://qmc:8080"
"""
    )
    found = changes(current(), wanted, prune=True)
    assert [str(problem) for problem in problems(found, wanted, "QM1")] == [
        "queue (OLD): not in the file, but subscription Sport/# in the file delivers to it",
        "line 9: neighbour 1 (QMC): this broker has no such neighbour, and the file has no token for it "
        "(export secrets)",
    ]
    assert problems(changes(current(), wanted, prune=False), wanted, "QM1")[0].name == "QMC"
