"""The codec against bytes real MQTT 5.0 clients write and read: paho-mqtt's v5 client and
Mosquitto's ``mosquitto_pub`` / ``mosquitto_sub -V mqttv5`` talk to a one-connection server
made of this codec, which answers as a broker would. Every packet they send must decode to what
they were asked to send, properties included, and every answer encoded here must reach them
intact (paho's callbacks see its reason codes and properties; mosquitto_sub prints them)."""

from __future__ import annotations

import queue
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties
from paho.mqtt.reasoncodes import ReasonCode as PahoReasonCode
from paho.mqtt.subscribeoptions import SubscribeOptions

from broker.protocol.mqtt import (
    MQTT_5,
    ConnAck,
    Connect,
    Decoder,
    Disconnect,
    Packet,
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
    encode,
)

WAIT = 10
Answer = Callable[[Packet], list[Packet]]


@contextmanager
def server(answer: Answer) -> Iterator[tuple[int, list[Packet]]]:
    """A one-connection server: (its port, the packets the client sent, once the block is over)."""
    received: list[Packet] = []
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(WAIT)

        def serve() -> None:
            connection, _ = listener.accept()
            decoder = Decoder(accept_mqtt5=True)
            with connection:
                while data := connection.recv(65536):
                    for packet in decoder.feed(data):
                        received.append(packet)
                        connection.sendall(b"".join(encode(reply, MQTT_5) for reply in answer(packet)))
                        if isinstance(packet, Disconnect):
                            return

        thread = threading.Thread(target=serve)
        thread.start()
        try:
            yield listener.getsockname()[1], received
        finally:
            thread.join(WAIT)


# --- paho-mqtt ----------------------------------------------------------------------------------

WELCOME = Properties(
    receive_maximum=20,
    server_keep_alive=30,
    retain_available=True,
    reason_string="welcome",
    user_properties=(("server", "codec"),),
    shared_subscription_available=True,
)
DELIVERY = Properties(
    payload_format_indicator=1,
    message_expiry_interval=60,
    content_type="text/plain",
    response_topic="replies/paho",
    correlation_data=b"\x01\x02",
    user_properties=(("a", "1"), ("a", "2")),
)


def broker(packet: Packet) -> list[Packet]:
    """What a broker says to each packet of the paho conversation below."""
    if isinstance(packet, Connect):
        return [ConnAck(False, ReasonCode.SUCCESS, WELCOME)]
    if isinstance(packet, Subscribe):
        delivery = Properties(
            **{**vars_of(DELIVERY), "subscription_identifiers": packet.properties.subscription_identifiers}
        )
        suback = SubAck(
            packet.packet_id,
            (ReasonCode.GRANTED_QOS_1, ReasonCode.NOT_AUTHORIZED),
            Properties(reason_string="one of two"),
        )
        return [suback, Publish("a/x", b"to you", qos=1, packet_id=7, properties=delivery)]
    if isinstance(packet, Publish) and packet.qos == 1:
        return [
            PubAck(
                packet.packet_id or 0, ReasonCode.NO_MATCHING_SUBSCRIBERS, Properties(reason_string="nobody")
            )
        ]
    if isinstance(packet, Publish) and packet.qos == 2:
        return [PubRec(packet.packet_id or 0)]
    if isinstance(packet, PubRel):
        return [PubComp(packet.packet_id, properties=Properties(user_properties=(("done", "yes"),)))]
    if isinstance(packet, Unsubscribe):
        return [UnsubAck(packet.packet_id, (ReasonCode.SUCCESS, ReasonCode.NO_SUBSCRIPTION_EXISTED))]
    return []


def vars_of(value: Properties) -> dict[str, Any]:
    return {name: getattr(value, name) for name in value.__dataclass_fields__}


def paho_properties(packet_type: int, **values: Any) -> PahoProperties:
    properties = PahoProperties(packet_type)
    for name, value in values.items():
        setattr(properties, name, value)
    return properties


def paho_client(events: queue.Queue[tuple[Any, ...]]) -> paho.Client:
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="paho5", protocol=paho.MQTTv5)
    client.username_pw_set("alice", "s3cret")
    will = paho_properties(
        PacketTypes.WILLMESSAGE, WillDelayInterval=10, ContentType="text/plain", UserProperty=("w", "1")
    )
    client.will_set("wills/paho", b"gone", qos=1, retain=True, properties=will)
    client.on_connect = lambda _c, _u, _flags, code, props: events.put(("connack", code, props))
    client.on_subscribe = lambda _c, _u, _mid, codes, props: events.put(("suback", codes, props))
    client.on_message = lambda _c, _u, message: events.put(("message", message))
    client.on_publish = lambda _c, _u, mid, code, props: events.put(("published", mid, code, props))
    client.on_unsubscribe = lambda _c, _u, _mid, codes, props: events.put(("unsuback", codes, props))
    client.on_disconnect = lambda _c, _u, _flags, code, props: events.put(("disconnect", code, props))
    return client


def next_event(events: queue.Queue[tuple[Any, ...]], kind: str) -> tuple[Any, ...]:
    event = events.get(timeout=WAIT)
    assert event[0] == kind, event
    return event[1:]


def test_paho_v5_conversation() -> None:
    """CONNECT with will, SUBSCRIBE with options, a delivery with every message property, QoS 1
    and 2 publications with properties, UNSUBSCRIBE and DISCONNECT with a reason, both ways."""
    events: queue.Queue[tuple[Any, ...]] = queue.Queue()
    client = paho_client(events)
    with server(broker) as (port, received):
        connect_props = paho_properties(
            PacketTypes.CONNECT,
            SessionExpiryInterval=30,
            ReceiveMaximum=10,
            MaximumPacketSize=65536,
            TopicAliasMaximum=4,
            RequestResponseInformation=1,
            UserProperty=("k", "v"),
        )
        client.connect("127.0.0.1", port, keepalive=42, clean_start=True, properties=connect_props)
        client.loop_start()
        try:
            code, props = next_event(events, "connack")
            assert code == 0
            assert (props.ReceiveMaximum, props.ServerKeepAlive, props.ReasonString) == (20, 30, "welcome")
            assert props.UserProperty == [("server", "codec")]

            options = SubscribeOptions(qos=1, noLocal=True, retainAsPublished=True, retainHandling=2)
            sub_props = paho_properties(
                PacketTypes.SUBSCRIBE, SubscriptionIdentifier=7, UserProperty=("s", "1")
            )
            client.subscribe(
                [("a/+", options), ("$share/g/b/#", SubscribeOptions(qos=2))], properties=sub_props
            )
            codes, props = next_event(events, "suback")
            assert [code.value for code in codes] == [0x01, 0x87]
            assert props.ReasonString == "one of two"
            (message,) = next_event(events, "message")
            assert (message.topic, message.payload, message.qos) == ("a/x", b"to you", 1)
            got = message.properties
            assert (got.PayloadFormatIndicator, got.MessageExpiryInterval, got.ContentType) == (
                1,
                60,
                "text/plain",
            )
            assert (got.ResponseTopic, got.CorrelationData, got.SubscriptionIdentifier) == (
                "replies/paho",
                b"\x01\x02",
                [7],
            )
            assert got.UserProperty == [("a", "1"), ("a", "2")]

            pub_props = paho_properties(
                PacketTypes.PUBLISH,
                MessageExpiryInterval=30,
                ResponseTopic="re/ply",
                CorrelationData=b"id",
                UserProperty=("u", "1"),
                PayloadFormatIndicator=1,
                ContentType="application/json",
            )
            client.publish("up/1", b'{"n": 1}', qos=1, properties=pub_props)
            _, code, props = next_event(events, "published")
            assert code == ReasonCode.NO_MATCHING_SUBSCRIBERS
            assert props.ReasonString == "nobody"
            client.publish("up/2", b"two", qos=2, retain=True)
            _, code, props = next_event(events, "published")
            assert code == 0

            client.unsubscribe(["a/+", "gone"])
            codes, _ = next_event(events, "unsuback")
            assert [code.value for code in codes] == [0x00, 0x11]

            reason = PahoReasonCode(PacketTypes.DISCONNECT, "Disconnect with will message")
            client.disconnect(
                reasoncode=reason, properties=paho_properties(PacketTypes.DISCONNECT, SessionExpiryInterval=0)
            )
        finally:
            client.loop_stop()

    connect, subscribe, puback, publish1, publish2, pubrel, unsubscribe, disconnect = received
    will = Will(
        "wills/paho",
        b"gone",
        1,
        True,
        Properties(content_type="text/plain", will_delay_interval=10, user_properties=(("w", "1"),)),
    )
    assert connect == Connect(
        "MQTT",
        MQTT_5,
        "paho5",
        True,
        42,
        will,
        "alice",
        b"s3cret",
        Properties(
            session_expiry_interval=30,
            receive_maximum=10,
            maximum_packet_size=65536,
            topic_alias_maximum=4,
            request_response_information=True,
            user_properties=(("k", "v"),),
        ),
    )
    assert isinstance(subscribe, Subscribe)
    assert isinstance(publish1, Publish) and isinstance(publish2, Publish)
    assert isinstance(unsubscribe, Unsubscribe)
    assert subscribe.topics == (
        ("a/+", SubscriptionOptions.of(1, no_local=True, retain_as_published=True, retain_handling=2)),
        ("$share/g/b/#", 2),
    )
    assert subscribe.properties == Properties(subscription_identifiers=(7,), user_properties=(("s", "1"),))
    assert puback == PubAck(7)
    assert publish1 == Publish(
        "up/1",
        b'{"n": 1}',
        1,
        False,
        False,
        publish1.packet_id,
        Properties(
            payload_format_indicator=1,
            message_expiry_interval=30,
            content_type="application/json",
            response_topic="re/ply",
            correlation_data=b"id",
            user_properties=(("u", "1"),),
        ),
    )
    assert publish2 == Publish("up/2", b"two", 2, True, False, publish2.packet_id)
    assert pubrel == PubRel(publish2.packet_id or 0)
    assert unsubscribe == Unsubscribe(unsubscribe.packet_id, ("a/+", "gone"))
    assert disconnect == Disconnect(
        ReasonCode.DISCONNECT_WITH_WILL_MESSAGE, Properties(session_expiry_interval=0)
    )


def test_paho_reads_a_disconnect_from_the_server() -> None:
    goodbye = Disconnect(
        ReasonCode.SERVER_SHUTTING_DOWN, Properties(reason_string="bye", server_reference="other:1883")
    )

    def shut_down(packet: Packet) -> list[Packet]:
        return [ConnAck(False, ReasonCode.SUCCESS), goodbye] if isinstance(packet, Connect) else []

    events: queue.Queue[tuple[Any, ...]] = queue.Queue()
    client = paho_client(events)
    with server(shut_down) as (port, _received):
        client.connect("127.0.0.1", port, clean_start=True)
        client.loop_start()
        try:
            next_event(events, "connack")
            code, props = next_event(events, "disconnect")
        finally:
            client.loop_stop()
    assert code == ReasonCode.SERVER_SHUTTING_DOWN
    assert (props.ReasonString, props.ServerReference) == ("bye", "other:1883")


# --- Mosquitto ----------------------------------------------------------------------------------


def run(command: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command.split(), capture_output=True, text=True, timeout=WAIT * 3)
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.parametrize("qos", [0, 1, 2])
def test_mosquitto_pub_v5(qos: int) -> None:
    def answer(packet: Packet) -> list[Packet]:
        if isinstance(packet, Connect):
            return [ConnAck(False, ReasonCode.SUCCESS, Properties(maximum_qos=1 if qos < 2 else None))]
        if isinstance(packet, Publish) and packet.qos:
            ack = PubAck if packet.qos == 1 else PubRec
            return [ack(packet.packet_id or 0, ReasonCode.NO_MATCHING_SUBSCRIBERS)]
        return [PubComp(packet.packet_id)] if isinstance(packet, PubRel) else []

    with server(answer) as (port, received):
        run(
            f"mosquitto_pub -h 127.0.0.1 -p {port} -V mqttv5 -i codec5 -k 42 -u alice -P s3cret "
            "-D connect session-expiry-interval 30 -D connect receive-maximum 5 -D connect user-property k v "
            "--will-topic wills/codec --will-payload gone --will-qos 1 -D will will-delay-interval 5 "
            "-D publish content-type text/plain -D publish user-property a 1 "
            "-D publish message-expiry-interval 60 "
            f"-D publish response-topic re/ply -D publish correlation-data cd -t a/ü/b -m hello -q {qos} -r"
        )
    connect, publish, *rest = received
    assert connect == Connect(
        "MQTT",
        MQTT_5,
        "codec5",
        True,
        42,
        Will("wills/codec", b"gone", 1, False, Properties(will_delay_interval=5)),
        "alice",
        b"s3cret",
        Properties(session_expiry_interval=30, receive_maximum=5, user_properties=(("k", "v"),)),
    )
    expected = Properties(
        message_expiry_interval=60,
        content_type="text/plain",
        response_topic="re/ply",
        correlation_data=b"cd",
        user_properties=(("a", "1"),),
    )
    assert isinstance(publish, Publish)
    assert publish == Publish("a/ü/b", b"hello", qos, True, False, publish.packet_id, expected)
    assert rest[-1] == Disconnect()


def test_mosquitto_sub_v5_reads_every_delivery_property() -> None:
    delivery = Properties(**{**vars_of(DELIVERY), "subscription_identifiers": (9,)})

    def answer(packet: Packet) -> list[Packet]:
        if isinstance(packet, Connect):
            return [ConnAck(False, ReasonCode.SUCCESS)]
        if isinstance(packet, Subscribe):
            return [
                SubAck(packet.packet_id, (ReasonCode.GRANTED_QOS_2,)),
                Publish("sport/x/score", b"1-0", 2, False, False, 3, delivery),
            ]
        if isinstance(packet, PubRec):
            return [PubRel(packet.packet_id)]
        return []

    with server(answer) as (port, received):
        done = run(
            f"mosquitto_sub -h 127.0.0.1 -p {port} -V mqttv5 -i codec5-sub -t sport/+/score -q 2 -C 1 "
            "-D subscribe subscription-identifier 9 -F %t|%p|%C|%E|%F|%R|%S|%P"
        )
    assert done.stdout.strip() == "sport/x/score|1-0|text/plain|60|1|replies/paho|9|a:1 a:2"
    _connect, subscribe, pubrec, pubcomp, disconnect = received
    assert isinstance(subscribe, Subscribe)
    assert subscribe.topics == (("sport/+/score", 2),)
    assert subscribe.properties == Properties(subscription_identifiers=(9,))
    assert (pubrec, pubcomp, disconnect) == (PubRec(3), PubComp(3), Disconnect())
