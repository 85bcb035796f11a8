"""MQTT 5.0 session rules beyond the basics, without sockets: the will's delay and publication,
Response Information in the CONNACK, and topic aliases on what the server sends."""

from __future__ import annotations

from dataclasses import replace

from broker.protocol.mqtt.codec import encode
from broker.protocol.mqtt.packets import (
    MQTT_5,
    MQTT_311,
    NEVER_EXPIRES,
    ConnAck,
    Connect,
    Disconnect,
    Properties,
    Publish,
    Will,
)
from broker.protocol.mqtt.session import (
    Close,
    Limits,
    Open,
    Outbound,
    Send,
    Session,
    will_delay,
    will_publication,
)
from broker.protocol.mqtt.v5.reasons import ReasonCode

LIMITS = Limits(topic_alias_maximum=3, response_prefix="response/")
WILL_PROPERTIES = Properties(
    will_delay_interval=30,
    payload_format_indicator=1,
    message_expiry_interval=600,
    content_type="text/plain",
    response_topic="replies/c5",
    correlation_data=b"\x00\x07",
    user_properties=(("site", "Hursley"), ("site", "Winchester")),
)
WILL = Will("status/c5", b"gone", 1, True, WILL_PROPERTIES)


def connect(
    client_id: str = "c5", *, level: int = MQTT_5, will: Will | None = WILL, **properties: object
) -> Connect:
    return Connect("MQTT", level, client_id, False, 0, will, properties=Properties(**properties))  # type: ignore[arg-type]


def opened(
    packet: Connect, limits: Limits = LIMITS, outbound: tuple[Outbound, ...] = ()
) -> tuple[Session, list[object]]:
    session = Session(0.0, new_client_id=lambda: "generated-5", limits=limits)
    assert isinstance(session.receive(packet, 0.0)[0], Open)
    return session, [
        action.packet for action in session.opened(False, (), outbound) if isinstance(action, Send)
    ]


def connack(packet: Connect, limits: Limits = LIMITS) -> ConnAck:
    found = opened(packet, limits)[1][0]
    assert isinstance(found, ConnAck)
    return found


# -- wills ---------------------------------------------------------------------------------


def test_a_will_waits_its_delay_but_never_past_the_end_of_its_session() -> None:
    assert will_delay(WILL, 300) == 30
    assert will_delay(WILL, 10) == 10  # the session ends first: the will goes then
    assert will_delay(WILL, NEVER_EXPIRES) == 30
    assert will_delay(WILL, 0) == 0  # the session ends with the connection
    assert will_delay(WILL, None) == 0  # 3.1 and 3.1.1 have no delay
    assert will_delay(Will("t", b"", 0, False), 300) == 0  # none asked for
    assert will_delay(None, 300) == 0


def test_the_will_publication_carries_the_properties_but_the_delay() -> None:
    publication = will_publication(WILL)
    assert (publication.topic, publication.payload, publication.qos, publication.retain) == (
        "status/c5",
        b"gone",
        1,
        True,
    )
    assert publication.properties == Properties(
        payload_format_indicator=1,
        message_expiry_interval=600,
        content_type="text/plain",
        response_topic="replies/c5",
        correlation_data=b"\x00\x07",
        user_properties=(("site", "Hursley"), ("site", "Winchester")),
    )
    encode(replace(publication, packet_id=1), MQTT_5)  # a PUBLISH may carry every one of them
    plain = will_publication(Will("t", b"x", 0, False))
    assert plain == Publish("t", b"x")


def test_the_sessions_will_delay_follows_the_expiry_a_disconnect_sets() -> None:
    session, _ = opened(connect(session_expiry_interval=300))
    assert session.will_delay == 30
    actions = session.receive(
        Disconnect(ReasonCode.DISCONNECT_WITH_WILL_MESSAGE, Properties(session_expiry_interval=5)), 1.0
    )
    assert actions == [Close("DISCONNECT (0x04)", WILL)]
    assert session.will_delay == 5


def test_a_normal_disconnect_discards_the_will_and_a_lost_connection_keeps_it() -> None:
    session, _ = opened(connect(session_expiry_interval=300))
    assert session.receive(Disconnect(), 1.0) == [Close("DISCONNECT", None)]
    lost, _ = opened(connect(session_expiry_interval=300))
    assert lost.connection_lost("gone") == [Close("gone", WILL)]
    assert lost.will_delay == 30


def test_an_expiry_cap_shortens_the_will_delay() -> None:
    session, _ = opened(connect(session_expiry_interval=300), Limits(session_expiry_maximum=12))
    assert session.will_delay == 12


# -- Response Information ------------------------------------------------------------------


def test_response_information_is_told_when_asked_for() -> None:
    asked = connack(connect("meter-1", request_response_information=True))
    assert asked.properties.response_information == "response/meter-1/"
    assert connack(connect("meter-1")).properties.response_information is None  # not asked
    assert (
        connack(connect("meter-1", request_response_information=False)).properties.response_information
        is None
    )


def test_response_information_names_an_assigned_client_id() -> None:
    found = connack(connect("", request_response_information=True))
    assert found.properties.response_information == "response/generated-5/"


def test_no_response_information_without_a_prefix_or_for_an_id_no_topic_may_hold() -> None:
    unset = Limits(topic_alias_maximum=3)
    assert (
        connack(connect("m", request_response_information=True), unset).properties.response_information
        is None
    )
    for client_id in ("a+b", "a#"):
        found = connack(connect(client_id, request_response_information=True))
        assert found.properties.response_information is None


# -- topic aliases towards the client ------------------------------------------------------


def publish(topic: str, payload: bytes = b"x", qos: int = 0, packet_id: int | None = None) -> Publish:
    return Publish(topic, payload, qos, packet_id=packet_id)


def test_the_first_topics_get_aliases_and_later_sends_use_them() -> None:
    session, _ = opened(connect(topic_alias_maximum=2))
    first = session.aliased(session.deliver([publish("a/long/topic"), publish("b"), publish("c")]))
    assert [(p.topic, p.properties.topic_alias) for p in first] == [
        ("a/long/topic", 1),
        ("b", 2),
        ("c", None),  # the client takes two
    ]
    later = session.aliased(
        session.deliver([publish("b", b"2"), publish("a/long/topic", b"3", 1, 7), publish("c")])
    )
    assert [(p.topic, p.properties.topic_alias, p.payload) for p in later] == [
        ("", 2, b"2"),
        ("", 1, b"3"),
        ("c", None, b"x"),
    ]
    assert later[1].packet_id == 7 and later[1].qos == 1


def test_aliases_keep_a_publications_other_properties() -> None:
    session, _ = opened(connect(topic_alias_maximum=5))
    properties = Properties(content_type="text/plain", user_properties=(("k", "v"),))
    sent = Publish("t", b"x", properties=properties)
    [first] = session.aliased([sent])
    [second] = session.aliased([sent])
    assert first.properties == Properties(
        content_type="text/plain", user_properties=(("k", "v"),), topic_alias=1
    )
    assert (second.topic, second.properties.topic_alias, second.properties.content_type) == (
        "",
        1,
        "text/plain",
    )


def test_the_server_sets_no_more_aliases_than_its_own_maximum() -> None:
    session, _ = opened(connect(topic_alias_maximum=100))
    sent = session.aliased([publish(f"t/{n}") for n in range(5)])
    assert [p.properties.topic_alias for p in sent] == [1, 2, 3, None, None]  # LIMITS: 3


def test_no_aliases_for_a_client_that_takes_none_or_a_server_that_sets_none() -> None:
    for packet, limits in (
        (connect(), LIMITS),
        (connect(topic_alias_maximum=0), LIMITS),
        (connect(topic_alias_maximum=5), Limits()),
    ):
        session, _ = opened(packet, limits)
        twice = [publish("t"), publish("t")]
        assert session.aliased(twice) is twice
    old = Session(0.0, new_client_id=lambda: "x", limits=LIMITS)
    old.receive(connect(level=MQTT_311, will=None), 0.0)
    old.opened(False, (), ())
    twice = [publish("t"), publish("t")]
    assert old.aliased(twice) is twice


def test_aliases_are_the_connections_own() -> None:
    first, _ = opened(connect(topic_alias_maximum=5))
    first.aliased([publish("t")])
    assert first.aliased([publish("t")])[0].topic == ""
    again, _ = opened(connect(topic_alias_maximum=5))
    [sent] = again.aliased([publish("t")])
    assert (sent.topic, sent.properties.topic_alias) == ("t", 1)  # set again, topic and all


def test_messages_sent_again_at_reconnection_keep_their_full_topic() -> None:
    stored = Outbound(Publish("t", b"x", 1, packet_id=4))
    session, packets = opened(connect(topic_alias_maximum=5), outbound=(stored,))
    resent = packets[1]
    assert isinstance(resent, Publish)
    assert (resent.topic, resent.dup, resent.properties.topic_alias) == ("t", True, None)
    [first] = session.aliased([publish("t")])  # the alias is set by the next one, with the topic
    assert (first.topic, first.properties.topic_alias) == ("t", 1)


def test_an_alias_that_would_take_a_packet_over_the_clients_maximum_is_not_set() -> None:
    session, _ = opened(connect(topic_alias_maximum=5, maximum_packet_size=20))
    exact = publish("t", b"x" * (20 - len(encode(publish("t", b""), MQTT_5))))
    assert len(encode(exact, MQTT_5)) == 20
    [sent] = session.aliased([exact])
    assert sent.properties.topic_alias is None and sent.topic == "t"
    [small] = session.aliased([publish("t", b"y")])
    assert (small.topic, small.properties.topic_alias) == ("t", 1)
