"""The MQTT session rules, without sockets: packets and time in, actions out."""

from __future__ import annotations

from broker.protocol.mqtt.packets import (
    CONNACK_ACCEPTED,
    CONNACK_BAD_CREDENTIALS,
    CONNACK_IDENTIFIER_REJECTED,
    MQTT_5,
    MQTT_31,
    MQTT_311,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    PingReq,
    PingResp,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
    Will,
)
from broker.protocol.mqtt.session import (
    Close,
    Delivered,
    Deregister,
    Limits,
    Open,
    Outbound,
    Phase,
    Received,
    Register,
    Release,
    Route,
    Send,
    Session,
    Window,
)
from broker.protocol.mqtt.v5.reasons import ReasonCode

WILL = Will("clients/c1/status", b"gone", 1, True)


def connect(
    client_id: str = "c1",
    *,
    level: int = MQTT_311,
    clean: bool = True,
    keepalive: int = 0,
    will: Will | None = WILL,
) -> Connect:
    return Connect("MQTT" if level == MQTT_311 else "MQIsdp", level, client_id, clean, keepalive, will)


def opened(session: Session | None = None, **kwargs: object) -> Session:
    session = session or Session(0.0, new_client_id=lambda: "generated-1")
    actions = session.receive(connect(**kwargs), 0.0)  # type: ignore[arg-type]
    assert isinstance(actions[0], Open)
    assert session.opened(False, [], []) == [Send(ConnAck(False, CONNACK_ACCEPTED))]
    return session


def sent(actions: list[object]) -> list[object]:
    return [a.packet for a in actions if isinstance(a, Send)]


def test_a_packet_before_connect_closes_without_will() -> None:
    session = Session(0.0, new_client_id=lambda: "x")
    actions = session.receive(PingReq(), 1.0)
    assert actions == [Close("PingReq before CONNECT", None)]
    assert session.phase is Phase.CLOSED
    assert session.receive(connect(), 2.0) == []


def test_a_second_connect_closes_and_publishes_the_will() -> None:
    session = opened()
    assert session.receive(connect(), 1.0) == [Close("a second CONNECT", WILL)]


def test_disconnect_closes_without_the_will() -> None:
    session = opened()
    assert session.receive(Disconnect(), 1.0) == [Close("DISCONNECT", None)]
    assert session.connection_lost("socket error") == []


def test_connection_lost_publishes_the_will() -> None:
    session = opened()
    assert session.connection_lost("socket error") == [Close("socket error", WILL)]


def test_empty_client_id_311_clean_gets_a_generated_id() -> None:
    session = Session(0.0, new_client_id=lambda: "generated-1")
    actions = session.receive(connect(""), 0.0)
    assert actions == [Open(connect(""), "generated-1")]
    assert session.client_id == "generated-1"


def test_empty_client_id_refused_without_clean_session_or_in_31() -> None:
    for kwargs in ({"clean": False}, {"level": MQTT_31}):
        session = Session(0.0, new_client_id=lambda: "generated-1")
        actions = session.receive(connect("", **kwargs), 0.0)  # type: ignore[arg-type]
        assert sent(actions) == [ConnAck(False, CONNACK_IDENTIFIER_REJECTED)]
        assert isinstance(actions[-1], Close) and actions[-1].will is None


def test_31_client_ids_over_23_characters_are_refused() -> None:
    session = Session(0.0, new_client_id=lambda: "x")
    assert sent(session.receive(connect("c" * 24, level=MQTT_31), 0.0)) == [
        ConnAck(False, CONNACK_IDENTIFIER_REJECTED)
    ]
    session = Session(0.0, new_client_id=lambda: "x")
    assert isinstance(session.receive(connect("c" * 23, level=MQTT_31), 0.0)[0], Open)
    session = Session(0.0, new_client_id=lambda: "x")
    assert isinstance(session.receive(connect("c" * 200), 0.0)[0], Open)


def test_refused_credentials_answer_connack_then_close() -> None:
    session = Session(0.0, new_client_id=lambda: "x")
    session.receive(connect(), 0.0)
    actions = session.refused(CONNACK_BAD_CREDENTIALS)
    assert actions == [Send(ConnAck(False, CONNACK_BAD_CREDENTIALS)), Close(actions[1].reason, None)]  # type: ignore[union-attr]


def test_packets_behind_connect_wait_for_the_session() -> None:
    session = Session(0.0, new_client_id=lambda: "x")
    session.receive(connect(), 0.0)
    assert session.receive(PingReq(), 0.1) == []
    actions = session.opened(True, [], [])
    assert sent(actions) == [ConnAck(True, CONNACK_ACCEPTED), PingResp()]


def test_keepalive_closes_after_one_and_a_half_times_silence() -> None:
    session = opened(keepalive=10)
    assert session.deadline() == 15.0
    assert session.tick(14.9) == []
    session.receive(PingReq(), 10.0)
    assert session.tick(24.9) == []
    assert session.tick(25.0) == [Close("keepalive expired", WILL)]


def test_keepalive_zero_never_expires_and_connect_must_come_in_time() -> None:
    assert opened(keepalive=0).deadline() is None
    waiting = Session(0.0, new_client_id=lambda: "x", connect_timeout=5.0)
    assert waiting.tick(4.0) == []
    assert waiting.tick(5.0) == [Close("no CONNECT in time", None)]


def test_qos0_is_routed_and_never_acknowledged() -> None:
    session = opened()
    publish = Publish("a/b", b"x")
    assert session.receive(publish, 1.0) == [Route(publish)]
    assert session.routed(publish) == []


def test_qos1_puback_only_once_routed() -> None:
    session = opened()
    publish = Publish("a/b", b"x", qos=1, packet_id=7)
    assert session.receive(publish, 1.0) == [Route(publish)]
    assert session.receive(Publish("a/b", b"x", qos=1, dup=True, packet_id=7), 1.1) == []
    assert session.routed(publish) == [Send(PubAck(7))]


def test_qos2_exactly_once() -> None:
    session = opened()
    publish = Publish("a/b", b"x", qos=2, packet_id=9)
    assert session.receive(publish, 1.0) == [Route(publish)]
    assert session.routed(publish) == [Send(PubRec(9))]
    again = Publish("a/b", b"x", qos=2, dup=True, packet_id=9)
    assert session.receive(again, 2.0) == [Send(PubRec(9))]  # acknowledged again, not routed
    assert session.receive(PubRel(9), 3.0) == [Release(9)]
    assert session.released(9) == [Send(PubComp(9))]
    assert session.receive(Publish("a/b", b"y", qos=2, packet_id=9), 4.0) == [
        Route(Publish("a/b", b"y", qos=2, packet_id=9))
    ]


def test_qos2_ids_awaiting_release_survive_in_a_resumed_session() -> None:
    session = Session(0.0, new_client_id=lambda: "x")
    session.receive(connect(clean=False), 0.0)
    session.opened(True, [9], [])
    assert session.receive(Publish("a", b"x", qos=2, dup=True, packet_id=9), 1.0) == [Send(PubRec(9))]
    assert session.receive(PubRel(4), 1.0) == [Send(PubComp(4))]  # unknown id: PUBCOMP all the same


def test_outbound_qos1_and_qos2_flows() -> None:
    session = opened()
    one = Publish("t", b"1", qos=1, packet_id=1)
    two = Publish("t", b"2", qos=2, packet_id=2)
    zero = Publish("t", b"0")
    assert session.deliver([one, zero, two]) == [one, zero, two]
    assert session.inflight == 2
    assert session.receive(PubAck(1), 1.0) == [Delivered(1)]
    assert session.receive(PubAck(1), 1.0) == []
    assert session.receive(PubRec(2), 1.0) == [Received(2)]
    assert session.recorded(2) == [Send(PubRel(2))]
    assert session.receive(PubRec(2), 1.0) == [Send(PubRel(2))]
    assert session.receive(PubComp(2), 1.0) == [Delivered(2)]
    assert session.inflight == 0


def test_the_window_limits_messages_in_flight_and_ids_skip_those_in_use() -> None:
    window = Window(2, [7])  # a resumed session's message 7 still in flight
    assert window.take() == 8
    assert window.room == 0
    window.free(7)
    assert window.room == 1
    assert window.take() == 9
    window.free(8)
    window.free(8)  # acknowledged twice: freed once
    assert window.room == 1


def test_packet_ids_wrap_after_65535() -> None:
    window = Window(10, [65534])
    assert [window.take(), window.take(), window.take()] == [65535, 1, 2]


def test_a_resumed_session_resends_in_order_with_dup_and_pubrel() -> None:
    session = Session(0.0, new_client_id=lambda: "x")
    session.receive(connect(clean=False), 0.0)
    first = Publish("t", b"1", qos=1, packet_id=5)
    second = Publish("t", b"2", qos=2, packet_id=6)
    third = Publish("t", b"3", qos=2, packet_id=3)
    actions = session.opened(True, [], [Outbound(first), Outbound(second, released=True), Outbound(third)])
    assert sent(actions) == [
        ConnAck(True, CONNACK_ACCEPTED),
        Publish("t", b"1", qos=1, dup=True, packet_id=5),
        PubRel(6),
        Publish("t", b"3", qos=2, dup=True, packet_id=3),
    ]
    assert session.receive(PubComp(6), 1.0) == [Delivered(6)]
    window = Window(100, [5, 3])  # the shell's window over the same messages, in sending order
    assert [window.take(), window.take(), window.take()] == [4, 6, 7]


def test_subscribe_and_unsubscribe_answer_after_the_work() -> None:
    session = opened()
    subscribe = Subscribe(3, (("a/#", 1), ("secret/#", 2)))
    assert session.receive(subscribe, 1.0) == [Register(subscribe)]
    assert session.subscribed(3, [1, 0x80]) == [Send(SubAck(3, (1, 0x80)))]
    unsubscribe = Unsubscribe(4, ("a/#",))
    assert session.receive(unsubscribe, 1.0) == [Deregister(unsubscribe)]
    assert session.unsubscribed(4) == [Send(UnsubAck(4))]


def test_packets_a_server_never_receives_close_the_connection() -> None:
    session = opened()
    actions = session.receive(ConnAck(False, 0), 1.0)
    assert actions == [Close("ConnAck is not sent to a server", WILL)]


def test_answers_after_close_are_dropped() -> None:
    session = opened()
    publish = Publish("a", b"x", qos=1, packet_id=1)
    session.receive(publish, 1.0)
    session.connection_lost("gone")
    assert session.routed(publish) == []
    assert session.deliver([Publish("t", b"y", qos=1, packet_id=1)]) == []
    assert session.inflight == 0


def test_a_31_connack_never_says_session_present() -> None:
    session = Session(0.0, new_client_id=lambda: "x")
    session.receive(connect(level=MQTT_31, clean=False), 0.0)
    assert sent(session.opened(True, [], [])) == [ConnAck(False, CONNACK_ACCEPTED)]


# -- MQTT 5.0 ------------------------------------------------------------------------------

LIMITS = Limits(receive_maximum=2, topic_alias_maximum=3, maximum_packet_size=1000)


def v5(
    client_id: str = "c5", *, expiry: int | None = None, method: str | None = None, clean: bool = True
) -> Connect:
    properties = Properties(session_expiry_interval=expiry, authentication_method=method)
    return Connect("MQTT", MQTT_5, client_id, clean, 0, WILL, properties=properties)


def opened_v5(packet: Connect | None = None) -> tuple[Session, list[object]]:
    session = Session(0.0, new_client_id=lambda: "generated-5", limits=LIMITS)
    actions = session.receive(packet or v5(), 0.0)
    assert isinstance(actions[0], Open)
    return session, list(session.opened(False, (), ()))


def test_v5_an_empty_client_id_is_assigned_and_told_in_the_connack_with_the_limits() -> None:
    session, actions = opened_v5(v5(""))
    assert session.client_id == "generated-5"
    [sent] = actions
    assert isinstance(sent, Send) and isinstance(sent.packet, ConnAck)
    properties = sent.packet.properties
    assert properties.assigned_client_identifier == "generated-5"
    assert (properties.receive_maximum, properties.topic_alias_maximum) == (2, 3)
    assert properties.maximum_packet_size == 1000
    assert properties.shared_subscription_available is None  # offered
    assert properties.subscription_identifier_available is None  # offered


def test_v5_a_client_id_given_is_not_told_back() -> None:
    _, [sent] = opened_v5()
    assert isinstance(sent, Send) and isinstance(sent.packet, ConnAck)
    assert sent.packet.properties.assigned_client_identifier is None


def test_v5_session_expiry_decides_whether_the_session_ends_with_the_connection() -> None:
    assert opened_v5(v5(expiry=0))[0].ends_with_connection
    assert opened_v5(v5(expiry=None))[0].ends_with_connection  # absent: 0
    lasting, _ = opened_v5(v5(expiry=60, clean=True))
    assert not lasting.ends_with_connection  # Clean Start discards the old one, not this one
    assert lasting.expiry == 60


def test_v5_disconnect_may_change_the_expiry_but_not_from_zero() -> None:
    session, _ = opened_v5(v5(expiry=60))
    actions = session.receive(Disconnect(properties=Properties(session_expiry_interval=0)), 1.0)
    assert actions == [Close("DISCONNECT", None)]
    assert session.ends_with_connection
    session, _ = opened_v5(v5(expiry=0))
    actions = session.receive(Disconnect(properties=Properties(session_expiry_interval=30)), 1.0)
    assert actions[0] == Send(Disconnect(ReasonCode.PROTOCOL_ERROR))
    assert isinstance(actions[1], Close) and actions[1].will == WILL
    assert session.ends_with_connection


def test_v5_disconnect_with_will_message_publishes_the_will() -> None:
    session, _ = opened_v5()
    [close] = session.receive(Disconnect(ReasonCode.DISCONNECT_WITH_WILL_MESSAGE), 1.0)
    assert isinstance(close, Close) and close.will == WILL


def test_v5_refusals_carry_reason_codes() -> None:
    session = Session(0.0, new_client_id=lambda: "x")
    assert isinstance(session.receive(v5(), 0.0)[0], Open)
    assert session.refused(CONNACK_BAD_CREDENTIALS)[0] == Send(
        ConnAck(False, ReasonCode.BAD_USER_NAME_OR_PASSWORD)
    )
    method = Session(0.0, new_client_id=lambda: "x")
    actions = method.receive(v5(method="SCRAM-SHA-1"), 0.0)
    assert actions[0] == Send(ConnAck(False, ReasonCode.BAD_AUTHENTICATION_METHOD))
    assert isinstance(actions[1], Close) and actions[1].will is None


def test_v5_the_server_says_why_it_ends_an_open_connection() -> None:
    session, _ = opened_v5(Connect("MQTT", MQTT_5, "k", True, 10, WILL))
    assert session.tick(100.0)[0] == Send(Disconnect(ReasonCode.KEEP_ALIVE_TIMEOUT))
    session, _ = opened_v5()
    assert session.connection_lost("taken over", ReasonCode.SESSION_TAKEN_OVER)[0] == Send(
        Disconnect(ReasonCode.SESSION_TAKEN_OVER)
    )
    session, _ = opened_v5()
    assert session.receive(v5(), 1.0)[0] == Send(Disconnect(ReasonCode.PROTOCOL_ERROR))
    session, _ = opened_v5()
    assert session.receive(Auth(ReasonCode.RE_AUTHENTICATE), 1.0)[0] == Send(
        Disconnect(ReasonCode.PROTOCOL_ERROR)
    )
    session, _ = opened_v5()
    assert session.connection_lost("socket closed") == [Close("socket closed", WILL)]  # nobody to tell


def test_v3_hears_no_disconnect() -> None:
    session = opened(keepalive=10)
    assert session.tick(100.0) == [Close("keepalive expired", WILL)]


def test_v5_topic_aliases_resolve_and_an_unknown_or_too_large_one_ends_the_connection() -> None:
    session, _ = opened_v5()
    alias = Properties(topic_alias=2)
    [route] = session.receive(Publish("a/b", b"1", properties=alias), 1.0)
    assert route == Route(Publish("a/b", b"1"))
    [route] = session.receive(Publish("", b"2", properties=alias), 1.0)
    assert route == Route(Publish("a/b", b"2"))
    unknown = session.receive(Publish("", b"3", properties=Properties(topic_alias=1)), 1.0)
    assert unknown[0] == Send(Disconnect(ReasonCode.TOPIC_ALIAS_INVALID))
    session, _ = opened_v5()
    too_large = session.receive(Publish("a", b"", properties=Properties(topic_alias=4)), 1.0)
    assert too_large[0] == Send(Disconnect(ReasonCode.TOPIC_ALIAS_INVALID))


def test_v5_a_client_publication_with_a_subscription_identifier_is_a_protocol_error() -> None:
    session, _ = opened_v5()
    actions = session.receive(Publish("t", b"", properties=Properties(subscription_identifiers=(1,))), 1.0)
    assert actions[0] == Send(Disconnect(ReasonCode.PROTOCOL_ERROR))


def test_v5_more_unacknowledged_publications_than_receive_maximum_end_the_connection() -> None:
    session, _ = opened_v5()
    for packet_id in (1, 2):
        assert session.receive(Publish("t", b"", 1, packet_id=packet_id), 1.0) == [
            Route(Publish("t", b"", 1, packet_id=packet_id))
        ]
    actions = session.receive(Publish("t", b"", 1, packet_id=3), 1.0)
    assert actions[0] == Send(Disconnect(ReasonCode.RECEIVE_MAXIMUM_EXCEEDED))
    session, _ = opened_v5()
    first = Publish("t", b"", 1, packet_id=1)
    session.receive(first, 1.0)
    session.routed(first)  # acknowledged: room again
    session.receive(Publish("t", b"", 2, packet_id=2), 1.0)
    assert session.receive(Publish("t", b"", 1, packet_id=3), 1.0) == [
        Route(Publish("t", b"", 1, packet_id=3))
    ]


def test_v5_refused_publications_are_acknowledged_with_their_reason() -> None:
    session, _ = opened_v5()
    qos1 = Publish("t", b"", 1, packet_id=1)
    session.receive(qos1, 1.0)
    assert session.routed(qos1, ReasonCode.NOT_AUTHORIZED) == [Send(PubAck(1, ReasonCode.NOT_AUTHORIZED))]
    qos2 = Publish("t", b"", 2, packet_id=2)
    session.receive(qos2, 1.0)
    refused = session.routed(qos2, ReasonCode.NOT_AUTHORIZED)
    assert refused == [Send(PubRec(2, ReasonCode.NOT_AUTHORIZED)), Release(2)]
    assert session.released(2) == []  # the exchange is over: no PUBCOMP
    again = Publish("t", b"new", 2, packet_id=2)  # the id numbers a new publication
    assert session.receive(again, 1.0) == [Route(again)]


def test_v3_refused_publications_are_acknowledged_as_any_other() -> None:
    session = opened()
    qos1 = Publish("t", b"", 1, packet_id=1)
    session.receive(qos1, 1.0)
    assert session.routed(qos1, ReasonCode.NOT_AUTHORIZED) == [Send(PubAck(1))]


def test_v5_shared_filters_are_registered_with_the_others() -> None:
    session, _ = opened_v5()
    packet = Subscribe(7, (("a/#", 1), ("$share/g/b", 1), ("c", 0)))
    assert session.receive(packet, 1.0) == [Register(packet)]
    assert session.subscribed(7, [1, 1, 0]) == [Send(SubAck(7, (1, 1, 0)))]


def test_v5_unsuback_has_a_reason_code_for_each_filter() -> None:
    session, _ = opened_v5()
    assert session.unsubscribed(3, 2) == [Send(UnsubAck(3, (0, 0)))]
    assert opened().unsubscribed(3, 2) == [Send(UnsubAck(3))]


def test_v5_the_session_expiry_is_capped_and_the_cap_told() -> None:
    session = Session(0.0, new_client_id=lambda: "x", limits=Limits(session_expiry_maximum=3600))
    session.receive(v5(expiry=0xFFFFFFFF), 0.0)
    [sent] = session.opened(False, (), ())
    assert session.expiry == 3600
    assert isinstance(sent, Send) and isinstance(sent.packet, ConnAck)
    assert sent.packet.properties.session_expiry_interval == 3600
    session.receive(Disconnect(properties=Properties(session_expiry_interval=60)), 1.0)
    assert (session.expiry, session.expiry_changed) == (60, True)
    _, [granted] = opened_v5(v5(expiry=60))
    assert isinstance(granted, Send) and isinstance(granted.packet, ConnAck)
    assert granted.packet.properties.session_expiry_interval is None  # as asked: not told
