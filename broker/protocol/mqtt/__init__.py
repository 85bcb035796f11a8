"""MQTT 3.1 and 3.1.1, pure: the control packets as values (``packets``), their bytes
(``codec``: :func:`encode` and the incremental :class:`Decoder`), topic name and filter rules
(``names``) and the error that closes a connection (``errors``). The session state machine
and the listener that own a connection build on these."""

from __future__ import annotations

from broker.protocol.mqtt import codec, errors, names, packets, session
from broker.protocol.mqtt.codec import Decoder, encode
from broker.protocol.mqtt.errors import MqttProtocolError, UnacceptableProtocol
from broker.protocol.mqtt.names import validate_filter, validate_topic_name
from broker.protocol.mqtt.packets import (
    CONNACK_ACCEPTED,
    CONNACK_BAD_CREDENTIALS,
    CONNACK_IDENTIFIER_REJECTED,
    CONNACK_NOT_AUTHORIZED,
    CONNACK_SERVER_UNAVAILABLE,
    CONNACK_UNACCEPTABLE_VERSION,
    DEFAULT_MAX_PACKET_SIZE,
    MAX_REMAINING_LENGTH,
    MQTT_31,
    MQTT_311,
    PROTOCOL_NAMES,
    SUBACK_FAILURE,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PingReq,
    PingResp,
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
from broker.protocol.mqtt.session import Session

__all__ = [
    "CONNACK_ACCEPTED",
    "CONNACK_BAD_CREDENTIALS",
    "CONNACK_IDENTIFIER_REJECTED",
    "CONNACK_NOT_AUTHORIZED",
    "CONNACK_SERVER_UNAVAILABLE",
    "CONNACK_UNACCEPTABLE_VERSION",
    "DEFAULT_MAX_PACKET_SIZE",
    "MAX_REMAINING_LENGTH",
    "MQTT_31",
    "MQTT_311",
    "PROTOCOL_NAMES",
    "SUBACK_FAILURE",
    "ConnAck",
    "Connect",
    "Decoder",
    "Disconnect",
    "MqttProtocolError",
    "Packet",
    "PingReq",
    "PingResp",
    "PubAck",
    "PubComp",
    "PubRec",
    "PubRel",
    "Publish",
    "Session",
    "SubAck",
    "Subscribe",
    "UnacceptableProtocol",
    "UnsubAck",
    "Unsubscribe",
    "Will",
    "codec",
    "encode",
    "errors",
    "names",
    "packets",
    "session",
    "validate_filter",
    "validate_topic_name",
]
