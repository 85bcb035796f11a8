"""MQTT 5.0 conformance checklist, against the running broker: one test per normative statement
of the OASIS standard (7 March 2019) about the features MQTT 5.0 adds, each named by its
statement id (``[MQTT-3.3.2-4]`` is ``test_MQTT_3_3_2_4_...``). A rule the specification states
without an id is named by its section (``test_section_3_14_2_2_2_...``). Statements a pure
function decides are checked without a broker in
``tests/broker/protocol/mqtt/test_conformance_v5.py``.

The ids are those of the specification's body; its Appendix B numbers every one used here
alike. Where the broker makes a choice the specification leaves open, or departs from it on
purpose, the test asserts what ``docs/decisions.md`` ("MQTT 5.0 sessions", "MQTT shared
subscriptions") records, and says so.

One broker per database serves the whole module (starting one costs seconds); each test has
client identifiers and topics of its own (the ``t`` prefix), so none sees another's state.
The test that stops the broker has its own (the ``broker`` fixture).

==================  ===============================================================================
Statement           Test
==================  ===============================================================================
MQTT-3.1.2-4        test_MQTT_3_1_2_4_clean_start_discards_the_existing_session
MQTT-3.1.2-5        test_MQTT_3_1_2_5_clean_start_0_resumes_the_existing_session
MQTT-3.1.2-6        test_MQTT_3_1_2_6_clean_start_0_without_a_session_creates_one
MQTT-3.1.2-8        test_MQTT_3_1_2_8_the_will_is_published_once_its_delay_has_passed
MQTT-3.1.2-10       test_MQTT_3_1_2_10_a_published_will_is_removed_from_the_session
MQTT-3.1.2-14       test_MQTT_3_1_2_14_will_retain_0_publishes_the_will_not_retained
MQTT-3.1.2-15       test_MQTT_3_1_2_15_will_retain_1_publishes_the_will_retained
MQTT-3.1.2-22       test_MQTT_3_1_2_22_a_client_silent_for_one_and_a_half_keepalives_is_disconnected
MQTT-3.1.2-23       test_MQTT_3_1_2_23_a_session_with_an_expiry_interval_outlives_its_connection
MQTT-3.1.2-24       test_MQTT_3_1_2_24_no_packet_over_the_clients_maximum_packet_size_is_sent
MQTT-3.1.2-25       test_MQTT_3_1_2_25_a_packet_too_large_is_discarded_as_if_sent
MQTT-3.1.2-26       test_MQTT_3_1_2_26_no_topic_alias_over_the_clients_maximum_is_sent
MQTT-3.1.2-27       test_MQTT_3_1_2_27_no_topic_alias_is_sent_to_a_client_that_takes_none
MQTT-3.1.2-29       test_MQTT_3_1_2_29_no_reason_string_or_user_property_when_problem_information_is_0
MQTT-3.1.3-6        test_MQTT_3_1_3_6_an_empty_client_identifier_is_given_a_unique_one
MQTT-3.1.3-7        test_MQTT_3_1_3_7_the_assigned_client_identifier_is_told_and_used
MQTT-3.1.3-9        test_MQTT_3_1_3_9_no_will_when_the_client_is_back_within_the_will_delay
MQTT-3.1.3-10       test_MQTT_3_1_3_10_the_will_keeps_the_order_of_its_user_properties
MQTT-3.1.4-3        test_MQTT_3_1_4_3_a_second_connection_takes_the_session_over_with_0x8e
MQTT-3.2.2-2        test_MQTT_3_2_2_2_clean_start_1_is_answered_session_present_0
MQTT-3.2.2-3        test_MQTT_3_2_2_3_clean_start_0_is_answered_whether_a_session_is_present
MQTT-3.2.2-6        test_MQTT_3_2_2_6_a_refusal_says_session_present_0
MQTT-3.2.2-7        test_MQTT_3_2_2_7_a_connack_of_0x80_or_more_closes_the_connection
MQTT-3.2.2-16       test_MQTT_3_2_2_16_an_assigned_client_identifier_is_used_by_no_other_session
MQTT-3.3.1-9        test_MQTT_3_3_1_9_retain_handling_0_sends_the_retained_publications
MQTT-3.3.1-10       test_MQTT_3_3_1_10_retain_handling_1_sends_them_for_a_new_subscription_only
MQTT-3.3.1-11       test_MQTT_3_3_1_11_retain_handling_2_sends_none
MQTT-3.3.1-12       test_MQTT_3_3_1_12_retain_as_published_0_clears_the_retain_flag
MQTT-3.3.1-13       test_MQTT_3_3_1_13_retain_as_published_1_keeps_the_retain_flag
MQTT-3.3.2-4        test_MQTT_3_3_2_4_the_payload_format_indicator_is_sent_unaltered
MQTT-3.3.2-5        test_MQTT_3_3_2_5_an_expired_publication_is_not_delivered
MQTT-3.3.2-6        test_MQTT_3_3_2_6_the_expiry_interval_sent_is_what_is_left_of_it
MQTT-3.3.2-7        test_MQTT_3_3_2_7_topic_aliases_end_with_their_connection
MQTT-3.3.2-12       test_MQTT_3_3_2_12_every_topic_alias_up_to_the_maximum_is_accepted
MQTT-3.3.2-15       test_MQTT_3_3_2_15_the_response_topic_is_sent_unaltered
MQTT-3.3.2-16       test_MQTT_3_3_2_16_the_correlation_data_is_sent_unaltered
MQTT-3.3.2-17       test_MQTT_3_3_2_17_every_user_property_is_sent_unaltered
MQTT-3.3.2-18       test_MQTT_3_3_2_18_user_properties_keep_their_order
MQTT-3.3.2-20       test_MQTT_3_3_2_20_the_content_type_is_sent_unaltered
MQTT-3.3.4-3        test_MQTT_3_3_4_3_a_delivery_carries_its_subscriptions_identifier
MQTT-3.3.4-4        test_MQTT_3_3_4_4_one_copy_carries_the_identifiers_of_every_matching_subscription
MQTT-3.3.4-5        test_MQTT_3_3_4_5_each_copy_carries_the_identifier_of_its_own_subscription
MQTT-3.3.4-6        test_MQTT_3_3_4_6_a_subscription_identifier_from_a_client_is_a_protocol_error
MQTT-3.3.4-9        test_MQTT_3_3_4_9_no_more_unacknowledged_than_the_clients_receive_maximum
MQTT-3.3.4-10       test_MQTT_3_3_4_10_other_packets_are_not_held_back_by_a_full_receive_maximum
MQTT-3.4.2-1        test_MQTT_3_4_2_1_puback_carries_a_puback_reason_code
MQTT-3.5.2-1        test_MQTT_3_5_2_1_pubrec_carries_a_pubrec_reason_code
MQTT-3.6.2-1        test_MQTT_3_6_2_1_pubrel_carries_a_pubrel_reason_code
MQTT-3.7.2-1        test_MQTT_3_7_2_1_pubcomp_carries_a_pubcomp_reason_code
MQTT-3.8.3-3        test_MQTT_3_8_3_3_no_local_keeps_a_clients_own_publications_from_it
MQTT-3.8.4-3        test_MQTT_3_8_4_3_a_subscription_of_the_same_filter_replaces_the_old_one
MQTT-3.8.4-4        test_MQTT_3_8_4_4_resubscribing_with_retain_handling_0_sends_the_retained_again
MQTT-3.8.4-6        test_MQTT_3_8_4_6_suback_has_a_reason_code_for_each_filter
MQTT-3.8.4-8        test_MQTT_3_8_4_8_a_delivery_has_the_lesser_of_published_and_granted_qos
MQTT-3.9.3-1        test_MQTT_3_9_3_1_suback_codes_are_in_the_order_of_the_filters
MQTT-3.9.3-2        test_MQTT_3_9_3_2_a_refused_filter_gets_a_subscribe_reason_code
MQTT-3.10.4-5       test_MQTT_3_10_4_5_unsuback_answers_even_when_nothing_was_subscribed
MQTT-3.11.3-2       test_MQTT_3_11_3_2_unsuback_has_an_unsubscribe_reason_code_for_each_filter
MQTT-3.14.0-1       test_MQTT_3_14_0_1_no_disconnect_before_a_successful_connack
MQTT-3.14.1-1       test_MQTT_3_14_1_1_disconnect_reserved_bits_are_malformed_0x81
MQTT-3.14.2-2       test_MQTT_3_14_2_2_the_servers_disconnect_has_no_session_expiry_interval
MQTT-3.14.4-1       test_MQTT_3_14_4_1_nothing_is_sent_after_the_servers_disconnect
MQTT-3.14.4-3       test_MQTT_3_14_4_3_a_normal_disconnect_discards_the_will
MQTT-4.1.0-1        test_MQTT_4_1_0_1_the_session_lasts_while_its_connection_is_open
MQTT-4.1.0-2        test_MQTT_4_1_0_2_the_session_is_discarded_once_its_expiry_interval_has_passed
MQTT-4.3.3-9        test_MQTT_4_3_3_9_after_a_refusing_pubrec_the_packet_identifier_is_new
MQTT-4.4.0-2        test_MQTT_4_4_0_2_a_puback_of_0x80_or_more_acknowledges_the_delivery
MQTT-4.8.2-3        test_MQTT_4_8_2_3_a_share_member_gets_its_granted_qos
MQTT-4.8.2-4        test_MQTT_4_8_2_4_a_qos2_delivery_to_a_member_is_completed_when_it_returns
MQTT-4.8.2-6        test_MQTT_4_8_2_6_a_refusing_puback_from_a_member_discards_the_message
MQTT-4.9.0-3        test_MQTT_4_9_0_3_pings_and_acknowledgements_go_on_at_a_zero_send_quota
MQTT-4.12.0-1       test_MQTT_4_12_0_1_an_unsupported_authentication_method_is_refused_0x8c
MQTT-4.12.0-6       test_MQTT_4_12_0_6_no_auth_and_no_authentication_method_without_one_asked
MQTT-4.12.0-7       test_MQTT_4_12_0_7_an_auth_from_a_client_without_a_method_is_a_protocol_error
MQTT-4.13.1-1       test_MQTT_4_13_1_1_a_malformed_packet_closes_the_connection
MQTT-4.13.2-1       test_MQTT_4_13_2_1_a_disconnect_of_0x80_or_more_closes_the_connection
section 3.1.2.11.2  test_section_3_1_2_11_2_no_session_expiry_interval_ends_the_session_with_it
section 3.1.2.11.6  test_section_3_1_2_11_6_response_information_is_a_topic_prefix_of_its_own
section 3.1.3.2     test_section_3_1_3_2_will_properties_go_with_the_will_message
section 3.8.2.1.2   test_section_3_8_2_1_2_a_subscribe_without_an_identifier_removes_it
section 3.14.2.1    test_section_3_14_2_1_disconnect_with_will_message_publishes_the_will
section 3.14.2.1    test_section_3_14_2_1_a_server_shutting_down_says_0x8b
section 3.14.2.2.2  test_section_3_14_2_2_2_a_disconnect_may_end_the_session_with_it
section 4.8.2       test_section_4_8_2_each_publication_reaches_one_member_of_a_share
section 4.8.2       test_section_4_8_2_no_retained_publication_for_a_shared_subscription
==================  ===============================================================================
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator

import pytest

from broker.protocol.mqtt import (
    MQTT_5,
    NO_PROPERTIES,
    Auth,
    ConnAck,
    Disconnect,
    Packet,
    PingReq,
    PingResp,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
    SubAck,
    Subscribe,
    SubscriptionOptions,
    UnsubAck,
    Unsubscribe,
    Will,
)
from broker.protocol.mqtt.v5.reasons import REASON_CODES
from broker.store import mqtt
from tests.broker.service.mqtt.clients import MqttBroker, Raw, eventually
from tests.conftest import DIALECTS, PostgresDatabases
from tests.e2e.processes import Brokers

LASTING = Properties(session_expiry_interval=300)  # a session that outlives its connection
QUIET = 0.6  # seconds a test waits to see that nothing more comes


@pytest.fixture(scope="module", params=DIALECTS)
def five(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MqttBroker]:
    """One ``broker serve --mqtt`` for the module, on an empty database of each dialect."""
    workdir = tmp_path_factory.mktemp(f"conformance-{request.param}")
    postgres: PostgresDatabases | None = None
    if request.param == "postgresql":
        postgres = request.getfixturevalue("postgres")
        url = postgres.create()
    else:
        url = f"sqlite:///{workdir / 'broker.db'}"
    group = Brokers(url, workdir)
    try:
        yield MqttBroker(group)
    finally:
        group.close()
        if postgres is not None:
            postgres.drop(url)


@pytest.fixture
def t(request: pytest.FixtureRequest) -> str:
    """This test's own prefix for client identifiers and topics."""
    return "c" + hashlib.sha1(request.node.name.encode()).hexdigest()[:10]


# -- clients -------------------------------------------------------------------------------


def client(
    broker: MqttBroker,
    client_id: str,
    *,
    clean: bool = True,
    will: Will | None = None,
    keepalive: int = 60,
    properties: Properties = NO_PROPERTIES,
) -> tuple[Raw, ConnAck]:
    """A raw MQTT 5.0 client whose CONNECT was accepted, and its CONNACK."""
    raw = Raw(broker.port, level=MQTT_5)
    connack = raw.connect(client_id, clean=clean, will=will, keepalive=keepalive, properties=properties)
    assert isinstance(connack, ConnAck) and connack.return_code == ReasonCode.SUCCESS, connack
    return raw, connack


def subscribe(
    raw: Raw, *filters: tuple[str, int], packet_id: int = 1, identifier: int = 0
) -> tuple[int, ...]:
    """The SUBACK's reason codes for ``filters`` (filter, Subscription Options byte)."""
    properties = Properties(subscription_identifiers=(identifier,)) if identifier else NO_PROPERTIES
    raw.send(Subscribe(packet_id, tuple(filters), properties))
    answer = raw.next()
    assert isinstance(answer, SubAck) and answer.packet_id == packet_id, answer
    return answer.return_codes


def publish(broker: MqttBroker, t: str, *publications: Publish) -> None:
    """``publications`` from a client of their own, each QoS 1 or 2 one acknowledged Success."""
    raw, _ = client(broker, f"{t}-pub")
    for publication in publications:
        raw.send(publication)
        packet_id = publication.packet_id or 0
        if publication.qos == 1:
            assert raw.next() == PubAck(packet_id), publication
        elif publication.qos == 2:
            assert raw.next() == PubRec(packet_id), publication
            raw.send(PubRel(packet_id))
            assert raw.next() == PubComp(packet_id), publication
    raw.send(Disconnect())
    raw.close()


def delivery(raw: Raw, timeout: float = 10.0) -> Publish:
    packet = raw.next(timeout)
    assert isinstance(packet, Publish), packet
    return packet


def quiet(raw: Raw, wait: float = QUIET) -> bool:
    """Whether nothing arrives within ``wait`` seconds."""
    try:
        packet = raw.next(timeout=wait)
    except TimeoutError:
        return True
    raise AssertionError(f"unexpected {packet!r}")


def sent_over(raw: Raw) -> tuple[Packet, bool]:
    """The packet the server sends, and whether it then closes the connection with nothing more."""
    packet = raw.next()
    return packet, ends(raw)


def ends(raw: Raw, timeout: float = 10.0) -> bool:
    """Whether the server closes the connection without sending anything more."""
    if raw.pending:
        return False
    raw.sock.settimeout(timeout)
    try:
        return raw.sock.recv(65536) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def stored(broker: MqttBroker, client_id: str) -> mqtt.StoredSession | None:
    with broker.qm.reading() as conn:
        return mqtt.find_session(conn, client_id)


def gone(raw: Raw) -> None:
    """Lose the connection without DISCONNECT."""
    raw.close()
    time.sleep(0.2)


def watcher(broker: MqttBroker, t: str, topic: str) -> Raw:
    raw, _ = client(broker, f"{t}-watch")
    assert subscribe(raw, (topic, SubscriptionOptions.of(1, retain_as_published=True))) == (1,)
    return raw


def lasting(broker: MqttBroker, client_id: str, *filters: tuple[str, int]) -> None:
    """A persistent session of ``client_id`` with ``filters``, its client gone."""
    raw, _ = client(broker, client_id, properties=LASTING)
    subscribe(raw, *filters)
    raw.send(Disconnect())
    assert raw.closed_by_broker()


def back(broker: MqttBroker, client_id: str, properties: Properties = LASTING) -> tuple[Raw, ConnAck]:
    return client(broker, client_id, clean=False, properties=properties)


# -- sessions: Clean Start, Session Expiry Interval ----------------------------------------


def test_MQTT_3_1_2_4_clean_start_discards_the_existing_session(five: MqttBroker, t: str) -> None:
    lasting(five, f"{t}-s", (f"{t}/x", 1))
    raw, connack = client(five, f"{t}-s", clean=True, properties=LASTING)
    assert not connack.session_present
    publish(five, t, Publish(f"{t}/x", b"after", 1, packet_id=1))
    assert quiet(raw)


def test_MQTT_3_1_2_5_clean_start_0_resumes_the_existing_session(five: MqttBroker, t: str) -> None:
    lasting(five, f"{t}-s", (f"{t}/x", 1))
    publish(five, t, Publish(f"{t}/x", b"while away", 1, packet_id=1))
    raw, connack = back(five, f"{t}-s")
    assert connack.session_present
    assert delivery(raw).payload == b"while away"


def test_MQTT_3_1_2_6_clean_start_0_without_a_session_creates_one(five: MqttBroker, t: str) -> None:
    _, connack = back(five, f"{t}-s")
    assert not connack.session_present
    found = stored(five, f"{t}-s")
    assert found is not None and found.online


def test_MQTT_3_1_2_23_a_session_with_an_expiry_interval_outlives_its_connection(
    five: MqttBroker, t: str
) -> None:
    lasting(five, f"{t}-s", (f"{t}/x", 1))

    def kept() -> bool:
        found = stored(five, f"{t}-s")
        return found is not None and not found.online and found.expiry == 300

    assert eventually(kept)


def test_section_3_1_2_11_2_no_session_expiry_interval_ends_the_session_with_it(
    five: MqttBroker, t: str
) -> None:
    raw, _ = client(five, f"{t}-s", clean=False)
    subscribe(raw, (f"{t}/x", 1))
    raw.send(Disconnect())
    assert raw.closed_by_broker()
    assert eventually(lambda: stored(five, f"{t}-s") is None)
    _, connack = back(five, f"{t}-s")
    assert not connack.session_present


def test_MQTT_4_1_0_1_the_session_lasts_while_its_connection_is_open(five: MqttBroker, t: str) -> None:
    raw, _ = client(five, f"{t}-s", properties=Properties(session_expiry_interval=1))
    subscribe(raw, (f"{t}/x", 1))
    time.sleep(1.5)  # longer than its expiry interval, connected all along
    publish(five, t, Publish(f"{t}/x", b"still here", 1, packet_id=1))
    assert delivery(raw).payload == b"still here"


def test_MQTT_4_1_0_2_the_session_is_discarded_once_its_expiry_interval_has_passed(
    five: MqttBroker, t: str
) -> None:
    """The gateway checks the interval at CONNECT: an expired session not yet removed by
    housekeeping is not resumed (decisions.md, "Session Expiry Interval")."""
    raw, _ = client(five, f"{t}-s", properties=Properties(session_expiry_interval=1))
    subscribe(raw, (f"{t}/x", 1))
    raw.send(Disconnect())
    assert raw.closed_by_broker()
    publish(five, t, Publish(f"{t}/x", b"for a gone session", 1, packet_id=1))
    time.sleep(1.5)
    again, connack = back(five, f"{t}-s", Properties(session_expiry_interval=1))
    assert not connack.session_present
    assert quiet(again)


def test_section_3_14_2_2_2_a_disconnect_may_end_the_session_with_it(five: MqttBroker, t: str) -> None:
    raw, _ = client(five, f"{t}-s", properties=LASTING)
    subscribe(raw, (f"{t}/x", 1))
    raw.send(Disconnect(properties=Properties(session_expiry_interval=0)))
    assert raw.closed_by_broker()
    assert eventually(lambda: stored(five, f"{t}-s") is None)


def test_MQTT_3_2_2_2_clean_start_1_is_answered_session_present_0(five: MqttBroker, t: str) -> None:
    lasting(five, f"{t}-s", (f"{t}/x", 1))
    _, connack = client(five, f"{t}-s", clean=True, properties=LASTING)
    assert (connack.session_present, connack.return_code) == (False, ReasonCode.SUCCESS)


def test_MQTT_3_2_2_3_clean_start_0_is_answered_whether_a_session_is_present(
    five: MqttBroker, t: str
) -> None:
    first, connack = back(five, f"{t}-s")
    assert (connack.session_present, connack.return_code) == (False, ReasonCode.SUCCESS)
    first.send(Disconnect())
    assert first.closed_by_broker()
    _, connack = back(five, f"{t}-s")
    assert (connack.session_present, connack.return_code) == (True, ReasonCode.SUCCESS)


def test_MQTT_3_2_2_6_a_refusal_says_session_present_0(five: MqttBroker, t: str) -> None:
    lasting(five, f"{t}-s", (f"{t}/x", 1))
    raw = Raw(five.port, level=MQTT_5)
    answer = raw.connect(f"{t}-s", clean=False, password=b"wrong", properties=LASTING)
    assert answer == ConnAck(False, ReasonCode.BAD_USER_NAME_OR_PASSWORD)


def test_MQTT_3_2_2_7_a_connack_of_0x80_or_more_closes_the_connection(five: MqttBroker, t: str) -> None:
    raw = Raw(five.port, level=MQTT_5)
    assert raw.connect(f"{t}-s", password=b"wrong") == ConnAck(False, ReasonCode.BAD_USER_NAME_OR_PASSWORD)
    assert ends(raw)


def test_MQTT_3_14_0_1_no_disconnect_before_a_successful_connack(five: MqttBroker, t: str) -> None:
    refused = Raw(five.port, level=MQTT_5)
    answer = refused.connect(f"{t}-s", password=b"wrong")
    assert isinstance(answer, ConnAck) and answer.return_code >= 0x80
    assert ends(refused)  # no DISCONNECT after it


# -- Assigned Client Identifier --------------------------------------------------------------


def test_MQTT_3_1_3_6_an_empty_client_identifier_is_given_a_unique_one(five: MqttBroker) -> None:
    assigned = {client(five, "")[1].properties.assigned_client_identifier for _ in range(3)}
    assert len(assigned) == 3 and None not in assigned


def test_MQTT_3_1_3_7_the_assigned_client_identifier_is_told_and_used(five: MqttBroker) -> None:
    raw, connack = client(five, "", properties=LASTING)
    assigned = connack.properties.assigned_client_identifier
    assert assigned
    subscribe(raw, (f"{assigned}/x", 1))
    raw.send(Disconnect())
    assert raw.closed_by_broker()
    _, again = back(five, assigned)  # the session is the one of that identifier
    assert again.session_present and again.properties.assigned_client_identifier is None


def test_MQTT_3_2_2_16_an_assigned_client_identifier_is_used_by_no_other_session(five: MqttBroker) -> None:
    _, connack = client(five, "")
    assigned = connack.properties.assigned_client_identifier or ""
    with five.qm.reading() as conn:
        holders = [row for row in mqtt.list_sessions(conn) if row.client_id == assigned]
    assert len(holders) == 1


# -- server DISCONNECT with a reason -----------------------------------------------------


def test_MQTT_3_1_4_3_a_second_connection_takes_the_session_over_with_0x8e(five: MqttBroker, t: str) -> None:
    first, _ = client(five, f"{t}-s")
    client(five, f"{t}-s")
    assert sent_over(first) == (Disconnect(ReasonCode.SESSION_TAKEN_OVER), True)


def test_MQTT_3_14_2_2_the_servers_disconnect_has_no_session_expiry_interval(
    five: MqttBroker, t: str
) -> None:
    first, _ = client(five, f"{t}-s", properties=LASTING)
    client(five, f"{t}-s", clean=False, properties=LASTING)
    told = first.next()
    assert isinstance(told, Disconnect) and told.properties.session_expiry_interval is None


def test_MQTT_3_14_4_1_nothing_is_sent_after_the_servers_disconnect(five: MqttBroker, t: str) -> None:
    first, _ = client(five, f"{t}-s")
    subscribe(first, (f"{t}/x", 0))
    client(five, f"{t}-s", clean=False)
    assert first.next() == Disconnect(ReasonCode.SESSION_TAKEN_OVER)
    publish(five, t, Publish(f"{t}/x", b"for the new connection"))
    assert ends(first)


def test_MQTT_3_1_2_22_a_client_silent_for_one_and_a_half_keepalives_is_disconnected(
    five: MqttBroker, t: str
) -> None:
    """Told 0x8D Keep Alive timeout first (decisions.md, "DISCONNECT from the server")."""
    raw, _ = client(five, f"{t}-s", keepalive=1)
    began = time.monotonic()
    assert sent_over(raw) == (Disconnect(ReasonCode.KEEP_ALIVE_TIMEOUT), True)
    assert 1.4 <= time.monotonic() - began <= 4


def test_MQTT_4_13_1_1_a_malformed_packet_closes_the_connection(five: MqttBroker, t: str) -> None:
    raw, _ = client(five, f"{t}-s")
    raw.send_bytes(b"\x36\x05\x00\x01t\x00\x00")  # PUBLISH with both QoS bits set [MQTT-3.3.1-4]
    assert sent_over(raw) == (Disconnect(ReasonCode.MALFORMED_PACKET), True)


def test_MQTT_4_13_2_1_a_disconnect_of_0x80_or_more_closes_the_connection(five: MqttBroker, t: str) -> None:
    raw, _ = client(five, f"{t}-s")
    raw.send(Publish("", b"", properties=Properties(topic_alias=3)))  # an alias never set
    packet, closed = sent_over(raw)
    assert isinstance(packet, Disconnect) and packet.reason_code >= 0x80 and closed


def test_MQTT_3_14_1_1_disconnect_reserved_bits_are_malformed_0x81(five: MqttBroker, t: str) -> None:
    raw, _ = client(five, f"{t}-s")
    raw.send_bytes(b"\xe1\x00")  # DISCONNECT with a reserved flag bit set
    assert sent_over(raw) == (Disconnect(ReasonCode.MALFORMED_PACKET), True)


def test_section_3_14_2_1_a_server_shutting_down_says_0x8b(broker: MqttBroker) -> None:
    raw, _ = client(broker, "leaving")
    broker.process.terminate()
    assert sent_over(raw) == (Disconnect(ReasonCode.SERVER_SHUTTING_DOWN), True)


# -- wills ----------------------------------------------------------------------------------


def will(t: str, *, retain: bool = False, **properties: object) -> Will:
    return Will(f"{t}/status", b"gone", 1, retain, Properties(**properties))  # type: ignore[arg-type]


def test_MQTT_3_1_2_8_the_will_is_published_once_its_delay_has_passed(five: MqttBroker, t: str) -> None:
    status = watcher(five, t, f"{t}/status")
    raw, _ = client(five, f"{t}-s", will=will(t, will_delay_interval=1), properties=LASTING)
    left = time.monotonic()
    gone(raw)
    assert quiet(status, 0.5)
    assert delivery(status, timeout=5).payload == b"gone"
    assert time.monotonic() - left >= 1


def test_MQTT_3_1_3_9_no_will_when_the_client_is_back_within_the_will_delay(five: MqttBroker, t: str) -> None:
    status = watcher(five, t, f"{t}/status")
    raw, _ = client(five, f"{t}-s", will=will(t, will_delay_interval=1), properties=LASTING)
    gone(raw)
    back(five, f"{t}-s")
    assert quiet(status, 1.5)


def test_MQTT_3_1_2_10_a_published_will_is_removed_from_the_session(five: MqttBroker, t: str) -> None:
    status = watcher(five, t, f"{t}/status")
    raw, _ = client(five, f"{t}-s", will=will(t), properties=LASTING)
    gone(raw)
    assert delivery(status).payload == b"gone"
    again, connack = back(five, f"{t}-s")  # the same session, resumed without a will
    assert connack.session_present
    gone(again)
    assert quiet(status)


def test_MQTT_3_1_2_14_will_retain_0_publishes_the_will_not_retained(five: MqttBroker, t: str) -> None:
    status = watcher(five, t, f"{t}/status")
    raw, _ = client(five, f"{t}-s", will=will(t, retain=False))
    gone(raw)
    assert not delivery(status).retain
    late, _ = client(five, f"{t}-late")
    subscribe(late, (f"{t}/status", 1))
    assert quiet(late)


def test_MQTT_3_1_2_15_will_retain_1_publishes_the_will_retained(five: MqttBroker, t: str) -> None:
    raw, _ = client(five, f"{t}-s", will=will(t, retain=True))
    gone(raw)
    late, _ = client(five, f"{t}-late")
    assert eventually(lambda: _retained_sent(late, t))


def _retained_sent(raw: Raw, t: str) -> bool:
    """Whether a new subscription of ``t``/status is sent a retained publication."""
    subscribe(raw, (f"{t}/status", 1), packet_id=7)
    try:
        got = raw.next(timeout=0.5)
    except TimeoutError:
        return False
    assert isinstance(got, Publish) and got.retain and got.payload == b"gone"
    return True


def test_MQTT_3_1_3_10_the_will_keeps_the_order_of_its_user_properties(five: MqttBroker, t: str) -> None:
    status = watcher(five, t, f"{t}/status")
    pairs = (("b", "2"), ("a", "1"), ("b", "3"), ("a", "0"))
    raw, _ = client(five, f"{t}-s", will=will(t, user_properties=pairs))
    gone(raw)
    assert delivery(status).properties.user_properties == pairs


def test_section_3_1_3_2_will_properties_go_with_the_will_message(five: MqttBroker, t: str) -> None:
    status = watcher(five, t, f"{t}/status")
    sent = will(
        t,
        payload_format_indicator=1,
        message_expiry_interval=600,
        content_type="text/plain",
        response_topic=f"{t}/replies",
        correlation_data=b"\x00\x01",
    )
    raw, _ = client(five, f"{t}-s", will=sent)
    gone(raw)
    got = delivery(status).properties
    assert (got.payload_format_indicator, got.content_type, got.response_topic, got.correlation_data) == (
        1,
        "text/plain",
        f"{t}/replies",
        b"\x00\x01",
    )
    assert got.message_expiry_interval is not None and 595 <= got.message_expiry_interval <= 600


def test_MQTT_3_14_4_3_a_normal_disconnect_discards_the_will(five: MqttBroker, t: str) -> None:
    status = watcher(five, t, f"{t}/status")
    raw, _ = client(five, f"{t}-s", will=will(t))
    raw.send(Disconnect(ReasonCode.NORMAL_DISCONNECTION))
    assert raw.closed_by_broker()
    assert quiet(status)


def test_section_3_14_2_1_disconnect_with_will_message_publishes_the_will(five: MqttBroker, t: str) -> None:
    status = watcher(five, t, f"{t}/status")
    raw, _ = client(five, f"{t}-s", will=will(t))
    raw.send(Disconnect(ReasonCode.DISCONNECT_WITH_WILL_MESSAGE))
    assert raw.closed_by_broker()
    assert delivery(status).payload == b"gone"


# -- Maximum Packet Size, Receive Maximum, topic aliases ---------------------------------------


def test_MQTT_3_1_2_24_no_packet_over_the_clients_maximum_packet_size_is_sent(
    five: MqttBroker, t: str
) -> None:
    raw, _ = client(five, f"{t}-s", properties=Properties(maximum_packet_size=64))
    subscribe(raw, (f"{t}/#", 1))
    publish(
        five,
        t,
        Publish(f"{t}/big", b"x" * 100, 1, packet_id=1),
        Publish(f"{t}/small", b"small", 1, packet_id=2),
    )
    got = delivery(raw)
    assert (got.topic, got.payload) == (f"{t}/small", b"small")


def test_MQTT_3_1_2_25_a_packet_too_large_is_discarded_as_if_sent(five: MqttBroker, t: str) -> None:
    small = Properties(session_expiry_interval=300, maximum_packet_size=64)
    raw, _ = client(five, f"{t}-s", properties=small)
    subscribe(raw, (f"{t}/#", 1))
    publish(five, t, Publish(f"{t}/big", b"x" * 100, 1, packet_id=1))
    assert quiet(raw)
    gone(raw)
    again, connack = back(five, f"{t}-s")  # no limit now: nothing was left to send
    assert connack.session_present and quiet(again)


def test_MQTT_3_3_4_9_no_more_unacknowledged_than_the_clients_receive_maximum(
    five: MqttBroker, t: str
) -> None:
    raw, _ = client(five, f"{t}-s", properties=Properties(receive_maximum=2))
    subscribe(raw, (f"{t}/x", 1))
    publish(five, t, *(Publish(f"{t}/x", b"%d" % n, 1, packet_id=n + 1) for n in range(4)))
    first, second = delivery(raw), delivery(raw)
    assert quiet(raw)
    raw.send(PubAck(first.packet_id or 0))
    assert delivery(raw).payload == b"2"
    assert quiet(raw)
    raw.send(PubAck(second.packet_id or 0))
    assert delivery(raw).payload == b"3"


def _full(broker: MqttBroker, t: str) -> Raw:
    """A client whose Receive Maximum of 1 is taken by a delivery it does not acknowledge."""
    raw, _ = client(broker, f"{t}-s", properties=Properties(receive_maximum=1))
    subscribe(raw, (f"{t}/x", 1))
    publish(broker, t, Publish(f"{t}/x", b"0", 1, packet_id=1), Publish(f"{t}/x", b"1", 1, packet_id=2))
    assert delivery(raw).payload == b"0"
    return raw


def test_MQTT_3_3_4_10_other_packets_are_not_held_back_by_a_full_receive_maximum(
    five: MqttBroker, t: str
) -> None:
    raw = _full(five, t)
    assert subscribe(raw, (f"{t}/y", 0), packet_id=2) == (0,)
    raw.send(Unsubscribe(3, (f"{t}/y",)))
    assert raw.next() == UnsubAck(3, (ReasonCode.SUCCESS,))


def test_MQTT_4_9_0_3_pings_and_acknowledgements_go_on_at_a_zero_send_quota(five: MqttBroker, t: str) -> None:
    raw = _full(five, t)
    raw.send(PingReq())
    assert raw.next() == PingResp()
    raw.send(Publish(f"{t}/own", b"mine", 1, packet_id=9))
    assert raw.next() == PubAck(9)


def test_MQTT_3_3_2_12_every_topic_alias_up_to_the_maximum_is_accepted(five: MqttBroker, t: str) -> None:
    status = watcher(five, t, f"{t}/#")
    raw, connack = client(five, f"{t}-s")
    most = connack.properties.topic_alias_maximum or 0
    assert most >= 1
    for alias in (1, most):
        raw.send(Publish(f"{t}/{alias}", b"set", properties=Properties(topic_alias=alias)))
        raw.send(Publish("", b"used", properties=Properties(topic_alias=alias)))
    got = [(p.topic, p.payload) for p in (delivery(status) for _ in range(4))]
    assert got == [(f"{t}/1", b"set"), (f"{t}/1", b"used"), (f"{t}/{most}", b"set"), (f"{t}/{most}", b"used")]


def test_MQTT_3_3_2_7_topic_aliases_end_with_their_connection(five: MqttBroker, t: str) -> None:
    """An alias used before it is set on this connection is answered 0x94 Topic Alias invalid
    (decisions.md, "DISCONNECT from the server"; section 3.3.4 names 0x82 for it)."""
    raw, _ = client(five, f"{t}-s")
    raw.send(Publish(f"{t}/x", b"set", properties=Properties(topic_alias=1)))
    raw.send(Disconnect())
    assert raw.closed_by_broker()
    again, _ = client(five, f"{t}-s")
    again.send(Publish("", b"not here", properties=Properties(topic_alias=1)))
    assert sent_over(again) == (Disconnect(ReasonCode.TOPIC_ALIAS_INVALID), True)


def test_MQTT_3_1_2_26_no_topic_alias_over_the_clients_maximum_is_sent(five: MqttBroker, t: str) -> None:
    raw, _ = client(five, f"{t}-s", properties=Properties(topic_alias_maximum=2))
    subscribe(raw, (f"{t}/#", 0))
    topics = [f"{t}/{n}" for n in range(4)]
    publish(
        five,
        t,
        *(Publish(topic, b"once") for topic in topics),
        *(Publish(topic, b"again") for topic in topics),
    )
    got = [delivery(raw) for _ in range(8)]
    aliases = {p.properties.topic_alias for p in got} - {None}
    assert aliases and aliases <= {1, 2}
    known: dict[int, str] = {}
    for packet in got:  # each one resolves to its publication's topic
        alias = packet.properties.topic_alias
        if alias is not None and packet.topic:
            known[alias] = packet.topic
        assert (packet.topic or known[alias or 0]) in topics


def test_MQTT_3_1_2_27_no_topic_alias_is_sent_to_a_client_that_takes_none(five: MqttBroker, t: str) -> None:
    raw, _ = client(five, f"{t}-s")
    subscribe(raw, (f"{t}/x", 0))
    publish(five, t, Publish(f"{t}/x", b"1"), Publish(f"{t}/x", b"2"))
    assert [(p.topic, p.properties.topic_alias) for p in (delivery(raw), delivery(raw))] == [
        (f"{t}/x", None),
        (f"{t}/x", None),
    ]


# -- publication properties --------------------------------------------------------------


def _forwarded(broker: MqttBroker, t: str, properties: Properties) -> Properties:
    """The properties a subscriber is sent for a publication with ``properties``."""
    raw, _ = client(broker, f"{t}-s")
    subscribe(raw, (f"{t}/x", 1))
    publish(broker, t, Publish(f"{t}/x", b"body", 1, packet_id=1, properties=properties))
    return delivery(raw).properties


def test_MQTT_3_3_2_4_the_payload_format_indicator_is_sent_unaltered(five: MqttBroker, t: str) -> None:
    assert _forwarded(five, t, Properties(payload_format_indicator=1)).payload_format_indicator == 1


def test_MQTT_3_3_2_15_the_response_topic_is_sent_unaltered(five: MqttBroker, t: str) -> None:
    topic = f"{t}/replies/\u00e9t\u00e9 x"
    assert _forwarded(five, t, Properties(response_topic=topic)).response_topic == topic


def test_MQTT_3_3_2_16_the_correlation_data_is_sent_unaltered(five: MqttBroker, t: str) -> None:
    data = bytes(range(256))
    assert _forwarded(five, t, Properties(correlation_data=data)).correlation_data == data


def test_MQTT_3_3_2_20_the_content_type_is_sent_unaltered(five: MqttBroker, t: str) -> None:
    kind = 'application/json; charset="utf-8"'
    assert _forwarded(five, t, Properties(content_type=kind)).content_type == kind


def test_MQTT_3_3_2_17_every_user_property_is_sent_unaltered(five: MqttBroker, t: str) -> None:
    pairs = (("odd name!", "\u00e9t\u00e9"), ("", ""), ("<xml>", "a&b"), ("k", "\u0001"))
    assert _forwarded(five, t, Properties(user_properties=pairs)).user_properties == pairs


def test_MQTT_3_3_2_18_user_properties_keep_their_order(five: MqttBroker, t: str) -> None:
    pairs = (("site", "Winchester"), ("b", "1"), ("site", "Hursley"), ("a", "2"), ("site", "Winchester"))
    assert _forwarded(five, t, Properties(user_properties=pairs)).user_properties == pairs


def test_MQTT_3_3_2_5_an_expired_publication_is_not_delivered(five: MqttBroker, t: str) -> None:
    lasting(five, f"{t}-s", (f"{t}/#", 1))
    publish(
        five,
        t,
        Publish(f"{t}/stale", b"", 1, packet_id=1, properties=Properties(message_expiry_interval=1)),
        Publish(f"{t}/fresh", b"", 1, packet_id=2, properties=Properties(message_expiry_interval=60)),
    )
    time.sleep(1.5)
    raw, _ = back(five, f"{t}-s")
    assert delivery(raw).topic == f"{t}/fresh"
    assert quiet(raw)


def test_MQTT_3_3_2_6_the_expiry_interval_sent_is_what_is_left_of_it(five: MqttBroker, t: str) -> None:
    lasting(five, f"{t}-s", (f"{t}/#", 1))
    expiring = Properties(message_expiry_interval=60)
    publish(five, t, Publish(f"{t}/x", b"", 1, packet_id=1, properties=expiring))
    time.sleep(1.2)
    raw, _ = back(five, f"{t}-s")
    left = delivery(raw).properties.message_expiry_interval
    assert left is not None and 57 <= left <= 59


def test_MQTT_3_1_2_29_no_reason_string_or_user_property_when_problem_information_is_0(
    five: MqttBroker, t: str
) -> None:
    raw, _ = client(five, f"{t}-s", properties=Properties(request_problem_information=False))
    raw.send(Publish("$SYS/refused", b"", 1, packet_id=1))
    answer = raw.next()
    assert answer == PubAck(1, ReasonCode.NOT_AUTHORIZED) and answer.properties == NO_PROPERTIES


# -- Request / Response ------------------------------------------------------------------


def test_section_3_1_2_11_6_response_information_is_a_topic_prefix_of_its_own(
    five: MqttBroker, t: str
) -> None:
    """The broker answers Request Response Information 1 with ``mqtt_response_information`` (by
    default ``response/``), the client id and a slash (decisions.md, "MQTT 5.0 sessions")."""
    _, asked = client(five, f"{t}-s", properties=Properties(request_response_information=True))
    assert asked.properties.response_information == f"response/{t}-s/"
    _, unasked = client(five, f"{t}-other")
    assert unasked.properties.response_information is None  # [MQTT-3.1.2-28]


# -- acknowledgements and their reason codes -----------------------------------------------


def test_MQTT_3_4_2_1_puback_carries_a_puback_reason_code(five: MqttBroker, t: str) -> None:
    raw, _ = client(five, f"{t}-s")
    raw.send(Publish(f"{t}/ok", b"", 1, packet_id=1), Publish("$SYS/no", b"", 1, packet_id=2))
    answers = [raw.next(), raw.next()]
    assert answers == [PubAck(1, ReasonCode.SUCCESS), PubAck(2, ReasonCode.NOT_AUTHORIZED)]
    assert all(answer.reason_code in REASON_CODES[PubAck] for answer in answers if isinstance(answer, PubAck))


def test_MQTT_3_5_2_1_pubrec_carries_a_pubrec_reason_code(five: MqttBroker, t: str) -> None:
    raw, _ = client(five, f"{t}-s")
    raw.send(Publish(f"{t}/ok", b"", 2, packet_id=1))
    assert raw.next() == PubRec(1, ReasonCode.SUCCESS)
    raw.send(PubRel(1))
    assert raw.next() == PubComp(1)
    raw.send(Publish("$SYS/no", b"", 2, packet_id=2))
    assert raw.next() == PubRec(2, ReasonCode.NOT_AUTHORIZED)


def test_MQTT_3_6_2_1_pubrel_carries_a_pubrel_reason_code(five: MqttBroker, t: str) -> None:
    raw, _ = client(five, f"{t}-s")
    subscribe(raw, (f"{t}/x", 2))
    publish(five, t, Publish(f"{t}/x", b"exactly once", 2, packet_id=1))
    got = delivery(raw)
    assert got.qos == 2
    raw.send(PubRec(got.packet_id or 0))
    release = raw.next()
    assert release == PubRel(got.packet_id or 0) and release.reason_code in REASON_CODES[PubRel]


def test_MQTT_3_7_2_1_pubcomp_carries_a_pubcomp_reason_code(five: MqttBroker, t: str) -> None:
    raw, _ = client(five, f"{t}-s")
    raw.send(Publish(f"{t}/x", b"", 2, packet_id=4))
    assert raw.next() == PubRec(4)
    raw.send(PubRel(4))
    answer = raw.next()
    assert answer == PubComp(4) and answer.reason_code in REASON_CODES[PubComp]
    raw.send(PubRel(5))  # an id it never had: PUBCOMP all the same
    unknown = raw.next()
    assert isinstance(unknown, PubComp) and unknown.packet_id == 5
    assert unknown.reason_code in REASON_CODES[PubComp]


def test_MQTT_4_3_3_9_after_a_refusing_pubrec_the_packet_identifier_is_new(five: MqttBroker, t: str) -> None:
    status = watcher(five, t, f"{t}/#")
    raw, _ = client(five, f"{t}-s")
    raw.send(Publish("$SYS/x", b"refused", 2, packet_id=5))
    assert raw.next() == PubRec(5, ReasonCode.NOT_AUTHORIZED)
    raw.send(Publish(f"{t}/fine", b"routed", 2, packet_id=5))
    assert raw.next() == PubRec(5)
    assert delivery(status).payload == b"routed"


def test_MQTT_4_4_0_2_a_puback_of_0x80_or_more_acknowledges_the_delivery(five: MqttBroker, t: str) -> None:
    raw, _ = client(five, f"{t}-s", properties=LASTING)
    subscribe(raw, (f"{t}/x", 1))
    publish(five, t, Publish(f"{t}/x", b"refused", 1, packet_id=1))
    got = delivery(raw)
    raw.send(PubAck(got.packet_id or 0, ReasonCode.UNSPECIFIED_ERROR))
    time.sleep(0.3)
    gone(raw)
    again, connack = back(five, f"{t}-s")
    assert connack.session_present and quiet(again)  # not sent again


# -- SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK --------------------------------------------------

TOO_LONG = "x" * 10241  # a filter longer than MQ's topic strings: Topic Filter invalid


def test_MQTT_3_8_4_6_suback_has_a_reason_code_for_each_filter(five: MqttBroker, t: str) -> None:
    raw, _ = client(five, f"{t}-s")
    assert len(subscribe(raw, (f"{t}/a", 0), (TOO_LONG, 1), (f"{t}/b", 1), (f"{t}/c", 2))) == 4


def test_MQTT_3_9_3_1_suback_codes_are_in_the_order_of_the_filters(five: MqttBroker, t: str) -> None:
    raw, _ = client(five, f"{t}-s")
    assert subscribe(raw, (f"{t}/a", 2), (f"{t}/b", 0), (TOO_LONG, 1), (f"{t}/c", 1)) == (
        2,
        0,
        ReasonCode.TOPIC_FILTER_INVALID,
        1,
    )


def test_MQTT_3_9_3_2_a_refused_filter_gets_a_subscribe_reason_code(five: MqttBroker, t: str) -> None:
    raw, _ = client(five, f"{t}-s")
    codes = subscribe(raw, (TOO_LONG, 1))
    assert codes == (ReasonCode.TOPIC_FILTER_INVALID,) and set(codes) <= REASON_CODES[SubAck]


def test_MQTT_3_8_4_3_a_subscription_of_the_same_filter_replaces_the_old_one(
    five: MqttBroker, t: str
) -> None:
    raw, _ = client(five, f"{t}-s")
    assert subscribe(raw, (f"{t}/x", 0)) == (0,)
    assert subscribe(raw, (f"{t}/x", SubscriptionOptions.of(1, retain_handling=2)), packet_id=2) == (1,)
    publish(five, t, Publish(f"{t}/x", b"once", 1, packet_id=1))
    got = delivery(raw)
    assert (got.payload, got.qos) == (b"once", 1)
    raw.send(PubAck(got.packet_id or 0))
    assert quiet(raw)  # one subscription: one copy


def test_MQTT_3_8_4_4_resubscribing_with_retain_handling_0_sends_the_retained_again(
    five: MqttBroker, t: str
) -> None:
    publish(five, t, Publish(f"{t}/kept", b"retained", 1, retain=True, packet_id=1))
    raw, _ = client(five, f"{t}-s")
    for packet_id in (1, 2):
        assert subscribe(raw, (f"{t}/kept", 0), packet_id=packet_id) == (0,)
        got = delivery(raw)
        assert (got.payload, got.retain) == (b"retained", True)


def test_MQTT_3_8_4_8_a_delivery_has_the_lesser_of_published_and_granted_qos(
    five: MqttBroker, t: str
) -> None:
    raw, _ = client(five, f"{t}-s")
    assert subscribe(raw, (f"{t}/one", 1), (f"{t}/two", 2)) == (1, 2)
    sender, _ = client(five, f"{t}-pub")
    sender.send(Publish(f"{t}/one", b"", 2, packet_id=1))
    assert sender.next() == PubRec(1)
    sender.send(PubRel(1), Publish(f"{t}/two", b"", 1, packet_id=2))
    assert {sender.next(), sender.next()} == {PubComp(1), PubAck(2)}
    got = sorted((p.topic, p.qos) for p in (delivery(raw), delivery(raw)))
    assert got == [(f"{t}/one", 1), (f"{t}/two", 1)]


def test_MQTT_3_10_4_5_unsuback_answers_even_when_nothing_was_subscribed(five: MqttBroker, t: str) -> None:
    raw, _ = client(five, f"{t}-s")
    raw.send(Unsubscribe(42, (f"{t}/never",)))
    answer = raw.next()
    assert isinstance(answer, UnsubAck) and answer.packet_id == 42


def test_MQTT_3_11_3_2_unsuback_has_an_unsubscribe_reason_code_for_each_filter(
    five: MqttBroker, t: str
) -> None:
    """0x00 Success for each filter, whether the session had it or not (decisions.md,
    "Reason codes": UNSUBACK has 0x00 for each filter)."""
    raw, _ = client(five, f"{t}-s")
    subscribe(raw, (f"{t}/a", 1))
    raw.send(Unsubscribe(2, (f"{t}/a", f"{t}/never", f"{t}/+")))
    answer = raw.next()
    assert answer == UnsubAck(2, (ReasonCode.SUCCESS,) * 3)


# -- subscription options ----------------------------------------------------------------


def _retained(broker: MqttBroker, t: str) -> Raw:
    """A client, once ``t``/kept holds a retained publication."""
    publish(broker, t, Publish(f"{t}/kept", b"retained", 1, retain=True, packet_id=1))
    raw, _ = client(broker, f"{t}-s")
    return raw


def test_MQTT_3_3_1_9_retain_handling_0_sends_the_retained_publications(five: MqttBroker, t: str) -> None:
    raw = _retained(five, t)
    subscribe(raw, (f"{t}/#", SubscriptionOptions.of(1, retain_handling=0)))
    got = delivery(raw)
    assert (got.topic, got.payload, got.retain) == (f"{t}/kept", b"retained", True)


def test_MQTT_3_3_1_10_retain_handling_1_sends_them_for_a_new_subscription_only(
    five: MqttBroker, t: str
) -> None:
    raw = _retained(five, t)
    once = SubscriptionOptions.of(0, retain_handling=1)
    subscribe(raw, (f"{t}/#", once))
    assert delivery(raw).payload == b"retained"
    subscribe(raw, (f"{t}/#", once), packet_id=2)
    assert quiet(raw)


def test_MQTT_3_3_1_11_retain_handling_2_sends_none(five: MqttBroker, t: str) -> None:
    raw = _retained(five, t)
    subscribe(raw, (f"{t}/#", SubscriptionOptions.of(1, retain_handling=2)))
    assert quiet(raw)


def _flags(broker: MqttBroker, t: str, retain_as_published: bool) -> bool:
    """The RETAIN flag of a live delivery of a retained publication."""
    raw, _ = client(broker, f"{t}-s")
    subscribe(raw, (f"{t}/x", SubscriptionOptions.of(0, retain_as_published=retain_as_published)))
    publish(broker, t, Publish(f"{t}/x", b"kept", 1, retain=True, packet_id=1))
    return delivery(raw).retain


def test_MQTT_3_3_1_12_retain_as_published_0_clears_the_retain_flag(five: MqttBroker, t: str) -> None:
    assert _flags(five, t, retain_as_published=False) is False


def test_MQTT_3_3_1_13_retain_as_published_1_keeps_the_retain_flag(five: MqttBroker, t: str) -> None:
    assert _flags(five, t, retain_as_published=True) is True


def test_MQTT_3_8_3_3_no_local_keeps_a_clients_own_publications_from_it(five: MqttBroker, t: str) -> None:
    raw, _ = client(five, f"{t}-s")
    subscribe(raw, (f"{t}/#", SubscriptionOptions.of(1, no_local=True)))
    raw.send(Publish(f"{t}/x", b"mine", 1, packet_id=1))
    assert raw.next() == PubAck(1)
    publish(five, t, Publish(f"{t}/x", b"theirs", 1, packet_id=1))
    assert delivery(raw).payload == b"theirs"


# -- Subscription Identifiers ----------------------------------------------------------------


def test_MQTT_3_3_4_3_a_delivery_carries_its_subscriptions_identifier(five: MqttBroker, t: str) -> None:
    raw, _ = client(five, f"{t}-s")
    subscribe(raw, (f"{t}/x", 0), identifier=268_435_455)
    publish(five, t, Publish(f"{t}/x", b""))
    assert delivery(raw).properties.subscription_identifiers == (268_435_455,)


def test_MQTT_3_3_4_4_one_copy_carries_the_identifiers_of_every_matching_subscription(
    five: MqttBroker, t: str
) -> None:
    raw, _ = client(five, f"{t}-s")
    subscribe(raw, (f"{t}/+", 0), identifier=7)
    subscribe(raw, (f"{t}/#", 0), packet_id=2, identifier=3)
    subscribe(raw, (f"{t}/x", 0), packet_id=3)  # no identifier
    publish(five, t, Publish(f"{t}/x", b""))
    assert sorted(delivery(raw).properties.subscription_identifiers) == [3, 7]
    assert quiet(raw)


def test_MQTT_3_3_4_5_each_copy_carries_the_identifier_of_its_own_subscription(
    five: MqttBroker, t: str
) -> None:
    """A shared and a plain subscription of one session make two copies (decisions.md, "MQTT
    shared subscriptions"), each with its own subscription's identifier."""
    raw, _ = client(five, f"{t}-s")
    subscribe(raw, (f"$share/g/{t}/x", 0), identifier=7)
    subscribe(raw, (f"{t}/#", 0), packet_id=2, identifier=3)
    publish(five, t, Publish(f"{t}/x", b""))
    copies = sorted(delivery(raw).properties.subscription_identifiers for _ in range(2))
    assert copies == [(3,), (7,)]


def test_section_3_8_2_1_2_a_subscribe_without_an_identifier_removes_it(five: MqttBroker, t: str) -> None:
    raw, _ = client(five, f"{t}-s")
    subscribe(raw, (f"{t}/x", 0), identifier=5)
    subscribe(raw, (f"{t}/x", 0), packet_id=2)
    publish(five, t, Publish(f"{t}/x", b""))
    assert delivery(raw).properties.subscription_identifiers == ()


def test_MQTT_3_3_4_6_a_subscription_identifier_from_a_client_is_a_protocol_error(
    five: MqttBroker, t: str
) -> None:
    raw, _ = client(five, f"{t}-s")
    raw.send(Publish(f"{t}/x", b"", properties=Properties(subscription_identifiers=(1,))))
    assert sent_over(raw) == (Disconnect(ReasonCode.PROTOCOL_ERROR), True)


# -- AUTH ------------------------------------------------------------------------------------


def test_MQTT_4_12_0_1_an_unsupported_authentication_method_is_refused_0x8c(five: MqttBroker, t: str) -> None:
    raw = Raw(five.port, level=MQTT_5)
    answer = raw.connect(f"{t}-s", properties=Properties(authentication_method="SCRAM-SHA-256"))
    assert answer == ConnAck(False, ReasonCode.BAD_AUTHENTICATION_METHOD)
    assert raw.closed_by_broker()


def test_MQTT_4_12_0_6_no_auth_and_no_authentication_method_without_one_asked(
    five: MqttBroker, t: str
) -> None:
    raw, connack = client(five, f"{t}-s")
    assert connack.properties.authentication_method is None
    assert connack.properties.authentication_data is None
    raw.send(PingReq())
    assert raw.next() == PingResp() and quiet(raw)


def test_MQTT_4_12_0_7_an_auth_from_a_client_without_a_method_is_a_protocol_error(
    five: MqttBroker, t: str
) -> None:
    raw, _ = client(five, f"{t}-s")
    raw.send(Auth(ReasonCode.RE_AUTHENTICATE, Properties(authentication_method="SCRAM-SHA-256")))
    assert sent_over(raw) == (Disconnect(ReasonCode.PROTOCOL_ERROR), True)


# -- shared subscriptions ------------------------------------------------------------------


def _member(broker: MqttBroker, client_id: str, share: str, qos: int = 1, **properties: object) -> Raw:
    raw, _ = client(broker, client_id, properties=Properties(**properties))  # type: ignore[arg-type]
    assert subscribe(raw, (share, qos)) == (qos,)
    return raw


def test_section_4_8_2_each_publication_reaches_one_member_of_a_share(five: MqttBroker, t: str) -> None:
    share = f"$share/g/{t}/#"
    members = [_member(five, f"{t}-{n}", share, 0) for n in range(2)]
    publish(five, t, *(Publish(f"{t}/x", b"%d" % n) for n in range(6)))
    got: list[bytes] = []
    for member in members:
        while True:
            try:
                got.append(delivery(member, timeout=QUIET).payload)
            except TimeoutError:
                break
    assert sorted(got) == [b"%d" % n for n in range(6)]


def test_section_4_8_2_no_retained_publication_for_a_shared_subscription(five: MqttBroker, t: str) -> None:
    publish(five, t, Publish(f"{t}/kept", b"retained", 1, retain=True, packet_id=1))
    member = _member(five, f"{t}-m", f"$share/g/{t}/#")
    assert quiet(member)


def test_MQTT_4_8_2_3_a_share_member_gets_its_granted_qos(five: MqttBroker, t: str) -> None:
    member = _member(five, f"{t}-m", f"$share/g/{t}/#", qos=0)
    publish(five, t, Publish(f"{t}/x", b"at most once", 1, packet_id=1))
    got = delivery(member)
    assert (got.payload, got.qos, got.packet_id) == (b"at most once", 0, None)


def test_MQTT_4_8_2_4_a_qos2_delivery_to_a_member_is_completed_when_it_returns(
    five: MqttBroker, t: str
) -> None:
    """A QoS 2 delivery is its member's for good, whether it went before PUBREC or after:
    its session sends it again (or PUBREL) when it resumes, and no other member gets it
    (decisions.md, "MQTT shared subscriptions")."""
    share = f"$share/g/{t}/#"
    first = _member(five, f"{t}-m1", share, qos=2, session_expiry_interval=300)
    publish(five, t, Publish(f"{t}/x", b"before PUBREC", 2, packet_id=1))
    early = delivery(first)
    publish(five, t, Publish(f"{t}/x", b"after PUBREC", 2, packet_id=2))
    late = delivery(first)
    assert (early.qos, late.qos) == (2, 2)
    first.send(PubRec(late.packet_id or 0))
    assert first.next() == PubRel(late.packet_id or 0)
    gone(first)  # the one before PUBREC unanswered, the other before PUBCOMP
    other = _member(five, f"{t}-m2", share, qos=2)
    again, connack = back(five, f"{t}-m1")
    assert connack.session_present
    resent = [again.next(), again.next()]
    assert PubRel(late.packet_id or 0) in resent
    [dup] = [packet for packet in resent if isinstance(packet, Publish)]
    assert (dup.payload, dup.dup, dup.packet_id) == (b"before PUBREC", True, early.packet_id)
    again.send(PubRec(early.packet_id or 0), PubComp(late.packet_id or 0))
    assert quiet(other)


def test_MQTT_4_8_2_6_a_refusing_puback_from_a_member_discards_the_message(five: MqttBroker, t: str) -> None:
    share = f"$share/g/{t}/#"
    refusing = _member(five, f"{t}-m1", share, receive_maximum=1)
    publish(five, t, Publish(f"{t}/x", b"refused", 1, packet_id=1))
    got = delivery(refusing)
    refusing.send(PubAck(got.packet_id or 0, ReasonCode.UNSPECIFIED_ERROR))
    time.sleep(0.3)
    other = _member(five, f"{t}-m2", share)
    gone(refusing)
    assert quiet(other)
