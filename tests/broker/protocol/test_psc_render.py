"""broker.protocol.psc.render and escape_text: the ``<psc>`` folders the broker writes (deliveries, forwards,
proxy commands) parse back to the same command, and look as IBM's samples write them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple, replace
from typing import TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.protocol import psc
from broker.protocol.options import DelOpt, PubOpt, RegOpt
from broker.protocol.psc import DeletePub, DeregSub, Publish, RegSub, ReqUpdate, escape_text, parse, render
from queues.names import NAME_PATTERN

CORREL = bytes.fromhex("414D5120514D31202020202020202020" + "0102030405060708")


def _xml_char(c: str) -> bool:
    code = ord(c)
    return c in "\t\n\r" or 0x20 <= code <= 0xD7FF or 0xE000 <= code <= 0xFFFD or code >= 0x10000


chars = st.characters(exclude_categories=["Cs"]).filter(_xml_char)
text = st.text(chars, max_size=12)
non_blank = text.filter(lambda t: t != "" and not t.isspace())
token = text.map(str.strip).filter(bool)  # values the parser strips (PubTime, SeqNum, Filter)
level = st.one_of(
    st.sampled_from(["Sport", "", " ", "a b", "USA#", "a+b", "&<>", "x\r\ny"]),
    text.filter(lambda t: "/" not in t),
)
concrete_level = level.filter(lambda t: t not in ("#", "+"))
concrete_topic = st.lists(concrete_level, min_size=1, max_size=4).map("/".join).filter(bool)
pattern = (
    st.lists(st.one_of(concrete_level, st.sampled_from(["#", "+"])), min_size=1, max_size=4)
    .map("/".join)
    .filter(bool)
)
name = st.from_regex(NAME_PATTERN, fullmatch=True)
correl_id = st.binary(min_size=24, max_size=24).filter(any)

T = TypeVar("T")


def maybe(values: st.SearchStrategy[T]) -> st.SearchStrategy[T | None]:
    return st.none() | values


def flags(kind: type, members: Sequence[int]) -> st.SearchStrategy[int]:
    return st.lists(st.sampled_from(members), unique=True).map(lambda chosen: kind(sum(chosen)))


PERSISTENCE = [RegOpt.NonPers, RegOpt.Pers, RegOpt.PersAsPub, RegOpt.PersAsQueue]
REGSUB_FREE = [
    RegOpt.CorrelAsId,
    RegOpt.Local,
    RegOpt.NewPubsOnly,
    RegOpt.PubOnReqOnly,
    RegOpt.InformIfRet,
    RegOpt.DupsOK,
    RegOpt.NoAlter,
    RegOpt.VariableUserId,
    RegOpt.Locked,
]


@st.composite
def publishes(draw: st.DrawFn) -> Publish:
    return Publish(
        topics=tuple(draw(st.lists(concrete_topic, min_size=1, max_size=3))),
        sub_point=draw(maybe(non_blank)),
        options=PubOpt(draw(flags(PubOpt, list(PubOpt)))),
        pub_time=draw(maybe(token)),
        seq_num=draw(maybe(token)),
        q_mgr_name=draw(maybe(name)),
        q_name=draw(maybe(name)),
        correl_id=draw(maybe(correl_id)),
        folder="",
    )


@st.composite
def regsubs(draw: st.DrawFn) -> RegSub:
    options = draw(flags(RegOpt, REGSUB_FREE)) | draw(st.sampled_from([0, *PERSISTENCE]))
    options |= draw(st.sampled_from([0, RegOpt.JoinShared, RegOpt.JoinExcl]))
    sub_name = draw(maybe(non_blank))
    if sub_name is not None and draw(st.booleans()):
        options |= RegOpt.AddName
    topics = draw(st.lists(pattern, min_size=1, max_size=3))
    if len(topics) == 1 and draw(st.booleans()):
        options |= RegOpt.FullResp
    return RegSub(
        topics=tuple(topics),
        sub_point=draw(maybe(non_blank)),
        filter=draw(maybe(token)),
        q_mgr_name=draw(maybe(name)),
        q_name=draw(maybe(name)),
        options=RegOpt(options),
        sub_name=sub_name,
        sub_identity=draw(maybe(non_blank)),
        sub_user_data=draw(maybe(text)),
        correl_id=draw(maybe(correl_id)),
        folder="",
    )


@st.composite
def deregsubs(draw: st.DrawFn) -> DeregSub:
    options = draw(flags(RegOpt, [RegOpt.CorrelAsId, RegOpt.VariableUserId]))
    sub_identity = draw(maybe(non_blank))
    if sub_identity is not None and draw(st.booleans()):
        options |= RegOpt.LeaveOnly
    sub_name = draw(maybe(non_blank))
    dereg_all = draw(st.booleans())
    if dereg_all:
        options |= RegOpt.DeregAll
    topics = draw(st.lists(pattern, min_size=0 if dereg_all or sub_name else 1, max_size=3))
    if len(topics) <= 1 and not dereg_all and draw(st.booleans()):
        options |= RegOpt.FullResp
    return DeregSub(
        topics=tuple(topics),
        sub_point=draw(maybe(non_blank)),
        filter=draw(maybe(token)),
        q_mgr_name=draw(maybe(name)),
        q_name=draw(maybe(name)),
        options=RegOpt(options),
        sub_name=sub_name,
        sub_identity=sub_identity,
        sub_user_data=draw(maybe(text)),
        correl_id=draw(maybe(correl_id)),
        folder="",
    )


@st.composite
def requpdates(draw: st.DrawFn) -> ReqUpdate:
    return ReqUpdate(
        topic=draw(pattern),
        sub_point=draw(maybe(non_blank)),
        filter=draw(maybe(token)),
        q_mgr_name=draw(maybe(name)),
        q_name=draw(maybe(name)),
        options=RegOpt(draw(flags(RegOpt, [RegOpt.CorrelAsId, RegOpt.VariableUserId]))),
        sub_name=draw(maybe(non_blank)),
        correl_id=draw(maybe(correl_id)),
        folder="",
    )


@st.composite
def deletepubs(draw: st.DrawFn) -> DeletePub:
    return DeletePub(
        topics=tuple(draw(st.lists(pattern, min_size=1, max_size=3))),
        sub_point=draw(maybe(non_blank)),
        options=DelOpt(draw(flags(DelOpt, [DelOpt.Local]))),
        q_mgr_name=draw(maybe(name)),
        q_name=draw(maybe(name)),
        folder="",
    )


commands = st.one_of(publishes(), regsubs(), deregsubs(), requpdates(), deletepubs())


@settings(max_examples=300, deadline=None)
@given(commands)
def test_parse_of_render_gives_the_command_back(command: psc.Command) -> None:
    folder = render(command)
    assert parse(folder) == replace(command, folder=folder)


@settings(max_examples=100, deadline=None)
@given(commands)
def test_render_ignores_the_folder_it_was_parsed_from(command: psc.Command) -> None:
    folder = render(command)
    assert render(parse(folder)) == folder
    assert render(replace(command, folder="<psc>anything</psc>")) == folder


# --- exact text ----------------------------------------------------------------------------------------


def test_a_delivered_publication_renders_as_ibm_writes_it() -> None:
    command = Publish(
        topics=("Sport/Soccer", "Sport/Rugby"),
        sub_point="Pounds",
        options=PubOpt.IsRetainedPub,
        pub_time="20260101120000",
        seq_num="42",
        q_mgr_name=None,
        q_name=None,
        correl_id=None,
        folder="",
    )
    assert render(command) == (
        "<psc><Command>Publish</Command><PubOpt>IsRetainedPub</PubOpt><Topic>Sport/Soccer</Topic>"
        "<Topic>Sport/Rugby</Topic><SubPoint>Pounds</SubPoint><PubTime>20260101120000</PubTime>"
        "<SeqNum>42</SeqNum></psc>"
    )


def test_options_are_one_element_per_name_in_bit_order() -> None:
    command = RegSub(
        topics=("a",),
        sub_point=None,
        filter=None,
        q_mgr_name="QM1",
        q_name="Q",
        options=RegOpt.PersAsPub | RegOpt.CorrelAsId | RegOpt.InformIfRet,
        sub_name="n",
        sub_identity="i",
        sub_user_data="",
        correl_id=CORREL,
        folder="",
    )
    assert render(command) == (
        "<psc><Command>RegSub</Command><RegOpt>CorrelAsId</RegOpt><RegOpt>InformIfRet</RegOpt>"
        "<RegOpt>PersAsPub</RegOpt><Topic>a</Topic><QMgrName>QM1</QMgrName><QName>Q</QName>"
        "<SubName>n</SubName><SubIdentity>i</SubIdentity><SubUserData></SubUserData>"
        f"<CorrelId>{CORREL.hex().upper()}</CorrelId></psc>"
    )


def test_publish_local_is_written_as_its_name() -> None:
    command = parse("<psc><Command>Publish</Command><PubOpt>Local</PubOpt><Topic>a</Topic></psc>")
    assert render(command) == "<psc><Command>Publish</Command><PubOpt>Local</PubOpt><Topic>a</Topic></psc>"


def test_req_update_and_delete_pub_render_their_one_shape() -> None:
    assert render(parse("<psc><Command>ReqUpdate</Command><Topic>a/#</Topic></psc>")) == (
        "<psc><Command>ReqUpdate</Command><Topic>a/#</Topic></psc>"
    )
    assert render(parse("<psc><DelOpt>4</DelOpt><Topic>a</Topic><Command>DeletePub</Command></psc>")) == (
        "<psc><Command>DeletePub</Command><DelOpt>Local</DelOpt><Topic>a</Topic></psc>"
    )


def test_a_deregsub_without_topics_renders_none() -> None:
    command = parse("<psc><Command>DeregSub</Command><RegOpt>DeregAll</RegOpt><QName>Q</QName></psc>")
    assert (
        render(command) == "<psc><Command>DeregSub</Command><RegOpt>DeregAll</RegOpt><QName>Q</QName></psc>"
    )


# --- escape_text ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("plain", "plain"),
        ("a&b", "a&amp;b"),
        ("<psc>", "&lt;psc&gt;"),
        ("]]>", "]]&gt;"),
        ("line\r\nbreak", "line&#13;\nbreak"),
        ("tab\there", "tab\there"),
        ("quotes \" '", "quotes \" '"),
        ("nul\x00bell\x07", "nulbell"),
        ("\ufffe\uffff\ud800x", "x"),
        ("&amp;", "&amp;amp;"),
    ],
)
def test_escape_text(raw: str, escaped: str) -> None:
    assert escape_text(raw) == escaped


def test_characters_xml_cannot_carry_are_dropped_from_a_rendered_topic() -> None:
    command = parse("<psc><Command>Publish</Command><Topic>ab</Topic></psc>")
    assert isinstance(command, Publish)
    dirty = replace(command, topics=("a\x01b",))
    assert render(dirty) == "<psc><Command>Publish</Command><Topic>ab</Topic></psc>"


@given(text)
def test_escaped_text_parses_back_exactly(value: str) -> None:
    folder = (
        f"<psc><Command>RegSub</Command><Topic>t</Topic><SubUserData>{escape_text(value)}</SubUserData></psc>"
    )
    command = parse(folder)
    assert isinstance(command, RegSub)
    assert command.sub_user_data == value


@pytest.mark.parametrize(
    "command",
    [
        psc.Publish(("Sport/Soccer",)),
        psc.RegSub(("Sport/#",), q_name="SUBQ"),
        psc.DeregSub(("Sport/#",), q_name="SUBQ"),
        psc.ReqUpdate("Sport/#", q_name="SUBQ"),
        psc.DeletePub(("Sport/Soccer",)),
    ],
)
def test_a_command_built_from_its_topics_alone_means_what_a_folder_without_the_rest_means(
    command: psc.Command,
) -> None:
    """The fields left out default to what the absent elements mean: the command renders
    to a folder that parses back to it."""
    parsed = psc.parse(psc.render(command))
    assert replace(parsed, folder="") == command


def test_regsub_and_deregsub_share_one_shape_but_stay_two_commands() -> None:
    registration = psc.RegSub(("a",), q_name="Q", sub_name="s")
    deregistration = psc.DeregSub(("a",), q_name="Q", sub_name="s")
    assert astuple(registration) == astuple(deregistration)
    assert not isinstance(deregistration, psc.RegSub) and not isinstance(registration, psc.DeregSub)
