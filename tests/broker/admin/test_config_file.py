"""broker.admin.config_file: a configuration file read into typed definitions, every problem of it
listed with its place, and the definitions written back as the file's content."""

from __future__ import annotations

import base64
from dataclasses import replace

import pytest

from broker.admin import config_file
from broker.admin.config_file import (
    AclRuleConfig,
    Configuration,
    GroupConfig,
    InvalidConfiguration,
    MqttPrincipalConfig,
    NeighbourConfig,
    Problem,
    QueueConfig,
    RetainedConfig,
    SubscriptionConfig,
    read,
)
from broker.admin.toml_writer import dumps
from broker.protocol.options import RegOpt
from broker.store.rows import retained_from_row, retained_row
from queues.reasons import Reason

HASH = "scrypt$16384$8$1$00112233445566778899aabbccddeeff$" + "ab" * 32
TOKEN = "link-secret-0123456789abcdef"

FILE = f"""\
# a configuration written by hand

[configuration]
format = 1
queue_manager = "QMA"

[[queue]]
name = "APP.OUT"
max_depth = 10000
description = "orders out"

[[queue]]
name = "APP.IN"

[[system_queue]]
name = "SYSTEM.DEAD.LETTER.QUEUE"
max_depth = 999999999

[[subscription]]
topic = "Sport/#"
queue = "APP.IN"
user = "alice"
options = ["Pers", "CorrelAsId"]
correl_id = "ABCD"
sub_identities = ["one", "two"]
exclusive = "two"

[[subscription]]
topic = "News/+"
queue = "REMOTE.Q"
queue_manager = "QMB"
user = "bob"
sub_name = "news"

[[acl_rule]]
principal = "traders"
kind = "group"
permission = "publish"
topic = "Sport"
allow = true

[[group]]
name = "traders"
members = ["zoe", "alice"]

[[neighbour]]
name = "QMB"
url = "http://qmb.example:8080/"
token = "{TOKEN}"

[[mqtt_principal]]
user = "sensor1"
password_hash = "{HASH}"
"""


def test_a_file_reads_as_typed_definitions_each_kind_sorted() -> None:
    config = read(FILE)
    assert config.queue_manager == "QMA"
    assert config.queues == (QueueConfig("APP.IN"), QueueConfig("APP.OUT", "orders out", 10000))
    assert config.system_queues == (QueueConfig("SYSTEM.DEAD.LETTER.QUEUE", max_depth=999_999_999),)
    local, remote = config.subscriptions
    assert local == SubscriptionConfig(
        topic="Sport/#",
        queue="APP.IN",
        user="alice",
        options=("CorrelAsId", "Pers"),  # in bit order, as the broker reads them back
        correl_id="abcd",
        sub_identities=("one", "two"),
        exclusive="two",
    )
    assert (remote.queue_manager, remote.sub_name) == ("QMB", "news")
    assert config.retained is None  # not part of the file: an import leaves them as they are
    assert config.acl_rules == (
        AclRuleConfig(principal="traders", kind="group", permission="publish", topic="Sport", allow=True),
    )
    assert config.groups == (GroupConfig("traders", ("alice", "zoe")),)
    assert config.neighbours == (NeighbourConfig("QMB", "http://qmb.example:8080", TOKEN),)
    assert config.mqtt_principals == (MqttPrincipalConfig("sensor1", HASH),)


def test_the_definitions_written_back_read_as_the_same_configuration() -> None:
    config = read(FILE)
    written = dumps(config_file.document(config, secrets=True))
    assert read(written) == config
    assert written.index('[[queue]]\nname = "APP.IN"') < written.index('name = "APP.OUT"')
    assert "exclusive" in written and "filter" not in written  # None values are left out


def test_every_problem_is_listed_with_its_line_table_entry_and_key() -> None:
    text = """\
[configuration]
format = 2
colour = "blue"

[[queue]]
name = "APP IN"
max_depth = "lots"
maxdepth = 5

[[queue]]
name = "SYSTEM.MINE"
def_priority = 12

[[queue]]
name = "APP.OUT"

[[queue]]
name = "APP.OUT"

[[subscription]]
topic = ""
queue = "APP.IN"
user = "a user with blanks"
options = ["Pers", "DeregAll", "Bogus"]

[[retained]]
topic = "Sport/+"
body_base64 = "not base64!"

[[acl_rule]]
principal = "alice"
permission = "read"
topic = "Sport"

[[neighbour]]
name = "QMB"
url = "ftp://qmb"
token = "short"

[queues]
name = "typo"
"""
    with pytest.raises(InvalidConfiguration) as raised:
        read(text)
    assert [str(problem) for problem in raised.value.problems] == [
        "line 2: configuration: format: this broker reads format 1, not 2",
        "line 3: configuration: colour: unknown key (the keys are format, queue_manager, retained, secrets)",
        "line 6: queue 1 (APP IN): name: 'APP IN' is not a queue name: use 1-48 characters of A-Z a-z 0-9 "
        ". / _ %, not . or ..",
        "line 7: queue 1 (APP IN): max_depth: must be an integer",
        "line 8: queue 1 (APP IN): maxdepth: unknown key (the keys are name, description, max_depth, "
        "max_msg_length, backout_threshold, backout_requeue_q, def_priority, def_persistence, put_enabled, "
        "get_enabled, usage, definition_type, index_type)",
        "line 11: queue 2 (SYSTEM.MINE): name: a SYSTEM. queue goes in [[system_queue]]",
        "line 12: queue 2 (SYSTEM.MINE): def_priority: def_priority=12 is not valid: use an integer from 0 "
        "to 9",
        "line 17: queue 4 (APP.OUT): duplicate of line 14: queue 3 (APP.OUT)",
        "line 21: subscription 1 ( -> APP.IN): topic: empty topic",
        "line 23: subscription 1 ( -> APP.IN): user: principal 'a user with blanks' must be 1 to 12 "
        "printable "
        "ASCII characters without blanks: it is sent as the MQMD UserIdentifier",
        "line 24: subscription 1 ( -> APP.IN): options: Bogus: not RegOpt names",
        "line 27: retained 1 (Sport/+): topic: wildcard in a publication topic",
        "line 28: retained 1 (Sport/+): body_base64: is not base64",
        "line 30: acl_rule 1 (user alice read Sport): allow: is missing",
        "line 32: acl_rule 1 (user alice read Sport): permission: must be publish or subscribe",
        "line 37: neighbour 1 (QMB): url: must be an http(s) URL with a host name or IP address (and an "
        "optional port and path)",
        "line 38: neighbour 1 (QMB): token: a link token must be 16 to 512 printable ASCII characters "
        "without "
        "blanks: it is sent in an HTTP header",
        "line 40: queues: unknown table or key 'queues' (the tables are configuration, queue, system_queue, "
        "subscription, retained, acl_rule, group, neighbour, mqtt_principal)",
    ]
    assert raised.value.reason == Reason.MQRCCF_ATTR_VALUE_ERROR
    assert raised.value.detail.startswith("18 problems: line 2: configuration: format:")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[[queue]\n", "not TOML: Expected ']]' at the end of an array declaration (at line 1, column 8)"),
        ("[queue]\nname = 'A'\n", "line 1: queue: must be an array of tables: write [[queue]]"),
        ("configuration = 1\n", "configuration: must be a table: write [configuration]"),
        (
            "\n\ncolour = 'blue'\n",
            "line 3: colour: unknown table or key 'colour' (the tables are configuration, "
            "queue, system_queue, subscription, retained, acl_rule, group, neighbour, mqtt_principal)",
        ),
        ("queue = [1]\n", "queue 1: must be a table"),
        (
            "[configuration]\nretained = false\n[[retained]]\ntopic = 'a'\n",
            "line 3: retained 1: [[retained]] tables in a file whose [configuration] says retained = false",
        ),
        (
            "[[subscription]]\ntopic = 'a'\nqueue = 'Q'\nuser = 'u'\ncorrel_id = '0102'\n",
            "line 5: subscription 1 (a -> Q (correl_id 0102)): correl_id: a CorrelId goes with the "
            "CorrelAsId option, and only with it",
        ),
        (
            "[[subscription]]\ntopic = 'a'\nqueue = 'SYSTEM.MQTT.0123'\nuser = 'u'\n",
            "line 3: subscription 1 (a -> SYSTEM.MQTT.0123): queue: an MQTT session's subscriptions belong "
            "to its session, not to the "
            "configuration",
        ),
        (
            "[[subscription]]\ntopic = 'a'\nqueue = 'Q'\nuser = 'u'\noptions = ['DeregAll']\n",
            "line 5: subscription 1 (a -> Q): options: a subscription keeps only these options: CorrelAsId, "
            "Local, "
            "NewPubsOnly, PubOnReqOnly, InformIfRet, DupsOK, NonPers, Pers, PersAsPub, PersAsQueue, "
            "VariableUserId",
        ),
        (
            "[[queue]]\nname = 'TMP'\ndefinition_type = 'tempdyn'\n",
            "line 3: queue 1 (TMP): definition_type: a temporary dynamic queue lives only while its creator "
            "holds it open",
        ),
        (
            "[[queue]]\nname = 'A'\ndescription = \"bell \\u0007\"\n",
            "line 3: queue 1 (A): description: holds a control character other than tab, line feed or "
            "carriage return",
        ),
        (
            "[[group]]\nname = 'g'\nmembers = ['a', 'a', 1]\n",
            "line 3: group 1 (g): members: must be an array of strings",
        ),
        (
            "[[group]]\nname = 'g'\nmembers = ['a', 'a']\n",
            "line 3: group 1 (g): members: listed twice: a",
        ),
        (
            "[[group]]\nname = 'g'\n",
            "line 1: group 1 (g): members: a group is its members: list one at least",
        ),
        (
            "[[mqtt_principal]]\nuser = 'u'\npassword_hash = 'secret'\n",
            "line 3: mqtt_principal 1 (u): password_hash: must be a hash as the broker stores it: "
            "scrypt$N$r$p$salt$hash",
        ),
        (
            "[[system_queue]]\nname = 'APP.Q'\n",
            "line 2: system_queue 1 (APP.Q): name: 'APP.Q' is not the name of a SYSTEM. queue (1-48 "
            "characters "
            "of A-Z a-z 0-9 . / _ %, not . or ..)",
        ),
        (
            "[[retained]]\ntopic = 'a'\nfolders = ['<psc><Command>Publish</Command></psc>', '<usr>']\n",
            "line 3: retained 1 (a): folders: the <psc> folder is the broker's, not the publication's",
        ),
    ],
)
def test_each_problem_says_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(InvalidConfiguration) as raised:
        read(text)
    assert str(raised.value.problems[0]) == problem


def test_a_retained_publication_is_built_as_the_broker_keeps_it() -> None:
    wanted = RetainedConfig(
        topic="Sport/Tennis",
        sub_point="Results",
        persistence=1,
        priority=4,
        expiry=600,
        pub_time="20261127150000",
        folders=("<mcd><Msd>jms_text</Msd></mcd>", "<usr><colour>red &amp; blue</colour></usr>"),
        body_format="MQSTR",
        body_ccsid=819,
        body_base64=base64.b64encode("6-4 é".encode("latin-1")).decode(),
    )
    publication = wanted.publication("QM1", 1_800_000_000_000)
    assert publication.message.expiry == 600 and publication.message.priority == 4
    assert publication.publish.topics == ("Sport/Tennis",) and publication.publish.sub_point == "Results"
    assert publication.rfh2.payload == "6-4 é".encode("latin-1")
    assert RetainedConfig.of(publication) == wanted
    # Stored and read back as the store does: the same definition again.
    assert RetainedConfig.of(retained_from_row(_Row(retained_row(publication)))) == wanted


def test_a_subscription_is_the_broker_s_and_back() -> None:
    wanted = read(FILE).subscriptions[0]
    sub = wanted.subscription("QMA", seq=7, created_at=5)
    assert sub.identity.q_mgr == "QMA" and sub.identity.correl_id == b"\xab\xcd"
    assert sub.options == RegOpt.CorrelAsId | RegOpt.Pers and sub.seq == 7
    assert SubscriptionConfig.of(sub, "QMA") == wanted
    assert SubscriptionConfig.of(sub, "OTHER").queue_manager == "QMA"


def test_a_problem_names_its_place_and_an_api_location() -> None:
    problem = Problem("is missing", 4, "acl_rule", 2, None, "allow")
    assert (problem.place, problem.location()) == ("line 4: acl_rule 2: allow", ["acl_rule", "2", "allow"])
    assert str(Problem("not TOML")) == "not TOML"
    config = read(FILE)
    neighbour = config.neighbours[0]
    assert str(config.place(config_file.KIND["neighbour"], neighbour, "no token")) == (
        "line 46: neighbour 1 (QMB): no token"
    )
    assert (
        str(Configuration().place(config_file.KIND["queue"], QueueConfig("X"), "gone")) == "queue (X): gone"
    )


def test_retained_publications_are_part_of_a_file_that_says_so_or_holds_some() -> None:
    assert read("[configuration]\nretained = true\n").retained == ()
    assert read("[[retained]]\ntopic = 'a'\n").retained == (RetainedConfig(topic="a"),)
    assert read("").retained is None
    assert replace(read(""), queue_manager="X") == Configuration("X")


class _Row:
    """A row as SQLAlchemy gives it: its columns as attributes."""

    def __init__(self, values: dict[str, object]) -> None:
        self.__dict__.update(values)


def test_a_subscription_naming_the_reading_queue_manager_is_one_of_its_own() -> None:
    text = "[[subscription]]\ntopic = 'a'\nqueue = 'Q'\nuser = 'u'\nqueue_manager = 'QM1'\n"
    assert read(text, "QM1").subscriptions[0].queue_manager is None
    assert read(text, "QM2").subscriptions[0].queue_manager == "QM1"
    twice = text + text.replace("queue_manager = 'QM1'\n", "")
    with pytest.raises(InvalidConfiguration) as raised:
        read(twice, "QM1")
    assert [str(p) for p in raised.value.problems] == [
        "line 6: subscription 2 (a -> Q): duplicate of line 1: subscription 1 (a -> Q)"
    ]
