"""MQTT 5.0 conformance checklist, the statements the session rules decide: packets and time in,
actions out, no broker. Each test is named by the normative statement's id of the OASIS standard
(7 March 2019), or by its section for a rule stated without an id; the statements checked
against the running broker are in ``tests/broker/service/mqtt/test_conformance_v5.py``.

==================  ===============================================================================
Statement           Test
==================  ===============================================================================
MQTT-3.1.2-28       test_MQTT_3_1_2_28_no_response_information_unless_it_is_asked_for
MQTT-3.2.2-8        test_MQTT_3_2_2_8_a_refusal_carries_a_connect_reason_code
MQTT-3.2.2-18       test_MQTT_3_2_2_18_a_topic_alias_where_the_server_takes_none_is_0x94
MQTT-3.2.2-22       test_MQTT_3_2_2_22_without_server_keep_alive_the_clients_keepalive_holds
MQTT-3.3.2-8        test_MQTT_3_3_2_8_the_server_never_sets_topic_alias_0
MQTT-3.3.2-9        test_MQTT_3_3_2_9_a_topic_alias_over_the_servers_maximum_is_0x94
MQTT-3.3.2-11       test_MQTT_3_3_2_11_the_server_sets_no_topic_alias_over_the_clients_maximum
MQTT-3.3.4-6        test_MQTT_3_3_4_6_a_subscription_identifier_from_a_client_is_0x82
MQTT-3.3.4-7        test_MQTT_3_3_4_7_more_unacknowledged_than_receive_maximum_is_0x93
MQTT-3.14.0-1       test_MQTT_3_14_0_1_no_disconnect_before_the_connack
MQTT-3.14.2-1       test_MQTT_3_14_2_1_the_servers_disconnects_carry_disconnect_reason_codes
MQTT-3.14.2-2       test_MQTT_3_14_2_2_the_servers_disconnect_has_no_session_expiry_interval
MQTT-3.14.4-3       test_MQTT_3_14_4_3_a_normal_disconnect_discards_the_will
MQTT-4.9.0-1        test_MQTT_4_9_0_1_the_send_quota_starts_non_zero_within_receive_maximum
MQTT-4.9.0-2        test_MQTT_4_9_0_2_no_qos_1_or_2_publication_past_the_send_quota
MQTT-4.12.0-6       test_MQTT_4_12_0_6_the_connack_names_no_authentication_method
section 3.1.3.2.2   test_section_3_1_3_2_2_the_will_waits_its_delay_or_its_session_whichever_ends_first
section 3.14.2.2.2  test_section_3_14_2_2_2_an_expiry_set_by_disconnect_after_0_is_a_protocol_error
==================  ===============================================================================

The statements one packet's bytes must keep (reserved bits, reason codes each packet may carry,
property rules, Subscription Options, ``$share`` names) are checked by the decoder, one test per
statement id, in ``tests/broker/protocol/mqtt/v5/test_malformed.py``: [MQTT-2.2.2-1],
[MQTT-3.3.2-8], [MQTT-3.3.2-14], [MQTT-3.4.2-1] to [MQTT-3.7.2-1], [MQTT-3.8.3-4], [MQTT-3.8.3-5],
[MQTT-3.9.3-2], [MQTT-3.11.3-2], [MQTT-3.14.1-1], [MQTT-3.14.2-1], [MQTT-3.15.1-1], [MQTT-3.15.2-1],
[MQTT-4.8.2-1], [MQTT-4.8.2-2], sections 3.8.2.1.2 and 3.15.2.2.2.
"""

from __future__ import annotations

from broker.protocol.mqtt.packets import (
    MQTT_5,
    NEVER_EXPIRES,
    NO_PROPERTIES,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    Properties,
    PubAck,
    Publish,
    Will,
)
from broker.protocol.mqtt.session import (
    V5_REFUSALS,
    Action,
    Close,
    Limits,
    Open,
    Route,
    Send,
    Session,
    Window,
    inflight_limit,
    will_delay,
)
from broker.protocol.mqtt.v5.reasons import REASON_CODES, ReasonCode

LIMITS = Limits(receive_maximum=2, topic_alias_maximum=3, response_prefix="response/")
WILL = Will("status/c5", b"gone", 1, False, Properties(will_delay_interval=30))


def connect(
    client_id: str = "c5", *, keepalive: int = 0, will: Will | None = WILL, **properties: object
) -> Connect:
    return Connect("MQTT", MQTT_5, client_id, True, keepalive, will, properties=Properties(**properties))  # type: ignore[arg-type]


def opened(packet: Connect, limits: Limits = LIMITS) -> tuple[Session, ConnAck]:
    """A session whose CONNECT is accepted and stored session opened, and its CONNACK."""
    session = Session(0.0, new_client_id=lambda: "assigned-1", limits=limits)
    assert isinstance(session.receive(packet, 0.0)[0], Open)
    [sent] = [action.packet for action in session.opened(False, (), ()) if isinstance(action, Send)]
    assert isinstance(sent, ConnAck)
    return session, sent


def sent(actions: list[Action]) -> list[Packet]:
    return [action.packet for action in actions if isinstance(action, Send)]


def closing(actions: list[Action]) -> Disconnect:
    """The DISCONNECT sent before the connection is closed."""
    assert isinstance(actions[-1], Close), actions
    [told] = sent(actions)
    assert isinstance(told, Disconnect)
    return told


# -- CONNACK -------------------------------------------------------------------------------


def test_MQTT_3_1_2_28_no_response_information_unless_it_is_asked_for() -> None:
    assert opened(connect())[1].properties.response_information is None
    assert opened(connect(request_response_information=False))[1].properties.response_information is None
    asked = opened(connect(request_response_information=True))[1]
    assert asked.properties.response_information == "response/c5/"  # the server MAY answer


def test_MQTT_3_2_2_8_a_refusal_carries_a_connect_reason_code() -> None:
    assert set(V5_REFUSALS.values()) <= REASON_CODES[ConnAck]
    for return_code, reason in V5_REFUSALS.items():
        session = Session(0.0, new_client_id=lambda: "x")
        session.receive(connect(), 0.0)
        assert sent(session.refused(return_code)) == [ConnAck(False, reason)]
    method = Session(0.0, new_client_id=lambda: "x")
    answer = sent(method.receive(connect(authentication_method="SCRAM-SHA-1"), 0.0))
    assert answer == [ConnAck(False, ReasonCode.BAD_AUTHENTICATION_METHOD)]


def test_MQTT_3_2_2_22_without_server_keep_alive_the_clients_keepalive_holds() -> None:
    session, connack = opened(connect(keepalive=10))
    assert connack.properties.server_keep_alive is None
    assert session.tick(14.9) == []
    assert closing(session.tick(15.0)) == Disconnect(ReasonCode.KEEP_ALIVE_TIMEOUT)  # 1.5 keepalives


def test_MQTT_4_12_0_6_the_connack_names_no_authentication_method() -> None:
    properties = opened(connect(request_response_information=True))[1].properties
    assert (properties.authentication_method, properties.authentication_data) == (None, None)


# -- topic aliases -------------------------------------------------------------------------


def test_MQTT_3_3_2_9_a_topic_alias_over_the_servers_maximum_is_0x94() -> None:
    session, connack = opened(connect())
    most = connack.properties.topic_alias_maximum
    assert most == 3
    assert sent(session.receive(Publish("a", b"", properties=Properties(topic_alias=most)), 1.0)) == []
    over = session.receive(Publish("b", b"", properties=Properties(topic_alias=most + 1)), 1.0)
    assert closing(over) == Disconnect(ReasonCode.TOPIC_ALIAS_INVALID)


def test_MQTT_3_2_2_18_a_topic_alias_where_the_server_takes_none_is_0x94() -> None:
    session, connack = opened(connect(), Limits())
    assert connack.properties.topic_alias_maximum is None  # absent: 0
    actions = session.receive(Publish("a", b"", properties=Properties(topic_alias=1)), 1.0)
    assert closing(actions) == Disconnect(ReasonCode.TOPIC_ALIAS_INVALID)


def test_MQTT_3_3_2_11_the_server_sets_no_topic_alias_over_the_clients_maximum() -> None:
    session, _ = opened(connect(topic_alias_maximum=2))
    topics = [f"t/{n}" for n in range(5)]
    written = session.aliased(session.deliver([Publish(topic, b"") for topic in topics * 2]))
    assert {p.properties.topic_alias for p in written} == {1, 2, None}


def test_MQTT_3_3_2_8_the_server_never_sets_topic_alias_0() -> None:
    session, _ = opened(connect(topic_alias_maximum=65535))
    written = session.aliased([Publish(f"t/{n}", b"") for n in range(10)])
    assert [p.properties.topic_alias for p in written] == [1, 2, 3] + [None] * 7  # this server's maximum: 3


# -- what a client may not send ------------------------------------------------------------


def test_MQTT_3_3_4_6_a_subscription_identifier_from_a_client_is_0x82() -> None:
    session, _ = opened(connect())
    actions = session.receive(Publish("t", b"", properties=Properties(subscription_identifiers=(1,))), 1.0)
    assert closing(actions) == Disconnect(ReasonCode.PROTOCOL_ERROR)


def test_MQTT_3_3_4_7_more_unacknowledged_than_receive_maximum_is_0x93() -> None:
    session, connack = opened(connect())
    assert connack.properties.receive_maximum == 2
    for packet_id in (1, 2):
        assert session.receive(Publish("t", b"", 1, packet_id=packet_id), 1.0) == [
            Route(Publish("t", b"", 1, packet_id=packet_id))
        ]
    actions = session.receive(Publish("t", b"", 1, packet_id=3), 1.0)
    assert closing(actions) == Disconnect(ReasonCode.RECEIVE_MAXIMUM_EXCEEDED)
    again, _ = opened(connect())
    again.receive(Publish("t", b"", 1, packet_id=1), 1.0)
    assert sent(again.routed(Publish("t", b"", 1, packet_id=1))) == [PubAck(1)]  # acknowledged: room again
    again.receive(Publish("t", b"", 1, packet_id=2), 1.0)
    assert again.receive(Publish("t", b"", 1, packet_id=3), 1.0) == [Route(Publish("t", b"", 1, packet_id=3))]


# -- flow control ----------------------------------------------------------------------------


def test_MQTT_4_9_0_1_the_send_quota_starts_non_zero_within_receive_maximum() -> None:
    assert inflight_limit(connect(receive_maximum=3), 100) == 3
    assert inflight_limit(connect(receive_maximum=300), 100) == 100
    assert inflight_limit(connect(), 100) == 100  # absent: 65,535
    assert Window(inflight_limit(connect(receive_maximum=1), 100)).room == 1


def test_MQTT_4_9_0_2_no_qos_1_or_2_publication_past_the_send_quota() -> None:
    window = Window(inflight_limit(connect(receive_maximum=2), 100))
    first, _second = window.take(), window.take()
    assert window.room == 0
    window.free(first)  # PUBACK or PUBCOMP
    assert window.room == 1


# -- DISCONNECT ------------------------------------------------------------------------------


def test_MQTT_3_14_0_1_no_disconnect_before_the_connack() -> None:
    waiting = Session(0.0, new_client_id=lambda: "x", connect_timeout=5.0)
    assert sent(waiting.tick(5.0)) == []  # no CONNECT in time: closed, nothing said
    opening = Session(0.0, new_client_id=lambda: "x")
    opening.receive(connect(), 0.0)
    assert sent(opening.connection_lost("taken over", ReasonCode.SESSION_TAKEN_OVER)) == []
    refused = Session(0.0, new_client_id=lambda: "x")
    refused.receive(connect(), 0.0)
    assert sent(refused.refused(ReasonCode.NOT_AUTHORIZED)) == [ConnAck(False, ReasonCode.NOT_AUTHORIZED)]


def _server_disconnects() -> list[Disconnect]:
    """Every DISCONNECT the session rules have the server send."""
    found = []
    for event in (
        lambda s: s.tick(100.0),
        lambda s: s.connection_lost("taken over", ReasonCode.SESSION_TAKEN_OVER),
        lambda s: s.connection_lost("shutting down", ReasonCode.SERVER_SHUTTING_DOWN),
        lambda s: s.receive(Auth(ReasonCode.RE_AUTHENTICATE, Properties(authentication_method="m")), 1.0),
        lambda s: s.receive(connect(), 1.0),
        lambda s: s.receive(Publish("t", b"", properties=Properties(topic_alias=9)), 1.0),
        lambda s: s.receive(Disconnect(properties=Properties(session_expiry_interval=5)), 1.0),
    ):
        session, _ = opened(connect(keepalive=10))
        found.append(closing(event(session)))
    return found


def test_MQTT_3_14_2_1_the_servers_disconnects_carry_disconnect_reason_codes() -> None:
    codes = {told.reason_code for told in _server_disconnects()}
    assert codes <= REASON_CODES[Disconnect]
    assert codes == {
        ReasonCode.KEEP_ALIVE_TIMEOUT,
        ReasonCode.SESSION_TAKEN_OVER,
        ReasonCode.SERVER_SHUTTING_DOWN,
        ReasonCode.PROTOCOL_ERROR,
        ReasonCode.TOPIC_ALIAS_INVALID,
    }


def test_MQTT_3_14_2_2_the_servers_disconnect_has_no_session_expiry_interval() -> None:
    assert all(told.properties == NO_PROPERTIES for told in _server_disconnects())


def test_MQTT_3_14_4_3_a_normal_disconnect_discards_the_will() -> None:
    session, _ = opened(connect(session_expiry_interval=60))
    assert session.receive(Disconnect(ReasonCode.NORMAL_DISCONNECTION), 1.0) == [Close("DISCONNECT", None)]
    with_will, _ = opened(connect(session_expiry_interval=60))
    actions = with_will.receive(Disconnect(ReasonCode.DISCONNECT_WITH_WILL_MESSAGE), 1.0)
    assert actions == [Close("DISCONNECT (0x04)", WILL)]


def test_section_3_14_2_2_2_an_expiry_set_by_disconnect_after_0_is_a_protocol_error() -> None:
    session, _ = opened(connect())  # Session Expiry Interval absent: 0
    actions = session.receive(Disconnect(properties=Properties(session_expiry_interval=60)), 1.0)
    assert closing(actions) == Disconnect(ReasonCode.PROTOCOL_ERROR)
    lasting, _ = opened(connect(session_expiry_interval=60))
    assert sent(lasting.receive(Disconnect(properties=Properties(session_expiry_interval=0)), 1.0)) == []
    assert lasting.ends_with_connection


# -- wills -----------------------------------------------------------------------------------


def test_section_3_1_3_2_2_the_will_waits_its_delay_or_its_session_whichever_ends_first() -> None:
    assert will_delay(WILL, 300) == 30  # the delay ends first
    assert will_delay(WILL, 10) == 10  # the session ends first
    assert will_delay(WILL, NEVER_EXPIRES) == 30
    assert will_delay(WILL, 0) == 0  # the session ends with the connection
    assert will_delay(Will("t", b"", 0, False), 300) == 0  # absent: no delay
