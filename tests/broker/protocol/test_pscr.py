from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree

from broker.protocol.pscr import (
    PscrError,
    Response,
    ResponseItem,
    error,
    ok,
    parse_folders,
    to_folders,
    warning,
)
from queues.reasons import Reason

ECHO = "<psc><Command>RegSub</Command><Topic>topic1</Topic><Topic>topic2</Topic></psc>"


# --- writing: exact strings ---------------------------------------------------------------------


def test_ok() -> None:
    assert to_folders(ok()) == ("<pscr><Completion>ok</Completion></pscr>",)


def test_full_response_attributes_in_order() -> None:
    response = ok(
        [
            ("Command", "RegSub"),
            ("Topic", "MyTopic"),
            ("QMgrName", "QM1"),
            ("QName", "SUB.Q"),
            ("UserId", "Fred"),
            ("RegOpt", "CorrelAsId"),
            ("RegOpt", "FullResp"),
        ]
    )
    assert to_folders(response) == (
        "<pscr><Completion>ok</Completion><Command>RegSub</Command><Topic>MyTopic</Topic>"
        "<QMgrName>QM1</QMgrName><QName>SUB.Q</QName><UserId>Fred</UserId>"
        "<RegOpt>CorrelAsId</RegOpt><RegOpt>FullResp</RegOpt></pscr>",
    )


def test_warning_one_response_per_item_then_the_echo() -> None:
    response = warning(
        [
            ResponseItem(Reason.MQRCCF_NOT_AUTHORIZED, "topic1"),
            ResponseItem(3081, "topic2"),
        ],
        ECHO,
    )
    assert to_folders(response) == (
        "<pscr><Completion>warning</Completion>"
        "<Response><Reason>3081</Reason><Topic>topic1</Topic></Response>"
        "<Response><Reason>3081</Reason><Topic>topic2</Topic></Response></pscr>",
        ECHO,
    )


def test_error_with_parameter_extension() -> None:
    response = error(ResponseItem(3083, parameter="RegOpt"), ECHO)
    assert to_folders(response) == (
        "<pscr><Completion>error</Completion>"
        "<Response><Reason>3083</Reason><Parameter>RegOpt</Parameter></Response></pscr>",
        ECHO,
    )


def test_error_with_topic_and_parameter_and_no_echo() -> None:
    response = error(ResponseItem(3072, topic="", parameter="Topic"), None)
    assert to_folders(response) == (
        "<pscr><Completion>error</Completion><Response><Reason>3072</Reason><Topic></Topic>"
        "<Parameter>Topic</Parameter></Response></pscr>",
    )


def test_error_with_the_brokers_reason_in_words() -> None:
    """``<Detail>``, last in its ``<Response>``: what the reason code alone cannot say."""
    response = error(ResponseItem(3078, detail="identity Q@QM1 belongs to user 'bob' & <co>"), ECHO)
    folders = to_folders(response)
    assert folders[0] == (
        "<pscr><Completion>error</Completion><Response><Reason>3078</Reason>"
        "<Detail>identity Q@QM1 belongs to user 'bob' &amp; &lt;co&gt;</Detail></Response></pscr>"
    )
    assert parse_folders(folders) == response


def test_ibm_filter_error_shape() -> None:
    assert to_folders(error(ResponseItem(3150), ECHO))[0] == (
        "<pscr><Completion>error</Completion><Response><Reason>3150</Reason></Response></pscr>"
    )


def test_echo_is_returned_verbatim() -> None:
    garbage = "<psc><Command>Publish</Command><Topic>a & b</psc>"
    assert to_folders(error(ResponseItem(2337), garbage))[1] == garbage


# --- writing: escaping --------------------------------------------------------------------------


def test_markup_characters_are_escaped() -> None:
    (pscr,) = to_folders(ok([("Topic", "a<b>&c\"d'e é 日本 \U0001f600")]))
    assert pscr == (
        "<pscr><Completion>ok</Completion><Topic>a&lt;b&gt;&amp;c\"d'e é 日本 \U0001f600</Topic></pscr>"
    )
    assert etree.fromstring(pscr)[1].text == "a<b>&c\"d'e é 日本 \U0001f600"


def test_carriage_return_survives_parsing() -> None:
    (pscr,) = to_folders(error(ResponseItem(3072, topic="a\r\nb\rc"), None))
    assert "<Topic>a&#13;\nb&#13;c</Topic>" in pscr
    assert parse_folders([pscr]).items[0].topic == "a\r\nb\rc"


def test_characters_xml_cannot_carry_are_stripped() -> None:
    topic = "a\x00b\x01c\x08d\x0be\x0cf\x1fg\ud800h\udfffi\ufffej\uffffk\tl\nm"
    (pscr,) = to_folders(error(ResponseItem(3072, topic=topic), None))
    assert "<Topic>abcdefghijk\tl\nm</Topic>" in pscr
    assert parse_folders([pscr]).items[0].topic == "abcdefghijk\tl\nm"


# --- shape rules --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda: Response("OK"),
        lambda: Response("failed", (ResponseItem(1),)),
        lambda: Response("ok", (ResponseItem(3081),)),
        lambda: Response("ok", echoed_psc=ECHO),
        lambda: warning([], ECHO),
        lambda: Response("error"),
        lambda: Response("error", (ResponseItem(3081), ResponseItem(3081))),
        lambda: Response("warning", (ResponseItem(3081),), (("Command", "RegSub"),)),
        lambda: ok([("Completion", "ok")]),
        lambda: ok([("Response", "x")]),
        lambda: ok([("1Topic", "x")]),
        lambda: ok([("a b", "x")]),
        lambda: ok([("", "x")]),
        lambda: ok([("a<b", "x")]),
    ],
)
def test_responses_ibm_clients_would_reject_cannot_be_built(build: object) -> None:
    with pytest.raises(PscrError) as caught:
        build()  # type: ignore[operator]
    assert caught.value.reason == 2337


# --- reading ------------------------------------------------------------------------------------


def test_parse_ibm_documented_shapes() -> None:
    assert parse_folders(["<pscr><Completion>ok</Completion></pscr>"]) == ok()
    misspelt = "<pscr><Completion>error</Completion><Response><Reason>3150</Reason></Reponse></pscr>"
    assert parse_folders([misspelt, ECHO]) == error(ResponseItem(3150), ECHO)
    laid_out = (
        "<pscr><Completion>warning</Completion>\n"
        "      <Response><Reason>3081</Reason><Topic>topic1</Topic></Response>\n"
        "      <Response><Reason>3081</Reason><Topic>topic2</Topic></Reponse ></pscr>   "
    )
    assert parse_folders([laid_out, ECHO]) == warning(
        [ResponseItem(3081, "topic1"), ResponseItem(3081, "topic2")], ECHO
    )


def test_parse_ibm_full_response_sample() -> None:
    text = (
        "<pscr><Completion>ok</Completion><Command>RegSub</Command><Topic>MyTopic</Topic>"
        "<QMgrName>QM1</QMgrName><QName>SUB.Q</QName><UserId>Fred</UserId></pscr>"
    )
    assert parse_folders([text]).attributes == (
        ("Command", "RegSub"),
        ("Topic", "MyTopic"),
        ("QMgrName", "QM1"),
        ("QName", "SUB.Q"),
        ("UserId", "Fred"),
    )


def test_parse_is_lenient_about_layout_order_and_other_folders() -> None:
    folders = [
        "<mcd><Msd>none</Msd></mcd>",
        "  " + ECHO,
        "\n<pscr>\n <Completion> error </Completion>\n"
        " <Response>\n  <Reason> 3083 </Reason>\n  <ErrorId>7</ErrorId>\n"
        "  <Parameter>RegOpt</Parameter>\n </Response>\n</pscr>\x00\x00",
        "<usr><Colour>blue</Colour></usr>",
        "<psc><Command>Other</Command></psc>",
    ]
    assert parse_folders(folders) == error(ResponseItem(3083, parameter="RegOpt"), "  " + ECHO)


def test_missing_echo_is_accepted() -> None:
    text = "<pscr><Completion>warning</Completion><Response><Reason>3157</Reason></Response></pscr>"
    assert parse_folders([text]) == Response("warning", (ResponseItem(3157),))


@pytest.mark.parametrize(
    "folders",
    [
        [],
        ["<mcd><Msd>none</Msd></mcd>"],
        [ECHO],
        ["<pscr><Completion>ok</Completion></pscr>", "<pscr><Completion>ok</Completion></pscr>"],
        ["<pscr><Completion>ok</Completion>"],
        ["<pscr></pscr>"],
        ["<pscr><Completion>OK</Completion></pscr>"],
        ["<pscr><Completion>maybe</Completion></pscr>"],
        ["<pscr><Completion>ok</Completion><Completion>ok</Completion></pscr>"],
        ["<pscr><Completion>error</Completion></pscr>"],
        ["<pscr><Completion>error</Completion><Response><Topic>t</Topic></Response></pscr>"],
        ["<pscr><Completion>error</Completion><Response><Reason>x</Reason></Response></pscr>"],
        [
            "<pscr><Completion>error</Completion><Response><Reason>1</Reason><Reason>2</Reason>"
            "</Response></pscr>"
        ],
        [
            "<pscr><Completion>error</Completion><Response><Reason>1</Reason></Response>"
            "<Response><Reason>2</Reason></Response></pscr>"
        ],
        ["<pscr><Completion>warning</Completion><Response><Reason>1<b/></Reason></Response></pscr>"],
        ["<pscr><Completion>ok</Completion><Topic><a/></Topic></pscr>"],
        ["<pscr>loose<Completion>ok</Completion></pscr>"],
        ["<pscr><Completion>ok</Completion><Response><Reason>0</Reason></Response></pscr>"],
        [
            '<!DOCTYPE pscr [<!ENTITY x SYSTEM "file:///etc/passwd">]><pscr><Completion>&x;'
            "</Completion></pscr>"
        ],
        ["<pscr><Completion>ok</Completion></pscr"],
    ],
)
def test_garbage_is_refused(folders: list[str]) -> None:
    with pytest.raises(PscrError) as caught:
        parse_folders(folders)
    assert caught.value.reason == 2337


# --- round trip ---------------------------------------------------------------------------------

XML_TEXT = st.text(
    st.characters(
        blacklist_categories=("Cs",),
        blacklist_characters="\x00\x01\x02\x03\x04\x05\x06\x07\x08\x0b\x0c\x0e\x0f\x10\x11"
        "\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f\ufffe\uffff",
    ),
    max_size=30,
)
ITEMS = st.builds(
    ResponseItem,
    st.integers(min_value=-(2**31), max_value=2**31 - 1),
    st.none() | XML_TEXT,
    st.none() | XML_TEXT,
    st.none() | XML_TEXT,
)
NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.\-]{0,12}", fullmatch=True).filter(
    lambda name: name not in {"Completion", "Response"}
)
ECHOES = st.none() | XML_TEXT.map(lambda text: "<psc>" + text + "</psc>")
RESPONSES = st.one_of(
    st.builds(ok, st.lists(st.tuples(NAMES, XML_TEXT), max_size=5)),
    st.builds(warning, st.lists(ITEMS, min_size=1, max_size=4), ECHOES),
    st.builds(error, ITEMS, ECHOES),
)


@settings(max_examples=300, deadline=None)
@given(RESPONSES)
def test_round_trip(response: Response) -> None:
    folders = to_folders(response)
    etree.fromstring(folders[0])  # well-formed for every value
    assert parse_folders(folders) == response


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_any_text_is_written_well_formed(text: str) -> None:
    (pscr,) = to_folders(error(ResponseItem(3072, topic=text, parameter=text), None))
    item = parse_folders([pscr]).items[0]
    assert item.topic == item.parameter
    assert set(item.topic or "") <= set(text)
