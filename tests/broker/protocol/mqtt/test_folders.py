"""MQTT 5.0 publication properties as MQRFH2 folders and back: every User Property (any name,
any value MQTT allows, in order, repeats kept), the Response Topic, Correlation Data, Content
Type and Payload Format Indicator come back as they went, through folders that are well-formed
XML; an MQRFH2 application's ``<usr>`` folder reads as User Properties; MQMD Expiry reads as
the seconds left."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from lxml import etree

from broker.protocol.mqtt.folders import (
    carries,
    decode_name,
    encode_name,
    expiry,
    mqtt_elements,
    properties,
    user_folder,
)
from broker.protocol.mqtt.packets import NO_PROPERTIES, Properties

# What an MQTT UTF-8 string may hold: no U+0000, no surrogates (section 1.5.4).
MQTT_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20)


def through(sent: Properties, text: bool = False, remaining: int = -1) -> Properties:
    folders = [f"<mqtt><qos>1</qos>{mqtt_elements(sent)}</mqtt>"]
    if (usr := user_folder(sent)) is not None:
        folders.append(usr)
    for folder in folders:
        etree.fromstring(folder)  # well-formed, as the MQRFH2 rules ask
    return properties(folders, text, remaining)


@given(st.lists(st.tuples(MQTT_TEXT, MQTT_TEXT), max_size=6))
def test_user_properties_come_back_in_order_with_repeats(pairs: list[tuple[str, str]]) -> None:
    sent = Properties(user_properties=tuple(pairs))
    assert through(sent).user_properties == tuple(pairs)


@given(MQTT_TEXT)
def test_any_name_is_an_xml_name_and_reads_back(name: str) -> None:
    encoded = encode_name(name)
    etree.Element(encoded)  # lxml refuses a name XML does not allow
    assert decode_name(encoded) == name


@given(MQTT_TEXT, MQTT_TEXT, st.binary(max_size=16), st.booleans())
def test_request_response_and_content_properties_come_back(
    topic: str, content_type: str, data: bytes, text: bool
) -> None:
    sent = Properties(
        response_topic=topic or "r",
        correlation_data=data,
        content_type=content_type,
        payload_format_indicator=1 if text else None,
    )
    assert carries(sent)
    back = through(sent)
    assert (back.response_topic, back.correlation_data, back.content_type) == (
        topic or "r",
        data,
        content_type,
    )
    assert back.payload_format_indicator == (1 if text else None)


def test_a_publication_without_properties_carries_none() -> None:
    assert not carries(NO_PROPERTIES)
    assert mqtt_elements(NO_PROPERTIES) == ""
    assert user_folder(NO_PROPERTIES) is None
    assert properties(["<mqtt><qos>1</qos></mqtt>"], False, -1) is NO_PROPERTIES


def test_an_mqrfh2_applications_usr_folder_and_string_format_reach_mqtt5() -> None:
    folders = ['<usr><Colour>blue</Colour><Count dt="i4">3</Count></usr>']
    got = properties(folders, True, -1)
    assert got.user_properties == (("Colour", "blue"), ("Count", "3"))
    assert got.payload_format_indicator == 1


def test_a_usr_folder_that_is_not_xml_is_passed_over() -> None:
    assert properties(
        ["<usr><open></usr>", '<usr><!DOCTYPE x [<!ENTITY e "boom">]><a>&e;</a></usr>'], False, -1
    ) is (NO_PROPERTIES)


def test_message_expiry_is_mqmd_expiry_and_what_is_left_is_sent() -> None:
    assert expiry(NO_PROPERTIES) == -1
    assert expiry(Properties(message_expiry_interval=60)) == 600
    assert expiry(Properties(message_expiry_interval=2**32 - 1)) == 2**31 - 1
    assert properties([], False, 595).message_expiry_interval == 60  # rounded up
    assert properties([], False, 1).message_expiry_interval == 1
