from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.protocol import psc
from broker.protocol.options import DelOpt, PubOpt, RegOpt
from broker.protocol.psc import (
    MAX_FOLDER_BYTES,
    MAX_TOPIC_LENGTH,
    MAX_TOPICS,
    DeletePub,
    DeregSub,
    PscError,
    Publish,
    RegSub,
    ReqUpdate,
    command_name,
    parse,
)

CORREL_HEX = "414D5120514D31202020202020202020" + "0102030405060708"
CORREL = bytes.fromhex(CORREL_HEX)


def folder(*elements: tuple[str, str]) -> str:
    return "<psc>" + "".join(f"<{name}>{value}</{name}>" for name, value in elements) + "</psc>"


def refused(text: str) -> PscError:
    with pytest.raises(PscError) as caught:
        parse(text)
    return caught.value


def assert_refused(
    text: str, reason: int, *, parameter: str | None = None, topic: str | None = None
) -> PscError:
    error = refused(text)
    assert (error.reason, error.parameter, error.topic) == (reason, parameter, topic)
    return error


# --- IBM samples, verbatim --------------------------------------------------------------------


def test_ibm_sample_regsub() -> None:
    text = (
        "<psc><Command>RegSub</Command><RegOpt>PubOnReqOnly</RegOpt><RegOpt>CorrelAsId</RegOpt>"
        "<Topic>Sport/Soccer/LatestScore/#</Topic></psc>"
    )
    assert parse(text) == RegSub(
        topics=("Sport/Soccer/LatestScore/#",),
        sub_point=None,
        filter=None,
        q_mgr_name=None,
        q_name=None,
        options=RegOpt.PubOnReqOnly | RegOpt.CorrelAsId,
        sub_name=None,
        sub_identity=None,
        sub_user_data=None,
        correl_id=None,
        folder=text,
    )


def test_ibm_sample_publish() -> None:
    text = (
        "<psc><Command>Publish</Command><PubOpt>RetainPub</PubOpt>"
        "<Topic>Sport/Soccer/LatestScore/Chelsea 4 Sotton 1</Topic></psc>"
    )
    assert parse(text) == Publish(
        topics=("Sport/Soccer/LatestScore/Chelsea 4 Sotton 1",),
        sub_point=None,
        options=PubOpt.RetainPub,
        pub_time=None,
        seq_num=None,
        q_mgr_name=None,
        q_name=None,
        correl_id=None,
        folder=text,
    )


def test_ibm_sample_requpdate() -> None:
    text = (
        "<psc><Command>ReqUpdate</Command><RegOpt>CorrelAsId</RegOpt>"
        "<Topic>Sport/Soccer/LatestScore/#</Topic></psc>"
    )
    assert parse(text) == ReqUpdate(
        topic="Sport/Soccer/LatestScore/#",
        sub_point=None,
        filter=None,
        q_mgr_name=None,
        q_name=None,
        options=RegOpt.CorrelAsId,
        sub_name=None,
        correl_id=None,
        folder=text,
    )


def test_ibm_sample_deletepub() -> None:
    text = (
        "<psc><Command>DeletePub</Command><Topic>Sport/Soccer/State/LatestScore/Team1 Team2</Topic>"
        "<DelOpt>Local</DelOpt></psc>"
    )
    assert parse(text) == DeletePub(
        topics=("Sport/Soccer/State/LatestScore/Team1 Team2",),
        sub_point=None,
        options=DelOpt.Local,
        q_mgr_name=None,
        q_name=None,
        folder=text,
    )


def test_pymqi_sample_regsub_with_queue_names() -> None:
    text = (
        "<psc><Command>RegSub</Command><Topic>$topictree/topiccat/topic</Topic>"
        "<QMgrName>DebugQM</QMgrName><QName>PUBOUT</QName><RegOpt>PersAsPub</RegOpt></psc>"
    )
    command = parse(text)
    assert isinstance(command, RegSub)
    assert command.topics == ("$topictree/topiccat/topic",)
    assert (command.q_mgr_name, command.q_name) == ("DebugQM", "PUBOUT")
    assert command.options == RegOpt.PersAsPub


# --- every property of every command -----------------------------------------------------------


def test_publish_with_every_property() -> None:
    text = folder(
        ("Command", "Publish"),
        ("Topic", "Topic 1"),
        ("Topic", "Topic 1 enhanced"),
        ("SubPoint", "Pounds"),
        ("PubOpt", "RetainPub"),
        ("PubOpt", "OtherSubsOnly"),
        ("PubOpt", "CorrelAsId"),
        ("PubOpt", "Local"),
        ("PubOpt", "IsRetainedPub"),
        ("PubTime", " 2026112112000000 "),
        ("SeqNum", "42"),
        ("QMgrName", "QM1"),
        ("QName", "PUB.REPLY"),
        ("CorrelId", CORREL_HEX),
    )
    assert parse(text) == Publish(
        topics=("Topic 1", "Topic 1 enhanced"),
        sub_point="Pounds",
        options=PubOpt.RetainPub
        | PubOpt.OtherSubsOnly
        | PubOpt.CorrelAsId
        | PubOpt.Local
        | PubOpt.IsRetainedPub,
        pub_time="2026112112000000",
        seq_num="42",
        q_mgr_name="QM1",
        q_name="PUB.REPLY",
        correl_id=CORREL,
        folder=text,
    )


def test_regsub_with_every_property() -> None:
    text = folder(
        ("Command", "RegSub"),
        ("Topic", "Sport/+/Results"),
        ("SubPoint", "Pounds"),
        ("Filter", " Body.Price &gt; 10 "),
        ("QMgrName", "QM1"),
        ("QName", "SUB.Q"),
        ("RegOpt", "Local"),
        ("RegOpt", "InformIfRet"),
        ("RegOpt", "Pers"),
        ("RegOpt", "AddName"),
        ("RegOpt", "FullResp"),
        ("RegOpt", "JoinShared"),
        ("SubName", "My Sub"),
        ("SubIdentity", "member 1"),
        ("SubUserData", "  user data  "),
        ("CorrelId", CORREL_HEX.lower()),
    )
    assert parse(text) == RegSub(
        topics=("Sport/+/Results",),
        sub_point="Pounds",
        filter="Body.Price > 10",
        q_mgr_name="QM1",
        q_name="SUB.Q",
        options=RegOpt.Local
        | RegOpt.InformIfRet
        | RegOpt.Pers
        | RegOpt.AddName
        | RegOpt.FullResp
        | RegOpt.JoinShared,
        sub_name="My Sub",
        sub_identity="member 1",
        sub_user_data="  user data  ",
        correl_id=CORREL,
        folder=text,
    )


def test_deregsub_with_every_property() -> None:
    text = folder(
        ("Command", "DeregSub"),
        ("Topic", "a/b"),
        ("Topic", "c/#"),
        ("SubPoint", "Pounds"),
        ("Filter", "x = 1"),
        ("QMgrName", "QM1"),
        ("QName", "SUB.Q"),
        ("RegOpt", "CorrelAsId"),
        ("RegOpt", "LeaveOnly"),
        ("RegOpt", "VariableUserId"),
        ("SubName", "My Sub"),
        ("SubIdentity", "member 1"),
        ("SubUserData", "data"),
        ("CorrelId", CORREL_HEX),
    )
    assert parse(text) == DeregSub(
        topics=("a/b", "c/#"),
        sub_point="Pounds",
        filter="x = 1",
        q_mgr_name="QM1",
        q_name="SUB.Q",
        options=RegOpt.CorrelAsId | RegOpt.LeaveOnly | RegOpt.VariableUserId,
        sub_name="My Sub",
        sub_identity="member 1",
        sub_user_data="data",
        correl_id=CORREL,
        folder=text,
    )


def test_requpdate_with_every_property() -> None:
    text = folder(
        ("Command", "ReqUpdate"),
        ("Topic", "Sport/#"),
        ("SubPoint", "Pounds"),
        ("Filter", "x = 1"),
        ("QMgrName", "QM1"),
        ("QName", "SUB.Q"),
        ("RegOpt", "CorrelAsId"),
        ("RegOpt", "VariableUserId"),
        ("SubName", "My Sub"),
        ("CorrelId", CORREL_HEX),
    )
    assert parse(text) == ReqUpdate(
        topic="Sport/#",
        sub_point="Pounds",
        filter="x = 1",
        q_mgr_name="QM1",
        q_name="SUB.Q",
        options=RegOpt.CorrelAsId | RegOpt.VariableUserId,
        sub_name="My Sub",
        correl_id=CORREL,
        folder=text,
    )


def test_deletepub_with_every_property() -> None:
    text = folder(
        ("Command", "DeletePub"),
        ("Topic", "a/+"),
        ("Topic", "b/#"),
        ("SubPoint", "Pounds"),
        ("DelOpt", "Local"),
        ("DelOpt", "None"),
        ("QMgrName", "QM1"),
        ("QName", "PUB.Q"),
    )
    assert parse(text) == DeletePub(
        topics=("a/+", "b/#"),
        sub_point="Pounds",
        options=DelOpt.Local,
        q_mgr_name="QM1",
        q_name="PUB.Q",
        folder=text,
    )


# --- options per command (table in section 2.4) ------------------------------------------------

REGSUB_VALID = [
    "CorrelAsId",
    "Local",
    "NewPubsOnly",
    "PubOnReqOnly",
    "InformIfRet",
    "DupsOK",
    "NonPers",
    "Pers",
    "PersAsPub",
    "PersAsQueue",
    "AddName",
    "NoAlter",
    "FullResp",
    "JoinShared",
    "JoinExcl",
    "VariableUserId",
    "Locked",
]
DEREGSUB_VALID = ["CorrelAsId", "DeregAll", "FullResp", "LeaveOnly", "VariableUserId"]
REQUPDATE_VALID = ["CorrelAsId", "VariableUserId"]
IDENTITY = (("SubName", "s"), ("SubIdentity", "i"))


def registration_cases(command: str, valid: list[str]) -> list[tuple[str, str, bool]]:
    return [(command, member.name, member.name in valid) for member in RegOpt if member.name]


@pytest.mark.parametrize(
    ("command", "option", "valid"),
    registration_cases("RegSub", REGSUB_VALID)
    + registration_cases("DeregSub", DEREGSUB_VALID)
    + registration_cases("ReqUpdate", REQUPDATE_VALID),
)
def test_each_registration_option_on_each_command(command: str, option: str, valid: bool) -> None:
    identity = IDENTITY[:1] if command == "ReqUpdate" else IDENTITY
    text = folder(("Command", command), ("Topic", "t"), ("RegOpt", option), *identity)
    if valid:
        assert parse(text).options == RegOpt[option]
    else:
        assert_refused(text, 3083, parameter="RegOpt")


@pytest.mark.parametrize("option", ["CorrelAsId", "RetainPub", "OtherSubsOnly", "IsRetainedPub"])
def test_each_publication_option(option: str) -> None:
    command = parse(folder(("Command", "Publish"), ("Topic", "t"), ("PubOpt", option)))
    assert command.options == PubOpt[option]


def test_publication_local_by_name_only() -> None:
    assert parse(folder(("Command", "Publish"), ("Topic", "t"), ("PubOpt", "Local"))).options == (
        PubOpt.Local
    )
    assert_refused(
        folder(("Command", "Publish"), ("Topic", "t"), ("PubOpt", str(0x20000))),
        3084,
        parameter="PubOpt",
    )


@pytest.mark.parametrize("option", ["NoReg", "8", "InformIfRet", "Anon", "junk", "64"])
def test_invalid_publication_options(option: str) -> None:
    text = folder(("Command", "Publish"), ("Topic", "t"), ("PubOpt", option))
    assert_refused(text, 3084, parameter="PubOpt")


@pytest.mark.parametrize("option", ["RetainPub", "CorrelAsId", "1", "junk", "local"])
def test_invalid_delete_options(option: str) -> None:
    text = folder(("Command", "DeletePub"), ("Topic", "t"), ("DelOpt", option))
    assert_refused(text, 3087, parameter="DelOpt")


@pytest.mark.parametrize("option", ["Anon", "DirectReq", "InclStreamName", "2", "128", "Bogus"])
def test_rfh1_only_and_unknown_registration_options(option: str) -> None:
    text = folder(("Command", "RegSub"), ("Topic", "t"), ("RegOpt", option))
    assert_refused(text, 3083, parameter="RegOpt")


def test_decimal_options_and_repeats_are_ored() -> None:
    decimal = parse(folder(("Command", "RegSub"), ("Topic", "t"), ("RegOpt", "257")))
    assert decimal.options == RegOpt.CorrelAsId | RegOpt.InformIfRet
    mixed = parse(
        folder(
            ("Command", "RegSub"),
            ("RegOpt", " 1 "),
            ("RegOpt", "CorrelAsId"),
            ("RegOpt", "None"),
            ("RegOpt", "\n  InformIfRet\n"),
            ("RegOpt", "16"),
            ("Topic", "t"),
        )
    )
    assert mixed.options == RegOpt.CorrelAsId | RegOpt.InformIfRet | RegOpt.NewPubsOnly
    publish = parse(folder(("Command", "Publish"), ("Topic", "t"), ("PubOpt", "3")))
    assert publish.options == PubOpt.CorrelAsId | PubOpt.RetainPub


def test_no_options_is_zero_of_the_right_kind() -> None:
    command = parse(folder(("Command", "DeletePub"), ("Topic", "t")))
    assert command.options == 0
    assert isinstance(command.options, DelOpt)


# --- option combinations (sections 2.7, 2.8) ---------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        ("NonPers", "Pers"),
        ("Pers", "PersAsPub"),
        ("PersAsPub", "PersAsQueue"),
        ("NonPers", "PersAsQueue"),
        (str(0x400 | 0x800),),
        ("JoinShared", "JoinExcl"),
    ],
)
def test_conflicting_registration_options(options: tuple[str, ...]) -> None:
    text = folder(("Command", "RegSub"), ("Topic", "t"), *(("RegOpt", o) for o in options))
    assert_refused(text, 3083, parameter="RegOpt")


def test_add_name_needs_sub_name() -> None:
    text = folder(("Command", "RegSub"), ("Topic", "t"), ("RegOpt", "AddName"))
    assert_refused(text, 3083, parameter="RegOpt")
    named = parse(text.replace("</psc>", "<SubName>n</SubName></psc>"))
    assert named.options == RegOpt.AddName


@pytest.mark.parametrize("command", ["RegSub", "DeregSub"])
def test_full_response_with_several_topics(command: str) -> None:
    text = folder(("Command", command), ("Topic", "a"), ("Topic", "b"), ("RegOpt", "FullResp"))
    assert_refused(text, 3083, parameter="RegOpt")
    single = folder(("Command", command), ("Topic", "a"), ("RegOpt", "FullResp"))
    assert parse(single).options == RegOpt.FullResp


def test_deregsub_full_response_with_deregister_all() -> None:
    text = folder(("Command", "DeregSub"), ("RegOpt", "DeregAll"), ("RegOpt", "FullResp"))
    assert_refused(text, 3083, parameter="RegOpt")


def test_leave_only_needs_sub_identity() -> None:
    text = folder(("Command", "DeregSub"), ("Topic", "t"), ("RegOpt", "LeaveOnly"))
    assert_refused(text, 3083, parameter="RegOpt")


# --- properties --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "element"),
    [
        ("Publish", "Filter"),
        ("Publish", "RegOpt"),
        ("Publish", "DelOpt"),
        ("Publish", "SubName"),
        ("Publish", "SubIdentity"),
        ("Publish", "SubUserData"),
        ("RegSub", "PubOpt"),
        ("RegSub", "DelOpt"),
        ("RegSub", "PubTime"),
        ("RegSub", "SeqNum"),
        ("DeregSub", "PubOpt"),
        ("ReqUpdate", "SubIdentity"),
        ("ReqUpdate", "SubUserData"),
        ("ReqUpdate", "PubOpt"),
        ("DeletePub", "RegOpt"),
        ("DeletePub", "PubOpt"),
        ("DeletePub", "Filter"),
        ("DeletePub", "CorrelId"),
        ("DeletePub", "SubName"),
    ],
)
def test_property_not_valid_for_the_command(command: str, element: str) -> None:
    text = folder(("Command", command), ("Topic", "t"), (element, "x"))
    assert_refused(text, 2337, parameter=element)


@pytest.mark.parametrize("element", ["Foo", "StreamName", "MQPSTopic", "topic", "Completion"])
def test_unknown_property(element: str) -> None:
    text = folder(("Command", "Publish"), ("Topic", "t"), (element, "x"))
    assert_refused(text, 2337, parameter=element)


@pytest.mark.parametrize(
    ("command", "element"),
    [
        ("Publish", "SubPoint"),
        ("Publish", "QName"),
        ("Publish", "QMgrName"),
        ("Publish", "PubTime"),
        ("Publish", "SeqNum"),
        ("Publish", "CorrelId"),
        ("RegSub", "Filter"),
        ("RegSub", "SubName"),
        ("RegSub", "SubIdentity"),
        ("RegSub", "SubUserData"),
        ("DeregSub", "SubPoint"),
        ("ReqUpdate", "Topic"),
        ("ReqUpdate", "Filter"),
        ("DeletePub", "QName"),
    ],
)
def test_non_repeatable_property_twice(command: str, element: str) -> None:
    text = folder(("Command", command), ("Topic", "t"), (element, "a"), (element, "a"))
    assert_refused(text, 2338, parameter=element)


def test_command_twice() -> None:
    text = folder(("Command", "Publish"), ("Command", "Publish"), ("Topic", "t"))
    assert_refused(text, 2338, parameter="Command")


def test_missing_command() -> None:
    assert_refused(folder(("Topic", "t")), 2339, parameter="Command")
    assert_refused("<psc/>", 2339, parameter="Command")


@pytest.mark.parametrize("name", ["RegPub", "DeregPub", "publish", "Subscribe", "", "Publish X"])
def test_unknown_command(name: str) -> None:
    assert_refused(folder(("Command", name), ("Topic", "t")), 2336, parameter="Command")


@pytest.mark.parametrize("command", ["Publish", "RegSub", "DeletePub", "ReqUpdate", "DeregSub"])
def test_missing_topic(command: str) -> None:
    assert_refused(folder(("Command", command)), 2339, parameter="Topic")


def test_deregsub_without_topic_when_deregister_all_or_sub_name() -> None:
    everything = parse(folder(("Command", "DeregSub"), ("RegOpt", "DeregAll")))
    assert isinstance(everything, DeregSub)
    assert (everything.topics, everything.options) == ((), RegOpt.DeregAll)
    on_subpoint = parse(folder(("Command", "DeregSub"), ("RegOpt", "64"), ("SubPoint", "P")))
    assert (on_subpoint.topics, on_subpoint.sub_point) == ((), "P")
    named = parse(folder(("Command", "DeregSub"), ("SubName", "JMS:QM1:client:sub")))
    assert (named.topics, named.sub_name) == ((), "JMS:QM1:client:sub")


def test_values_are_stripped_but_topics_kept_exactly() -> None:
    text = folder(
        ("Command", "\n  RegSub \t"),
        ("Topic", " spaced / topic "),
        ("QName", "  SUB.Q  "),
        ("QMgrName", " QM1 "),
        ("RegOpt", "  CorrelAsId  "),
        ("SubPoint", " Pounds "),
    )
    command = parse(text)
    assert isinstance(command, RegSub)
    assert command.topics == (" spaced / topic ",)
    assert (command.q_name, command.q_mgr_name) == ("SUB.Q", "QM1")
    assert command.options == RegOpt.CorrelAsId
    assert command.sub_point == " Pounds "


def test_blank_values_mean_defaults() -> None:
    text = folder(
        ("Command", "RegSub"),
        ("Topic", "t"),
        ("QName", "   "),
        ("QMgrName", ""),
        ("SubPoint", ""),
        ("Filter", "  "),
    )
    command = parse(text)
    assert isinstance(command, RegSub)
    assert (command.q_name, command.q_mgr_name, command.sub_point, command.filter) == (
        None,
        None,
        None,
        None,
    )
    publish = parse(folder(("Command", "Publish"), ("Topic", "t"), ("PubTime", " "), ("SeqNum", "")))
    assert (publish.pub_time, publish.seq_num) == (None, None)


def test_empty_sub_user_data_is_kept() -> None:
    command = parse(folder(("Command", "RegSub"), ("Topic", "t"), ("SubUserData", "")))
    assert command.sub_user_data == ""


def test_layout_escapes_cdata_comments_and_padding() -> None:
    text = (
        "<psc>\n  <Command>Publish</Command>\n  <!-- a comment -->\n"
        "  <Topic>a&amp;b&lt;c&gt;&quot;d&apos;&#233;</Topic>\n"
        "  <Topic><![CDATA[x<y&z]]></Topic>\n"
        "  <Topic>split<!-- hidden -->here</Topic>\n"
        "  <?ignored instruction?>\n"
        '  <PubOpt dt="string">RetainPub</PubOpt>\n'
        "</psc>\n   \x00\x00\x00"
    )
    command = parse(text)
    assert isinstance(command, Publish)
    assert command.topics == ("a&b<c>\"d'é", "x<y&z", "splithere")
    assert command.options == PubOpt.RetainPub
    assert command.folder == text


def test_xml_declaration_without_encoding_is_accepted() -> None:
    command = parse('<?xml version="1.0"?>' + folder(("Command", "Publish"), ("Topic", "t")))
    assert command.topics == ("t",)


# --- topics (section 4.1) ----------------------------------------------------------------------


@pytest.mark.parametrize("command", ["Publish", "RegSub", "DeregSub", "ReqUpdate", "DeletePub"])
def test_empty_topic(command: str) -> None:
    assert_refused(folder(("Command", command), ("Topic", "")), 3072, parameter="Topic", topic="")


@pytest.mark.parametrize("topic", ["#", "+", "Sport/#", "+/Results", "Sport/+/Results", "a/#/b"])
def test_wildcard_level_in_publication(topic: str) -> None:
    text = folder(("Command", "Publish"), ("Topic", "ok"), ("Topic", topic))
    assert_refused(text, 3072, parameter="Topic", topic=topic)


@pytest.mark.parametrize("topic", ["USA#", "USA+", "a+b/c", "Sport/#Results", "#a/+b", "C++"])
def test_wildcard_characters_inside_a_level_are_literal(topic: str) -> None:
    assert parse(folder(("Command", "Publish"), ("Topic", topic))).topics == (topic,)


@pytest.mark.parametrize("command", ["RegSub", "DeregSub", "ReqUpdate", "DeletePub"])
def test_wildcards_allowed_outside_publish(command: str) -> None:
    text = folder(("Command", command), ("Topic", "+/Alabama/#"))
    command_object = parse(text)
    topics = (command_object.topic,) if isinstance(command_object, ReqUpdate) else command_object.topics
    assert topics == ("+/Alabama/#",)


def test_topic_length_limit() -> None:
    longest = "x" * MAX_TOPIC_LENGTH
    assert parse(folder(("Command", "Publish"), ("Topic", longest))).topics == (longest,)
    too_long = "y" * (MAX_TOPIC_LENGTH + 1)
    error = refused(folder(("Command", "RegSub"), ("Topic", too_long)))
    assert (error.reason, error.parameter, error.topic) == (3072, "Topic", "y" * 256)


def test_error_topic_is_the_first_offending_one() -> None:
    text = folder(("Command", "Publish"), ("Topic", "a"), ("Topic", "b/+"), ("Topic", "#"))
    assert_refused(text, 3072, parameter="Topic", topic="b/+")


def test_topic_count_limit() -> None:
    topics = [("Topic", f"t{n}") for n in range(MAX_TOPICS)]
    assert len(parse(folder(("Command", "RegSub"), *topics)).topics) == MAX_TOPICS
    text = folder(("Command", "RegSub"), *topics, ("Topic", "one/more"))
    assert_refused(text, 2337, parameter="Topic")


# --- queue names, CorrelId, identities ---------------------------------------------------------


@pytest.mark.parametrize("name", ["Q" * 49, "BAD NAME", "Q*", "Q-1", "Qé", ".", ".."])
def test_invalid_queue_names(name: str) -> None:
    base = (("Command", "RegSub"), ("Topic", "t"))
    assert_refused(folder(*base, ("QName", name)), 3076, parameter="QName")
    assert_refused(folder(*base, ("QMgrName", name)), 3074, parameter="QMgrName")


def test_longest_queue_names() -> None:
    command = parse(folder(("Command", "Publish"), ("Topic", "t"), ("QName", "Q" * 48)))
    assert command.q_name == "Q" * 48


@pytest.mark.parametrize(
    "value",
    [
        "",
        "  ",
        CORREL_HEX[:-2],
        CORREL_HEX + "00",
        "0x" + CORREL_HEX[2:],
        "zz" + CORREL_HEX[2:],
        CORREL_HEX[:24] + " " + CORREL_HEX[24:47],
        "AMQ QM1",
    ],
)
def test_invalid_correl_id(value: str) -> None:
    text = folder(("Command", "RegSub"), ("Topic", "t"), ("CorrelId", value))
    assert_refused(text, 2337, parameter="CorrelId")


def test_zero_correl_id() -> None:
    text = folder(("Command", "Publish"), ("Topic", "t"), ("CorrelId", "0" * 48))
    assert_refused(text, 3080, parameter="CorrelId")


def test_correl_id_is_stripped_and_case_insensitive() -> None:
    text = folder(("Command", "ReqUpdate"), ("Topic", "t"), ("CorrelId", f" {CORREL_HEX.lower()}\n"))
    assert parse(text).correl_id == CORREL


@pytest.mark.parametrize("value", ["", "   "])
def test_blank_sub_name(value: str) -> None:
    text = folder(("Command", "RegSub"), ("Topic", "t"), ("SubName", value))
    assert_refused(text, 3153, parameter="SubName")


@pytest.mark.parametrize("value", ["", " ", "i" * 129])
def test_bad_sub_identity(value: str) -> None:
    text = folder(("Command", "RegSub"), ("Topic", "t"), ("SubIdentity", value))
    assert_refused(text, 3154, parameter="SubIdentity")


def test_longest_sub_identity() -> None:
    text = folder(("Command", "RegSub"), ("Topic", "t"), ("SubIdentity", "i" * 128))
    assert parse(text).sub_identity == "i" * 128


# --- order of checks: the first error is the one reported ---------------------------------------


def test_structure_before_command() -> None:
    assert_refused(folder(("Bogus", "x")), 2337, parameter="Bogus")


def test_command_before_properties_and_options() -> None:
    text = folder(("Command", "RegPub"), ("Filter", "x"), ("RegOpt", "Bogus"))
    assert_refused(text, 2336, parameter="Command")


def test_options_before_topics_and_names() -> None:
    text = folder(("Command", "RegSub"), ("RegOpt", "Bogus"), ("QName", "bad name"))
    assert_refused(text, 3083, parameter="RegOpt")


def test_topics_before_queue_names_before_correl_id() -> None:
    base = (("Command", "Publish"), ("CorrelId", "0" * 48), ("QMgrName", "bad name"))
    assert_refused(folder(*base, ("Topic", "#")), 3072, parameter="Topic", topic="#")
    assert_refused(folder(*base, ("Topic", "t"), ("QName", "x y")), 3076, parameter="QName")
    assert_refused(folder(*base, ("Topic", "t")), 3074, parameter="QMgrName")


# --- hostile and malformed XML ------------------------------------------------------------------

BILLION_LAUGHS = (
    '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
    + "".join(
        f'<!ENTITY lol{n} "{("&lol" + (str(n - 1) if n > 1 else "") + ";") * 10}">' for n in range(1, 10)
    )
    + "]><psc><Command>Publish</Command><Topic>&lol9;</Topic></psc>"
)
HOSTILE = [
    BILLION_LAUGHS,
    '<!DOCTYPE psc [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
    "<psc><Command>Publish</Command><Topic>&x;</Topic></psc>",
    '<!DOCTYPE psc [<!ENTITY x SYSTEM "http://127.0.0.1:9/x">]>'
    "<psc><Command>Publish</Command><Topic>&x;</Topic></psc>",
    '<!DOCTYPE psc SYSTEM "http://127.0.0.1:9/psc.dtd"><psc><Command>Publish</Command></psc>',
    '<!DOCTYPE psc [<!ENTITY % p SYSTEM "file:///dev/zero"> %p;]><psc/>',
    "<!DOCTYPE psc><psc><Command>Publish</Command><Topic>t</Topic></psc>",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_doctype_refused_before_the_xml_parser_sees_it(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*_: object) -> None:
        raise AssertionError("libxml2 was handed a DOCTYPE")

    monkeypatch.setattr(psc.etree, "fromstring", never)
    started = time.perf_counter()
    assert_refused(text, 2337)
    assert time.perf_counter() - started < 0.05


def test_entities_without_a_dtd_are_malformed() -> None:
    assert_refused(folder(("Command", "Publish"), ("Topic", "&x;")), 2337)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "not xml",
        "<psc>",
        "<psc><Command>Publish</Command>",
        "<psc><Command>Publish</Topic></psc>",
        "<psc></psc><psc></psc>",
        "<psc>\x01</psc>",
        "<psc><Topic>\ud800</Topic></psc>",
        '<?xml version="1.0" encoding="UTF-8"?><psc/>',
        "<pscr><Completion>ok</Completion></pscr>",
        "<PSC><Command>Publish</Command></PSC>",
        '<psc xmlns="urn:x"><Command>Publish</Command></psc>',
        '<a:psc xmlns:a="urn:x"><Command>Publish</Command></a:psc>',
        "<mcd><Msd>jms_text</Msd></mcd>",
        "<psc>loose<Command>Publish</Command><Topic>t</Topic></psc>",
    ],
)
def test_malformed_or_foreign_folders(text: str) -> None:
    assert_refused(text, 2337)


def test_loose_text_after_a_property_names_it() -> None:
    text = "<psc><Command>Publish</Command>loose<Topic>t</Topic></psc>"
    assert_refused(text, 2337, parameter="Command")


def test_nested_element_in_a_property() -> None:
    text = "<psc><Command>Publish</Command><Topic>a<b>c</b></Topic></psc>"
    assert_refused(text, 2337, parameter="Topic")


def test_deep_nesting() -> None:
    text = "<psc><Topic>" + "<a>" * 10_000 + "</a>" * 10_000 + "</Topic></psc>"
    assert_refused(text, 2337)
    shallow = "<psc><Topic>" + "<a>" * 100 + "</a>" * 100 + "</Topic></psc>"
    assert_refused(shallow, 2337, parameter="Topic")


def test_folder_size_limit_counts_utf8_bytes() -> None:
    topics = [("Topic", "€" * 10_000) for _ in range(8)]  # 3 bytes each: 240,000 bytes
    assert len(parse(folder(("Command", "RegSub"), *topics)).topics) == 8
    bigger = folder(("Command", "RegSub"), *topics, ("Topic", "€" * 10_000))
    assert len(bigger) < MAX_FOLDER_BYTES < len(bigger.encode())
    assert_refused(bigger, 2337)


def test_oversize_folder_refused_unparsed(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*_: object) -> None:
        raise AssertionError("oversize folder was parsed")

    monkeypatch.setattr(psc.etree, "fromstring", never)
    padding = " " * MAX_FOLDER_BYTES
    assert_refused("<psc><Command>Publish</Command>" + padding + "</psc>", 2337)


# --- command_name -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "name"),
    [
        (folder(("Command", "Publish"), ("Topic", "t")), "Publish"),
        (folder(("Topic", "t"), ("Command", " RegSub\n")), "RegSub"),
        (folder(("Command", "RegPub")), "RegPub"),
        (BILLION_LAUGHS, "Publish"),
        ("<psc><Topic>t</Topic></psc>", None),
        ("<psc><Command></Command></psc>", None),
        ("garbage", None),
        ("", None),
    ],
)
def test_command_name(text: str, name: str | None) -> None:
    assert command_name(text) == name


def test_command_name_of_non_text() -> None:
    assert command_name(b"<psc><Command>Publish</Command></psc>") is None  # type: ignore[arg-type]
    assert command_name(None) is None  # type: ignore[arg-type]


# --- properties: parse never raises anything but PscError ---------------------------------------

VALID_FOLDERS = [
    folder(("Command", "Publish"), ("PubOpt", "RetainPub"), ("Topic", "Sport/Soccer")),
    folder(
        ("Command", "RegSub"),
        ("RegOpt", "257"),
        ("Topic", "a/#"),
        ("QName", "Q1"),
        ("CorrelId", CORREL_HEX),
        ("SubName", "n"),
    ),
    folder(("Command", "DeregSub"), ("RegOpt", "DeregAll"), ("SubIdentity", "i")),
    folder(("Command", "ReqUpdate"), ("Topic", "+"), ("Filter", "a &lt; 1")),
    folder(("Command", "DeletePub"), ("DelOpt", "Local"), ("Topic", "t")),
]
XML_PIECES = st.sampled_from(
    [
        "<",
        ">",
        "/",
        "&",
        "&amp;",
        "&#0;",
        "&#x10FFFF;",
        "<![CDATA[",
        "]]>",
        "<!--",
        "-->",
        "<?",
        "?>",
        "<!DOCTYPE",
        "<Topic>",
        "</Topic>",
        "<RegOpt>",
        "</RegOpt>",
        "<Command>",
        "</Command>",
        "<psc>",
        "</psc>",
        "#",
        "+",
        "0",
        "\x00",
        "\ud800",
        " ",
        "\n",
        "xmlns='urn:x'",
    ]
)
MUTATIONS = st.lists(
    st.tuples(
        st.sampled_from(["insert", "delete", "replace"]),
        st.floats(min_value=0, max_value=1, exclude_max=True),
        st.one_of(XML_PIECES, st.text(max_size=3)),
    ),
    min_size=1,
    max_size=6,
)


PSC_REASONS = {2336, 2337, 2338, 2339, 3072, 3074, 3076, 3080, 3083, 3084, 3087, 3153, 3154}


def parse_or_refuse(text: str) -> None:
    try:
        parse(text)
    except PscError as error:
        assert error.reason in PSC_REASONS


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=200))
def test_random_text_only_raises_psc_error(text: str) -> None:
    parse_or_refuse(text)
    parse_or_refuse("<psc>" + text + "</psc>")
    command_name(text)


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(VALID_FOLDERS), MUTATIONS)
def test_mutated_valid_folders_only_raise_psc_error(
    text: str, mutations: list[tuple[str, float, str]]
) -> None:
    for action, where, piece in mutations:
        at = int(where * (len(text) + 1))
        if action == "insert":
            text = text[:at] + piece + text[at:]
        elif action == "delete":
            text = text[:at] + text[at + len(piece) :]
        else:
            text = text[:at] + piece + text[at + len(piece) :]
    parse_or_refuse(text)
    command_name(text)
