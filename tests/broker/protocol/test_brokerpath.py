"""broker.protocol.brokerpath: the ``<brokerpath>`` folder forwarded publications and deletes carry."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.protocol.brokerpath import FOLDER, MAX_HOPS, BrokerPath, parse, render
from broker.protocol.psc import PscError
from queues.reasons import Reason

ORIGIN = bytes(range(24))
ORIGIN_HEX = ORIGIN.hex()


def test_render_writes_the_origin_in_hex_and_the_hops_in_order() -> None:
    assert render(BrokerPath(ORIGIN, ("QM1", "QM2"))) == (
        f"<brokerpath><OrigMsgId>{ORIGIN_HEX}</OrigMsgId><QMgr>QM1</QMgr><QMgr>QM2</QMgr></brokerpath>"
    )
    assert FOLDER == "brokerpath"


def test_through_appends_a_hop_and_keeps_the_origin() -> None:
    path = BrokerPath(ORIGIN, ("QM1",))
    assert path.through("QM2") == BrokerPath(ORIGIN, ("QM1", "QM2"))
    assert path.through("QM2").last_hop == "QM2"
    assert path.last_hop == "QM1"


def test_parse_reads_what_render_writes_with_layout_and_comments() -> None:
    text = (
        f"<brokerpath>\n  <OrigMsgId> {ORIGIN_HEX.upper()} </OrigMsgId>\n  <!-- from QM1 -->\n"
        "  <QMgr> QM1 </QMgr>\n  <QMgr>QM2</QMgr>\n</brokerpath>  "
    )
    assert parse(text) == BrokerPath(ORIGIN, ("QM1", "QM2"))


@given(
    st.binary(min_size=24, max_size=24),
    st.lists(st.from_regex(r"[A-Za-z0-9._%/]{1,48}", fullmatch=True), min_size=1, max_size=MAX_HOPS),
)
def test_parse_render_round_trip(origin: bytes, hops: list[str]) -> None:
    path = BrokerPath(origin, tuple(hops))
    assert parse(render(path)) == path


def test_hop_names_are_escaped() -> None:
    path = BrokerPath(ORIGIN, ("A&B", "<QM>"))
    assert "<QMgr>A&amp;B</QMgr><QMgr>&lt;QM&gt;</QMgr>" in render(path)
    assert parse(render(path)) == path


@pytest.mark.parametrize(
    "text",
    [
        f"<brokerpath><OrigMsgId>{ORIGIN_HEX}</OrigMsgId></brokerpath>",  # no hop
        "<brokerpath><QMgr>QM1</QMgr></brokerpath>",  # no origin
        f"<brokerpath><OrigMsgId>{ORIGIN_HEX[:-2]}</OrigMsgId><QMgr>QM1</QMgr></brokerpath>",  # 23 bytes
        f"<brokerpath><OrigMsgId>{ORIGIN_HEX}00</OrigMsgId><QMgr>QM1</QMgr></brokerpath>",  # 25 bytes
        "<brokerpath><OrigMsgId>" + "zz" * 24 + "</OrigMsgId><QMgr>QM1</QMgr></brokerpath>",
        f"<brokerpath><OrigMsgId>{ORIGIN_HEX}</OrigMsgId><QMgr>QM1</QMgr><Hop>QM2</Hop></brokerpath>",
        f"<brokerpath><OrigMsgId>{ORIGIN_HEX}</OrigMsgId><QMgr> </QMgr><QMgr>QM1</QMgr></brokerpath>",
        f"<brokerpath><OrigMsgId>{ORIGIN_HEX}</OrigMsgId>"
        + "<QMgr>Q</QMgr>" * (MAX_HOPS + 1)
        + "</brokerpath>",
        f"<path><OrigMsgId>{ORIGIN_HEX}</OrigMsgId><QMgr>QM1</QMgr></path>",
        "<brokerpath><OrigMsgId>",
        f'<!DOCTYPE brokerpath [<!ENTITY q "QM1">]><brokerpath><OrigMsgId>{ORIGIN_HEX}</OrigMsgId>'
        "<QMgr>&q;</QMgr></brokerpath>",
    ],
)
def test_a_malformed_path_is_2337(text: str) -> None:
    with pytest.raises(PscError) as caught:
        parse(text)
    assert caught.value.reason == Reason.MQRC_RFH_PARM_ERROR


def test_a_path_of_the_maximum_length_is_accepted() -> None:
    hops = tuple(f"QM{i}" for i in range(MAX_HOPS))
    assert parse(render(BrokerPath(ORIGIN, hops))).hops == hops


def test_errors_name_the_folder() -> None:
    with pytest.raises(PscError) as caught:
        parse(f"<brokerpath><OrigMsgId>{ORIGIN_HEX}</OrigMsgId><Hop>x</Hop></brokerpath>")
    assert (caught.value.parameter, caught.value.detail) == (
        "brokerpath",
        "<brokerpath> folder: unexpected <Hop>",
    )
